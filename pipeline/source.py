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
(DESIGN.md section 9.1). This also means a session without
``spark.sql.python.filterPushdown.enabled`` reads exactly as one with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from inkpen.errors import UsageError
from inkpen.logs import get_logger
from inkpen.objectstore import open_store

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
)
from .pinning import PinnedRead, pin_for_read, pinned_manifest
from .plan import plan_slices
from .ranges import Scope
from .scan import ScanSpec, scan_slice
from .schema import load_columns, read_schema
from .stream import (
    STREAM_OPTIONS,
    InkpenStreamReader,
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
            return feed_schema(parse_stream_options(self.options))
        options = parse_read_options(self.options)
        self.pinned = pin_for_read(options)
        return read_schema(options)

    def reader(self, schema: StructType) -> InkpenReader:
        if _bool(_lowered(self.options), "feed", False):
            raise UsageError(
                "option feed=true is the change feed, a stream: read it with spark.readStream "
                "(with trigger(availableNow=True) for one pass over what is there)"
            )
        options = parse_read_options(self.options)
        expected = read_schema(options)
        if schema != expected:
            raise UsageError(
                "an inkpen read has a fixed schema and takes none from .schema(...); with these "
                f"options it is {expected.simpleString()}"
            )
        pinned: PinnedRead | None = getattr(self, "pinned", None)
        return InkpenReader(options, pinned if pinned is not None else pin_for_read(options))

    def streamReader(self, schema: StructType) -> InkpenStreamReader:
        pinned: PinnedRead | None = getattr(self, "pinned", None)
        if pinned is not None:  # schema() could not tell this stream from a read
            release_read_pin(_url(_lowered(self.options), "stream"), pinned)
        options = parse_stream_options(self.options)
        expected = feed_schema(options)
        if schema != expected:
            raise UsageError(
                "the inkpen change feed has a fixed schema and takes none from .schema(...); "
                f"with these options it is {expected.simpleString()}"
            )
        return InkpenStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> InkpenWriter:
        if overwrite:
            raise UsageError(
                "an inkpen bulk load only adds to a database: use .mode('append'); to replace "
                "objects, load the new values (the load's values win over older ones)"
            )
        options = parse_load_options(self.options)
        return InkpenWriter(prepare_load(options, load_columns(schema)))


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
        )
        arrow = to_arrow_schema(read_schema(self.options), timezone="UTC")
        return scan_slice(spec, partition.value, arrow)


@dataclass(frozen=True)
class LoadMessage(WriterCommitMessage):
    """What one task attempt tells the driver: the files it wrote, or why its rows were refused."""

    loaded: LoadedPartition | None
    rejected: str | None = None


class InkpenWriter(DataSourceArrowWriter):
    """A bulk load: tasks write files, the driver commits them in one manifest update."""

    def __init__(self, target: LoadTarget) -> None:
        self.target = target

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LoadMessage:
        context = TaskContext.get()
        if context is None:
            raise UsageError(
                "InkpenWriter.write runs inside Spark tasks; outside Spark, call "
                "inkpen.pipeline.load_task.write_partition"
            )
        try:
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
        commit_load(self.target.url, [_loaded(m) for m in messages])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log_abort(self.target.url, [_loaded(m) for m in messages])


def _loaded(message: WriterCommitMessage | None) -> LoadedPartition | None:
    return message.loaded if isinstance(message, LoadMessage) else None
