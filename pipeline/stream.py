"""The ``inkpen`` streaming source: the change feed as a Spark Structured Streaming source.

::

    changes = spark.readStream.format("inkpen").option("path", url).load()

Rows have the schema of a read (:func:`inkpen.pipeline.schema.row_schema`): ``bucket``, ``key``
(binary, or string with ``key_type=string``), ``value`` (binary, null for a delete), ``sqn``
(bigint), ``kind`` (``put`` / ``delete``), ``last_modified`` (timestamp). With ``values=false`` a
row has ``size`` (the value's length, null for a delete) instead of ``value``; ``indexes=true``
is refused (a change carries index operations, not the live entries a read's ``indexes``
column holds).

Spark asks a Python data source for its schema in the same way for ``spark.read`` and
``spark.readStream`` (the ``create_data_source`` worker sees the same options, nothing tells a
stream from a read), so :meth:`.source.InkpenDataSource.schema` answers one schema for both.
When no option names the stream (``feed=true`` or one of
:data:`~inkpen.pipeline.options.FEED_OPTIONS`) it pins a checkpoint as a read must; the stream
then deletes that checkpoint when Spark creates its reader (:func:`release_read_pin`). The
options of a read that a stream cannot honour (``checkpoint``, ``bucket``, ``partitions``, ...)
are refused then, before any batch runs.

Offsets are SQNs: ``{"sqn": n}`` means every change up to SQN n. The protocol, with where each
step runs:

==============================  ========  ==================================================
``initialOffset``               driver    create the feed cursor ``cursor`` (default
                                          ``spark-stream``) at ``starting_sqn`` (0) unless it
                                          is live; the stream starts at its SQN
``latestOffset``                driver    a following Reader (:mod:`inkpen.actors.read.
                                          follower`) refreshes; its last SQN, at most
                                          ``max_rows_per_batch`` above the last offset planned
``partitions(start, end)``      driver    ``(start, end]`` split into ranges of about
                                          ``rows_per_partition`` SQNs
``read(partition)``             executor  a Reader on the latest state streams the range's
                                          changes as Arrow batches; a gap (compaction removed
                                          changes) fails the batch with ``FeedGapError``
``commit(end)``                 driver    advance the cursor to ``end``
==============================  ========  ==================================================

Exactly once: a batch's rows are a function of its offsets alone (the SQNs in ``(start, end]``
never change), and the cursor sits at or below every offset Spark may still replay (it moves only
on commit), so compaction keeps what a restarted query reads again. A restarted query resumes
from its checkpointed offsets; ``initialOffset`` is asked only by a new query.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from inkpen.errors import NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import delete_checkpoint
from inkpen.manifest.feed_cursors import (
    advance_feed_cursor,
    check_name,
    create_feed_cursor,
)
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store

from .options import (
    FEED_OPTIONS,
    READ_OPTIONS,
    KeyType,
    _bool,
    _int,
    _lowered,
    _refuse_unknown,
    _seconds,
    _url,
)
from .pinning import PinnedRead
from .schema import row_schema

log = get_logger("inkpen.pipeline.stream")

STREAM_OPTIONS = FEED_OPTIONS | {"path", "feed", "batch_rows", "key_type", "values", "indexes"}
DEFAULT_CURSOR = "spark-stream"


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What a stream asked for (see the module docstring)."""

    url: str
    cursor: str = DEFAULT_CURSOR
    cursor_lifetime: float | None = None
    starting_sqn: int = 0
    max_rows_per_batch: int | None = None
    rows_per_partition: int = 250_000
    batch_rows: int = 8192
    key_type: KeyType = "binary"
    refresh_interval: float = 1.0
    values: bool = True


def names_stream(options: Mapping[str, str]) -> bool:
    """True when the options can only be a stream's: ``feed=true`` or a feed-only option."""
    given = _lowered(options)
    return _bool(given, "feed", False) or bool(set(given) & FEED_OPTIONS)


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    given = _lowered(options)
    for_reads = sorted(set(given) & (READ_OPTIONS - STREAM_OPTIONS))
    if for_reads:
        raise UsageError(
            f"option(s) {', '.join(for_reads)} are for spark.read (one checkpoint's objects); "
            "a stream reads every change since its cursor and takes: "
            f"{', '.join(sorted(STREAM_OPTIONS))}"
        )
    _refuse_unknown(given, STREAM_OPTIONS, "stream")
    if _bool(given, "indexes", False):
        raise UsageError(
            "option indexes=true is for spark.read: a change carries the index operations of "
            "its write, not an object's live index entries; leave the option out of the stream"
        )
    key_type = str(given.get("key_type", "binary")).strip().lower()
    if key_type not in ("binary", "string"):
        raise UsageError(f"option key_type must be binary or string, got {key_type!r}")
    cursor = check_name(str(given.get("cursor", DEFAULT_CURSOR)))
    lifetime = given.get("cursor_lifetime")
    starting = _int(given, "starting_sqn", 0, 0, 1 << 62)
    per_batch = _int(given, "max_rows_per_batch", None, 1, 1 << 40)
    per_partition = _int(given, "rows_per_partition", 250_000, 1, 1 << 40)
    batch_rows = _int(given, "batch_rows", 8192, 1, 1_000_000)
    assert starting is not None and per_partition is not None and batch_rows is not None
    return StreamOptions(
        url=_url(given, "stream"),
        cursor=cursor,
        cursor_lifetime=None if lifetime is None else _seconds(given, "cursor_lifetime", 0.0),
        starting_sqn=starting,
        max_rows_per_batch=per_batch,
        rows_per_partition=per_partition,
        batch_rows=batch_rows,
        key_type="string" if key_type == "string" else "binary",
        refresh_interval=_seconds(given, "refresh_interval", 1.0),
        values=_bool(given, "values", True),
    )


def feed_schema(options: StreamOptions) -> StructType:
    """The stream's schema: a read's (:func:`~inkpen.pipeline.schema.row_schema`), no indexes."""
    return row_schema(options.key_type, values=options.values, indexes=False)


def release_read_pin(url: str, pinned: PinnedRead | None) -> None:
    """Delete the checkpoint ``schema()`` pinned for what turned out to be a stream.

    Idempotent: Spark creates a stream's reader more than once (on the driver and to plan).
    """
    if pinned is None or not pinned.owned:
        return
    manifests = ManifestStore(open_store(url))
    try:
        delete_checkpoint(manifests, pinned.checkpoint_id)
    except NotFoundError:
        return
    finally:
        manifests.store.close()
    log.info("pipeline.stream_released_pin", url=url, checkpoint=pinned.checkpoint_id)


@dataclass(frozen=True)
class SqnRange(InputPartition):
    """The changes with ``start < sqn <= end``."""

    start: int
    end: int


def _sqn(offset: Mapping[str, Any]) -> int:
    value = offset.get("sqn")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"an inkpen stream offset is {{'sqn': n}}, got {offset!r}")
    return value


class InkpenStreamReader(DataSourceStreamReader):
    """The change feed as micro-batches (see the module docstring)."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._follower: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_follower": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _manifests(self) -> ManifestStore:
        return ManifestStore(open_store(self.options.url))

    def initialOffset(self) -> dict[Any, Any]:
        manifests = self._manifests()
        try:
            cursor = create_feed_cursor(
                manifests,
                self.options.cursor,
                self.options.starting_sqn,
                lifetime=self.options.cursor_lifetime,
                exist_ok=True,
            )
        finally:
            manifests.store.close()
        log.info(
            "pipeline.stream_started", url=self.options.url, cursor=cursor.name, sqn=cursor.sqn
        )
        return {"sqn": cursor.sqn}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_rows_per_batch
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:
        from inkpen.reader import open_reader

        if self._follower is None:
            self._follower = open_reader(
                self.options.url, follow=True, refresh_interval=self.options.refresh_interval
            )
        else:
            self._follower.refresh()
        last = max(int(self._follower.last_sqn), _sqn(start))
        if isinstance(limit, ReadMaxRows):
            last = min(last, _sqn(start) + limit.max_rows)
        return {"sqn": last}

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        lo, hi = _sqn(start), _sqn(end)
        step = self.options.rows_per_partition
        return [SqnRange(s, min(s + step, hi)) for s in range(lo, hi, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from inkpen.reader import open_reader

        assert isinstance(partition, SqnRange)
        schema = to_arrow_schema(feed_schema(self.options), timezone="UTC")
        text = self.options.key_type == "string"
        values = self.options.values
        rows = self.options.batch_rows
        with open_reader(self.options.url) as reader:
            if reader.last_sqn < partition.end:
                raise UsageError(
                    f"the database at {self.options.url} ends at SQN {reader.last_sqn}, below "
                    f"this batch's end {partition.end}: was it restored from an older copy?"
                )
            columns: list[list[Any]] = [[], [], [], [], [], []]
            for change in reader.changes(partition.start):
                if change.sqn > partition.end:
                    break
                b, k = change.bucket, change.key
                columns[0].append(b.decode() if text else b)
                columns[1].append(k.decode() if text else k)
                value = change.value
                columns[2].append(value if values or value is None else len(value))
                columns[3].append(change.sqn)
                columns[4].append(change.kind)
                columns[5].append(int(change.last_modified * 1_000_000))
                if len(columns[3]) >= rows:
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                        schema=schema,
                    )
                    columns = [[], [], [], [], [], []]
            if columns[3]:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                    schema=schema,
                )

    def commit(self, end: dict[Any, Any]) -> None:
        sqn = _sqn(end)
        manifests = self._manifests()
        try:
            advance_feed_cursor(manifests, self.options.cursor, sqn)
        except UsageError as exc:  # already further on (another query), or expired
            log.warning(
                "pipeline.stream_cursor_not_advanced", cursor=self.options.cursor, error=str(exc)
            )
        except NotFoundError:
            log.warning("pipeline.stream_cursor_missing", cursor=self.options.cursor, sqn=sqn)
            with contextlib.suppress(UsageError):
                create_feed_cursor(
                    manifests, self.options.cursor, sqn, lifetime=self.options.cursor_lifetime
                )
        finally:
            manifests.store.close()

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None
