"""The ``inkpen`` data source: the PySpark classes, and where each step of a job runs.

PySpark's Python data source API (``pyspark.sql.datasource``) runs each method in a Python
process of its own; the state between them travels pickled. This module only wires the steps to
the modules that own them:

==========================================  ============  ======================================
method                                      runs          does
==========================================  ============  ======================================
``InkpenDataSource.schema``                 driver, at    checks the options, pins the
                                            ``load()``    checkpoint (:mod:`.pinning`) unless
                                                          they name a stream (:mod:`.stream`)
``InkpenReader.partitions``                 driver, the   checks the pin, plans partitions
                                            first action  (:mod:`.plan`) over the ranges the
                                                          options allow (:mod:`.ranges`)
``InkpenReader.read``                       executor      streams one partition as Arrow
                                                          batches (:mod:`.scan`)
``InkpenDataSource.writer``                 driver        checks options and columns, opens or
                                                          creates the database (:mod:`.target`)
``InkpenWriter.write``                      executor      writes one task's files
                                                          (:mod:`.load_task`)
``InkpenWriter.commit`` / ``abort``         driver        one CAS (:mod:`.commit`) / nothing
==========================================  ============  ======================================

Errors raised on the driver reach the caller before any task runs, as Spark's
``AnalysisException`` carrying inkpen's message.

**No filter pushdown, by design.** Spark 4 (through 4.3) keeps *one* read plan per loaded
DataFrame: the partitions and the pickled reader that ``pushFilters`` produced are cached on the
table object and reused by every later scan of that DataFrame that pushes no filter, and by the
other scans of the same plan (a self-join gets the last one planned). A reader that narrowed
its ranges for one filter would then answer an unfiltered ``count()``, or the other side of a
join, with that filter's subset. So ``InkpenReader`` does not implement ``pushFilters``: its
plan depends only on the DataFrame's options, which belong to that DataFrame alone, and Spark
evaluates every filter itself. Narrow a read with the options ``bucket``, ``start``, ``end``
(docs/spark.md, 'No pushed filters'). This also means a session without
``spark.sql.python.filterPushdown.enabled`` reads exactly as one with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from inkpen.errors import UsageError
from inkpen.logs import get_logger
from inkpen.objectstore import open_store

from . import gc_pause
from .commit import commit_load, log_abort
from .load_task import LoadedPartition, write_partition
from .options import (
    READ_OPTIONS,
    ReadOptions,
    _bool,
    _lowered,
    _refuse_unknown,
    _url,
    parse_load_options,
    parse_read_options,
    parse_shards,
)
from .pinning import PinnedRead, pin_for_read, pinned_manifest
from .plan import plan_slices
from .ranges import Scope
from .scan import ScanSpec, scan_slice
from .schema import load_columns, read_schema
from .sharded import DataSet, ShardedReader, ShardPin, data_set_of, pin_shards, with_shard_column
from .sharded_load import ShardedTarget, commit_shards, prepare_sharded_load, write_shards
from .sharded_stream import ShardedStreamReader, per_shard_starting, refuse_shard_starting
from .stream import (
    STREAM_OPTIONS,
    InkpenStreamReader,
    Starting,
    StreamOptions,
    feed_schema,
    names_stream,
    parse_stream_options,
    release_read_pin,
)
from .target import LoadTarget, prepare_load

NAME = "inkpen"

log = get_logger("inkpen.pipeline")


class InkpenDataSource(DataSource):
    """``spark.read.format("inkpen")`` and ``df.write.format("inkpen")`` (see the package)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Spark asks this for spark.read and spark.readStream alike, with the same options:
        # one schema serves both (inkpen.pipeline.schema), and a read's pin is released by a
        # stream (streamReader)
        _refuse_unknown(_lowered(self.options), READ_OPTIONS | STREAM_OPTIONS, "read or stream")
        if names_stream(self.options):  # only a stream: nothing to pin
            stream, data_set, _ = _stream_setup(self.options)
            return _tagged(feed_schema(stream), data_set)
        options = parse_read_options(self.options)
        data_set = data_set_of(options.url, options.shards)
        if data_set is None:
            self.pinned = pin_for_read(options)
        else:
            self.shard_pins = pin_shards(options, data_set)
        return _tagged(read_schema(options), data_set)

    def reader(self, schema: StructType) -> DataSourceReader:
        if _bool(_lowered(self.options), "feed", False):
            raise UsageError(
                "option feed=true is the change feed, a stream: read it with spark.readStream "
                "(with trigger(availableNow=True) for one pass over what is there)"
            )
        options = parse_read_options(self.options)
        data_set = data_set_of(options.url, options.shards)
        expected = _tagged(read_schema(options), data_set)
        if schema != expected:
            raise UsageError(
                "an inkpen read has a fixed schema and takes none from .schema(...); with these "
                f"options it is {expected.simpleString()}"
            )
        if data_set is not None:
            pins: tuple[ShardPin, ...] | None = getattr(self, "shard_pins", None)
            return ShardedReader(
                options, pins if pins is not None else pin_shards(options, data_set)
            )
        pinned: PinnedRead | None = getattr(self, "pinned", None)
        return InkpenReader(options, pinned if pinned is not None else pin_for_read(options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        pinned: PinnedRead | None = getattr(self, "pinned", None)
        if pinned is not None:  # schema() could not tell this stream from a read
            release_read_pin(_url(_lowered(self.options), "stream"), pinned)
        for pin in getattr(self, "shard_pins", None) or ():
            release_read_pin(pin.options.url, pin.pinned)
        options, data_set, starting = _stream_setup(self.options)
        expected = _tagged(feed_schema(options), data_set)
        if schema != expected:
            raise UsageError(
                "the inkpen change feed has a fixed schema and takes none from .schema(...); "
                f"with these options it is {expected.simpleString()}"
            )
        if data_set is not None:
            return ShardedStreamReader(options, data_set, starting)
        return InkpenStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise UsageError(
                "an inkpen bulk load only adds to a database: use .mode('append') (the only "
                "save mode that works; overwrite, and Spark's default errorifexists and ignore, "
                "are refused), as in df.write.format('inkpen').option('path', url)"
                ".mode('append').save(). To replace objects, load their new values (a load's "
                "values win over older ones); to start from nothing, load into a new database"
            )
        options = parse_load_options(self.options)
        columns = load_columns(schema)
        data_set = data_set_of(options.url, None)
        if data_set is not None:
            return ShardedWriter(prepare_sharded_load(options, columns, data_set))
        return InkpenWriter(prepare_load(options, columns), options.load_id)


def _tagged(schema: StructType, data_set: DataSet | None) -> StructType:
    """A data set's rows carry their ``shard``; one database's do not."""
    return schema if data_set is None else with_shard_column(schema)


def _stream_setup(
    given_options: Mapping[str, str],
) -> tuple[StreamOptions, DataSet | None, dict[int, Starting]]:
    """A stream's options, the data set it follows (None: one database), and where each of the
    data set's shards starts."""
    given = _lowered(given_options)
    raw_starting = given.get("startingoffsets")
    data_set = data_set_of(_url(given, "stream"), parse_shards(given))
    if data_set is None:
        refuse_shard_starting(raw_starting)
        return parse_stream_options(given_options), None, {}
    options = parse_stream_options(given_options, data_set=True)
    return options, data_set, per_shard_starting(raw_starting, data_set)


class InkpenReader(DataSourceReader):
    """Reads the pinned checkpoint over the ranges the options allow; partitions split them.

    Its state is fixed when Spark creates it (options and pin), and no method changes it: Spark
    may reuse one reader for every action on a DataFrame (see the module's docstring).
    """

    def __init__(self, options: ReadOptions, pinned: PinnedRead) -> None:
        self.options = options
        self.pinned = pinned
        self.scope = Scope.of(options)

    def partitions(self) -> Sequence[InputPartition]:
        store = open_store(self.options.url)
        try:
            manifest = pinned_manifest(store, self.pinned)
        finally:
            store.close()
        slices = plan_slices(manifest, self.pinned.manifest_id, self.scope.ranges(), self.options)
        return [InputPartition(slice_) for slice_ in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        spec = ScanSpec(
            url=self.options.url,
            checkpoint_id=self.pinned.checkpoint_id,
            values=self.options.values,
            indexes=self.options.indexes,
            key_type=self.options.key_type,
            batch_rows=self.options.batch_rows,
            now_ms=self.pinned.now_ms,
            read_ahead_bytes=self.options.read_ahead_bytes,
            cache_dir=self.options.cache_dir,
            cache_dir_bytes=self.options.cache_dir_bytes,
        )
        arrow = to_arrow_schema(read_schema(self.options), timezone="UTC")
        return gc_pause.paused_between(scan_slice(spec, partition.value, arrow))


@dataclass(frozen=True)
class LoadMessage(WriterCommitMessage):
    """What one task attempt tells the driver: the files it wrote, or why its rows were refused."""

    loaded: LoadedPartition | None
    rejected: str | None = None


class InkpenWriter(DataSourceArrowWriter):
    """A bulk load: tasks write files, the driver commits them in one manifest update."""

    def __init__(self, target: LoadTarget, load_id: str | None = None) -> None:
        self.target = target
        self.load_id = load_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LoadMessage:
        context = TaskContext.get()
        if context is None:
            raise UsageError(
                "InkpenWriter.write runs inside Spark tasks; outside Spark, call "
                "inkpen.pipeline.load_task.write_partition"
            )
        try:
            with gc_pause.paused():
                loaded = write_partition(
                    self.target,
                    iterator,
                    partition_id=context.partitionId(),
                    attempt=context.attemptNumber(),
                )
        except UsageError as exc:
            # A bad row (a null column, a negative ttl) fails every attempt alike: report it to
            # the driver, which refuses the commit with this one message, rather than fail the
            # task and have Spark retry it spark.task.maxFailures times. It wrote no file.
            log.warning(
                "pipeline.load_task_rejected",
                url=self.target.url,
                partition=context.partitionId(),
                error=str(exc),
            )
            return LoadMessage(None, rejected=str(exc))
        return LoadMessage(loaded)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rejected = [m.rejected for m in messages if isinstance(m, LoadMessage) and m.rejected]
        if rejected:
            more = len(rejected) - 1
            also = f" (and {more} more partitions had bad rows)" if more else ""
            raise UsageError(
                f"the bulk load into {self.target.url} was not committed: {rejected[0]}{also}; "
                "nothing was loaded. Fix or filter those rows and run the load again"
            )
        commit_load(self.target.url, [_loaded(m) for m in messages], load_id=self.load_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log_abort(self.target.url, [_loaded(m) for m in messages])


@dataclass(frozen=True)
class ShardedLoadMessage(WriterCommitMessage):
    """What one task attempt of a data set load tells the driver: each shard's files, or why
    its rows were refused."""

    loaded: dict[int, LoadedPartition] | None
    rejected: str | None = None


class ShardedWriter(DataSourceArrowWriter):
    """A bulk load into a data set: tasks route rows to shards, the driver commits each shard
    (:mod:`.sharded_load`)."""

    def __init__(self, target: ShardedTarget) -> None:
        self.target = target

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ShardedLoadMessage:
        context = TaskContext.get()
        if context is None:
            raise UsageError(
                "ShardedWriter.write runs inside Spark tasks; outside Spark, call "
                "inkpen.pipeline.sharded_load.write_shards"
            )
        try:
            with gc_pause.paused():
                loaded = write_shards(
                    self.target,
                    iterator,
                    partition_id=context.partitionId(),
                    attempt=context.attemptNumber(),
                )
        except UsageError as exc:  # as InkpenWriter.write: report once, no retries
            log.warning(
                "pipeline.load_task_rejected",
                url=self.target.url,
                partition=context.partitionId(),
                error=str(exc),
            )
            return ShardedLoadMessage(None, rejected=str(exc))
        return ShardedLoadMessage(loaded)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rejected = [
            m.rejected for m in messages if isinstance(m, ShardedLoadMessage) and m.rejected
        ]
        if rejected:
            more = len(rejected) - 1
            also = f" (and {more} more partitions had bad rows)" if more else ""
            raise UsageError(
                f"the bulk load into the data set {self.target.url} was not committed: "
                f"{rejected[0]}{also}; nothing was loaded. Fix or filter those rows and run the "
                "load again"
            )
        commit_shards(self.target, [_shard_parts(m) for m in messages])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        for shard, target in enumerate(self.target.targets):
            parts = [_shard_parts(m) for m in messages]
            log_abort(target.url, [p.get(shard) if p is not None else None for p in parts])


def _shard_parts(message: WriterCommitMessage | None) -> dict[int, LoadedPartition] | None:
    return message.loaded if isinstance(message, ShardedLoadMessage) else None


def _loaded(message: WriterCommitMessage | None) -> LoadedPartition | None:
    return message.loaded if isinstance(message, LoadMessage) else None
