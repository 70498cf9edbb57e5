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

Offsets are ``{"sqn": n, "cursor": name, "history": h}``: the query has read every change up to
SQN n, ``name`` is its feed cursor, and ``h`` is the last SQN written before the query started
(absent when it started at ``latest``, or from a checkpoint written before it was kept).
Spark keeps them in the query's checkpoint, so a query's position is its own, whatever other
queries on the same database do. The protocol, with where each step runs:

==================================  ========  ==============================================
``initialOffset``                   driver    a new query only: its start, from
                                              ``startingOffsets`` (below); creates its own feed
                                              cursor there and names it in the offset
``prepareForTriggerAvailableNow``   driver    ``trigger(availableNow=True)``: the latest SQN
                                              now is where the run ends
``latestOffset(start, limit)``      driver    a following Reader (:mod:`inkpen.actors.read.
                                              follower`) refreshes; its last SQN, at most
                                              ``max_rows_per_batch`` above ``start`` (and the
                                              availableNow end); renews the cursor when due
``partitions(start, end)``          driver    ``(start, end]`` split into ranges of about
                                              ``rows_per_partition`` SQNs
``read(partition)``                 executor  a Reader on the latest state streams the range's
                                              changes as Arrow batches; a gap above the
                                              query's history (compaction removed changes)
                                              fails the batch with ``FeedGapError``
``commit(end)``                     driver    advance the cursor to ``end``, renewing it
==================================  ========  ==============================================

Where a new query starts: ``startingOffsets`` is ``earliest`` (the default: every change from
SQN 1 on), ``latest`` (only changes written after the query starts), or an SQN N (the changes
with SQN above N, as an offset ``{"sqn": N}`` means; ``{"sqn": N}`` itself is accepted too, and
``starting_sqn=N`` is the older spelling of the same).

The history a new query finds. Before a query holds its cursor, the store may already have let
go of changes that later ones replaced: journal compaction drops them, and the journal leaves a
small value to the ledger once the ledger holds it, so a value replaced since is gone. A query
starting below the last SQN written so far (``earliest``, or an SQN) therefore reads that
history as a compacted topic is read: every change still there, which includes the latest
change of every key; the removed ones (replaced before the query began) are skipped, counted
in the ``pipeline.stream_history_skipped`` event. Above the history (``h`` in the offsets) the
query's cursor has held everything since it was made, and a missing change fails the batch with
``FeedGapError``, as always. It is read by ``initialOffset`` alone,
which Spark asks only of a query with no offsets in its checkpoint: a restarted query resumes
from its checkpointed offsets. The reader implements ``SupportsTriggerAvailableNow``, so
``availableNow`` runs do not ask ``initialOffset`` again either.

The feed cursor. Spark does not tell a Python stream reader its checkpoint location (the
``checkpointLocation`` Spark passes to ``Scan.toMicroBatchStream`` is dropped before Python sees
the source; the reader's options are ``readStream``'s only), so a new query names its cursor
``spark-stream-<12 hex digits>`` and records the name in its first offset; every later offset
carries it, so the name lives in the checkpoint and survives restarts. ``.option("cursor",
NAME)`` names it instead (queries that share a name share a cursor: each then holds only what
the furthest commit left). Offsets of checkpoints written before cursors were named in them
(``{"sqn": n}``) use the cursor ``spark-stream`` these queries held. The cursor records its owner
(``spark stream on <host>, named by its checkpoint's offsets``, or ``... by its cursor
option``: ``inkpen feed list`` shows it and its age)
and lives ``cursor_lifetime`` seconds (3 days by default) from its last renewal: every commit
renews it, and ``latestOffset`` renews it when a quarter of its lifetime has passed (a running
query with nothing to read), so only a query that stops running lets it lapse, and then stops
holding compaction back.

A query that resumes (its reader's first ``latestOffset``, ``partitions`` or ``commit``) and
finds its cursor missing or lapsed creates it again at its position and then reads every change
above that position once: if compaction removed one meanwhile, the query fails with
``FeedGapError`` (never fewer rows than were written) and the cursor it re-created is deleted;
otherwise it goes on.

Exactly once: a batch's rows are a function of its offsets alone (the SQNs in ``(start, end]``
never change), and the cursor sits at or below every offset Spark may still replay (it moves only
on commit), so compaction keeps what a restarted query reads again.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from inkpen.actors.read.feed import Change, gap_error
from inkpen.errors import FeedGapError, NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import delete_checkpoint
from inkpen.manifest.feed_cursors import (
    Held,
    check_name,
    delete_feed_cursor,
    hold_feed_cursor,
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
    parse_shards,
)
from .pinning import PinnedRead
from .schema import row_schema

log = get_logger("inkpen.pipeline.stream")

STREAM_OPTIONS = FEED_OPTIONS | {
    "path",
    "feed",
    "batch_rows",
    "key_type",
    "values",
    "indexes",
    "shard",
}
CURSOR_PREFIX = "spark-stream-"
"""A new query's own cursor is this and 12 hex digits (see the module docstring)."""
LEGACY_CURSOR = "spark-stream"
"""The cursor of an offset that names none (written before offsets named their cursor)."""
DEFAULT_CURSOR_LIFETIME = 3 * 86400.0
MAX_SQN = 1 << 62

Starting = Literal["earliest", "latest"] | int
"""Where a new query starts: ``earliest`` (SQN 0), ``latest``, or an SQN."""


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What a stream asked for (see the module docstring)."""

    url: str
    cursor: str | None = None
    """None: the query's own, named in its first offset."""
    cursor_lifetime: float = DEFAULT_CURSOR_LIFETIME
    starting: Starting = "earliest"
    max_rows_per_batch: int | None = None
    rows_per_partition: int = 250_000
    batch_rows: int = 8192
    key_type: KeyType = "binary"
    refresh_interval: float = 1.0
    values: bool = True
    shards: tuple[int, ...] | None = None
    """The ``shard`` option: only these shards of a data set (None: every shard)."""


def names_stream(options: Mapping[str, str]) -> bool:
    """True when the options can only be a stream's: ``feed=true`` or a feed-only option."""
    given = _lowered(options)
    return _bool(given, "feed", False) or bool(set(given) & FEED_OPTIONS)


STARTING_HELP = (
    "option startingOffsets takes earliest (the default: every change from the first), latest "
    "(only changes written after the query starts) or an SQN N (the changes with SQN above N, "
    'as the offset {"sqn": N} means, which it takes too)'
)


def parse_starting(given: Mapping[str, str]) -> Starting:
    """The ``startingOffsets`` option (or its older spelling ``starting_sqn``)."""
    raw, older = given.get("startingoffsets"), given.get("starting_sqn")
    if raw is not None and older is not None:
        raise UsageError(
            "options startingOffsets and starting_sqn say the same thing: give startingOffsets only"
        )
    if older is not None:
        sqn = _int(given, "starting_sqn", 0, 0, MAX_SQN)
        assert sqn is not None
        return sqn
    if raw is None:
        return "earliest"
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict) and set(value) == {"sqn"}:
        value = value["sqn"]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_SQN:
        return value
    raise UsageError(f"{STARTING_HELP}; got {raw!r}")


def parse_stream_options(options: Mapping[str, str], *, data_set: bool = False) -> StreamOptions:
    """Check a stream's options; with ``data_set`` the stream reads a sharded data set, whose
    ``startingOffsets`` :mod:`.sharded_stream` reads (``starting`` is then left earliest)."""
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
    cursor = given.get("cursor")
    if cursor is not None:
        try:
            check_name(str(cursor))
        except UsageError as exc:
            raise UsageError(f"option cursor: {exc}") from None
    if data_set:
        given.pop("startingoffsets", None)
        if "starting_sqn" in given:
            raise UsageError(
                "option starting_sqn is one database's; over a data set give startingOffsets "
                'a JSON object of shard number to SQN (e.g. {"0": 1500})'
            )
    starting = parse_starting(given)
    per_batch = _int(given, "max_rows_per_batch", None, 1, 1 << 40)
    per_partition = _int(given, "rows_per_partition", 250_000, 1, 1 << 40)
    batch_rows = _int(given, "batch_rows", 8192, 1, 1_000_000)
    assert per_partition is not None and batch_rows is not None
    return StreamOptions(
        url=_url(given, "stream"),
        cursor=None if cursor is None else str(cursor),
        cursor_lifetime=_seconds(given, "cursor_lifetime", DEFAULT_CURSOR_LIFETIME),
        starting=starting,
        max_rows_per_batch=per_batch,
        rows_per_partition=per_partition,
        batch_rows=batch_rows,
        key_type="string" if key_type == "string" else "binary",
        refresh_interval=_seconds(given, "refresh_interval", 1.0),
        values=_bool(given, "values", True),
        shards=parse_shards(given),
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
    """The changes with ``start < sqn <= end``; those up to ``history`` (written before the
    query began) may have been removed since, and are skipped if so."""

    start: int
    end: int
    history: int = 0


def _sqn(offset: Mapping[str, Any]) -> int:
    value = offset.get("sqn")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"an inkpen stream offset is {{'sqn': n, 'cursor': name}}, got {offset!r}")
    return value


def _history(offset: Mapping[str, Any]) -> int:
    """The offset's history SQN (the module docstring), 0 when it has none."""
    value = offset.get("history", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"an inkpen stream offset's history is an SQN, got {offset!r}")
    return value


def _with_history(offset: dict[str, Any], history: int) -> dict[str, Any]:
    if history > offset["sqn"]:
        offset["history"] = history
    return offset


def checked_changes(
    changes: Iterator[Change], start: int, end: int, history: int
) -> Iterator[Change]:
    """The changes of ``(start, end]`` read with gaps skipped, checked here instead: a missing
    SQN at or below ``history`` was removed before the query began and is passed over (and
    counted); one above it fails with ``FeedGapError``."""
    expected = start + 1
    skipped = 0
    for change in changes:
        sqn = change.sqn
        if sqn > end:
            break
        if sqn > expected:
            if sqn - 1 > history:
                raise gap_error(max(expected, history + 1), sqn)
            skipped += sqn - expected
        expected = sqn + 1
        yield change
    if expected <= end:
        if end > history:
            raise gap_error(max(expected, history + 1), None)
        skipped += end + 1 - expected
    if skipped:
        log.info(
            "pipeline.stream_history_skipped",
            start=start,
            end=end,
            history=history,
            skipped=skipped,
        )


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class InkpenStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The change feed as micro-batches (see the module docstring).

    Spark keeps one instance on the driver for a query's run (``initialOffset`` ...
    ``commit``) and sends copies to executors for ``read``; only the driver's keeps state.
    """

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._follower: Any = None
        self._initial: dict[str, Any] | None = None
        self._target: int | None = None
        self._held_at: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def _manifests(self) -> ManifestStore:
        return ManifestStore(open_store(self.options.url))

    def _last_sqn(self) -> int:
        """The database's last SQN now (a following Reader, refreshed)."""
        from inkpen.reader import open_reader

        if self._follower is None:
            self._follower = open_reader(
                self.options.url, follow=True, refresh_interval=self.options.refresh_interval
            )
        else:
            self._follower.refresh()
        return int(self._follower.last_sqn)

    def _cursor(self, offset: Mapping[str, Any]) -> str:
        """The query's cursor: the ``cursor`` option, else the name its offsets carry."""
        if self.options.cursor is not None:
            return self.options.cursor
        name = offset.get("cursor", LEGACY_CURSOR)
        if not isinstance(name, str):
            raise UsageError(f"an inkpen stream offset names its cursor by a str, got {offset!r}")
        return check_name(name)

    def _hold(
        self, name: str, sqn: int, *, advance: bool, resuming: bool, history: int = 0
    ) -> Held | None:
        """Keep the cursor live for a query that has read up to ``sqn`` (see the module
        docstring): renew it (moving it to ``sqn`` with ``advance``), or create it again.

        Without ``advance`` only when due: on this reader's first step and then every quarter
        of the cursor's lifetime. With ``resuming``, a cursor that had to be created again is
        checked: every change above ``sqn`` must still be there.
        """
        now = time.monotonic()
        due = self._held_at is None or now - self._held_at >= self.options.cursor_lifetime / 4
        if not (advance or due):
            return None
        named = "its cursor option" if self.options.cursor else "its checkpoint's offsets"
        owner = f"spark stream on {socket.gethostname()}, named by {named}"
        manifests = self._manifests()
        try:
            held = hold_feed_cursor(
                manifests,
                name,
                sqn,
                lifetime=self.options.cursor_lifetime,
                owner=owner,
                advance=advance,
            )
        finally:
            manifests.store.close()
        self._held_at = now
        if held.cursor.sqn > sqn:
            log.warning(
                "pipeline.stream_cursor_ahead",
                url=self.options.url,
                cursor=name,
                cursor_sqn=held.cursor.sqn,
                sqn=sqn,
            )
        if resuming and held.outcome != "renewed":
            self._check_nothing_lost(name, sqn, held, history)
        return held

    def _check_nothing_lost(self, name: str, sqn: int, held: Held, history: int) -> None:
        """After the cursor was created again: every change above ``sqn`` (and above the
        query's ``history``) is still there, or ``FeedGapError`` (and the cursor made for
        nothing is deleted)."""
        from inkpen.reader import open_reader

        lapsed = (
            "was missing"
            if held.lapsed is None
            else (f"lapsed at {_when(held.lapsed.expire_time)}")
        )
        log.warning(
            "pipeline.stream_cursor_recreated",
            url=self.options.url,
            cursor=name,
            sqn=sqn,
            outcome=held.outcome,
        )
        try:
            with open_reader(self.options.url) as reader:
                last = reader.last_sqn
                for _ in checked_changes(reader.changes(sqn, gaps="skip"), sqn, last, history):
                    pass
        except FeedGapError as exc:
            manifests = self._manifests()
            try:
                delete_feed_cursor(manifests, name)
            except NotFoundError:
                pass
            finally:
                manifests.store.close()
            log.error(
                "pipeline.stream_feed_gap", url=self.options.url, cursor=name, sqn=sqn, gap=exc.sqn
            )
            raise FeedGapError(
                f"this stream's feed cursor {name!r} {lapsed}, and journal compaction has since "
                f"removed SQN {exc.sqn}, a change the query has not read (it has read up to SQN "
                f"{sqn}): going on would give fewer rows than were written. Start a new query "
                "(a new checkpoint location; startingOffsets says where it starts), and keep "
                "cursor_lifetime longer than the longest pause between a query's runs",
                sqn=exc.sqn,
            ) from None

    def initialOffset(self) -> dict[Any, Any]:
        if self._initial is None:  # Spark asks a new query's reader more than once
            name = self.options.cursor or f"{CURSOR_PREFIX}{uuid.uuid4().hex[:12]}"
            starting = self.options.starting
            last = self._last_sqn()
            if starting == "earliest":
                sqn = 0
            elif starting == "latest":
                sqn = last
            else:
                sqn = starting
            held = self._hold(name, sqn, advance=False, resuming=False)
            self._initial = _with_history({"sqn": sqn, "cursor": name}, last)
            log.info(
                "pipeline.stream_started",
                url=self.options.url,
                cursor=name,
                sqn=sqn,
                starting=starting,
                outcome=None if held is None else held.outcome,
            )
        return dict(self._initial)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._last_sqn()
        log.info("pipeline.stream_available_now", url=self.options.url, sqn=self._target)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_rows_per_batch
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:
        first, name, history = _sqn(start), self._cursor(start), _history(start)
        self._hold(name, first, advance=False, resuming=True, history=history)
        last = max(self._last_sqn(), first)
        if self._target is not None:
            last = max(first, min(last, self._target))
        if isinstance(limit, ReadMaxRows):
            last = min(last, first + limit.max_rows)
        return _with_history({"sqn": last, "cursor": name}, history)

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        lo, hi, history = _sqn(start), _sqn(end), _history(start)
        self._hold(self._cursor(start), lo, advance=False, resuming=True, history=history)
        step = self.options.rows_per_partition
        return [SqnRange(s, min(s + step, hi), history) for s in range(lo, hi, step)]

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
            start, end = partition.start, partition.end
            if start < partition.history:
                changes = checked_changes(
                    reader.changes(start, gaps="skip"), start, end, partition.history
                )
            else:
                changes = iter(reader.changes(start))
            for change in changes:
                if change.sqn > end:
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
        self._hold(self._cursor(end), _sqn(end), advance=True, resuming=True, history=_history(end))

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None
