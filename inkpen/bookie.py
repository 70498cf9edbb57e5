"""Bookie: the handle an application embeds to use an inkpen database.

``inkpen.open(url, **options)`` claims the database for writing (fencing any older writer),
recovers it, and returns a :class:`Bookie`. Every method is thread-safe: many application threads
may call one Bookie at once, and their puts share journal segments (group commit).

Durability: ``put`` and ``delete`` return only once the change is in a journal object on the
store; a crash at any later moment loses nothing they acknowledged. Visibility: once ``put``
returns, every read from any thread sees the new value.

Limits (checked on every call, a rejected call changes nothing): a bucket, key, index field or
index term is at most ``max_key_bytes`` (64 KiB) and buckets and keys are not empty; a value is
at most ``max_value_bytes`` (64 MiB by default); a put carries at most ``max_indexes`` index specs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from time import perf_counter
from typing import Any

from inkpen.actors.engine.bookie_actor import Stats
from inkpen.actors.engine.engine import Engine
from inkpen.actors.engine.hot_backup import HotBackup
from inkpen.actors.journal.changes import ChangeMaker, PendingChange, as_bytes
from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.actors.kernel.meter import Metrics
from inkpen.actors.kernel.views import ViewBoard
from inkpen.actors.read.feed import (
    CaughtUp,
    Change,
    GapPolicy,
    changes_in,
    check_gaps,
    check_since,
    not_held,
    waiting,
)
from inkpen.actors.read.path import Views, ViewSource
from inkpen.formats.keys import MAX_KEY_BYTES
from inkpen.manifest.disk_cache import disk_cache_for
from inkpen.manifest.feed_cursors import (
    NotHeld,
    advance_feed_cursor,
    create_feed_cursor,
    delete_feed_cursor,
    list_feed_cursors,
)
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import FeedCursor
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store

from .batch import Batch
from .checks import check_flag, check_seconds, check_text
from .errors import FencedError, InkpenError, NotFoundError, UsageError
from .options import Options
from .read_api import FoldIterator, ReadAPI
from .snapshot import PartsSource, Snapshot
from .transaction import SnapshotAnchors, Transaction, check_isolation, refuse_nested

IndexSpecs = Iterable[tuple[str, str | bytes, str | bytes]]


def value_bytes(changes: Iterable[PendingChange]) -> int:
    """Bytes of the values ``changes`` carry (a batch's, for the metrics). A merge's operand is
    not its value: the writer counts the value it folds (:class:`~inkpen.actors.kernel.meter.
    Meter`'s ``folded_bytes``)."""
    return sum(len(c.value) for c in changes if c.value and c.operator is None)


def merge_operators_of(changes: Iterable[PendingChange]) -> set[str]:
    """The names of the merge operators ``changes`` merge with."""
    return {c.operator for c in changes if c.operator is not None}


class _LiveSource(ViewSource):
    __slots__ = ("_board",)

    def __init__(self, board: ViewBoard) -> None:
        self._board = board

    def views(self) -> Views:
        return self._board.take()


class _WriterHistory:
    """The writer's own change history, to check feed cursors against: the last SQN it has
    applied (every change a caller has seen acknowledged), and its journal read through a
    snapshot (whose registration keeps the files while they are read)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def last_sqn(self) -> int:
        return self._engine.applied.sqn

    def not_held(self, since: int, upto: int) -> NotHeld:
        engine = self._engine
        parts = engine.take_snapshot(long_running=False, ledger_only=False)
        try:
            assert parts.journal is not None
            return not_held(parts.journal.current, since, upto)
        finally:
            engine.release_snapshot(parts.snapshot_id)


class Bookie(ReadAPI):
    """An open, writable inkpen database. Use ``inkpen.open`` to get one; close it when done."""

    def __init__(self, engine: Engine, options: Options) -> None:
        self._engine = engine
        self._options = options
        self._head_only = options.head_only
        self._changes = ChangeMaker(options)
        self._live = _LiveSource(engine.board)
        self._meter = engine.meter
        self._read_ahead = options.read_ahead_bytes
        self._closed = False
        self._opener = "inkpen.open"
        """What opens the database again, named when a call comes after close (``inkpen.aio``
        names its own)."""
        self._transactions: set[Transaction] = set()
        self._transactions_lock = threading.Lock()
        self._anchors = SnapshotAnchors(
            lambda: engine.take_snapshot(long_running=False, ledger_only=False),
            engine.release_snapshot,
            engine.board,
        )

    @property
    def url(self) -> str:
        """The URL of the store this Bookie writes to."""
        return self._engine.url

    @property
    def options(self) -> Options:
        return self._options

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writes -----------------------------------------------------------------------------

    def put(
        self,
        bucket: str | bytes,
        key: str | bytes,
        value: bytes,
        *,
        indexes: IndexSpecs = (),
        ttl: float | None = None,
        if_sqn: int | None = None,
    ) -> None:
        """Store ``value`` under (bucket, key); returns once it is durable in the journal.

        ``indexes``: ``("add" | "remove", field, term)`` specs; the application says which index
        entries to add and which to remove (as in Leveled). ``ttl``: seconds until the object
        expires (Leveled's tempput); expired objects read as absent. ``if_sqn``: write only if
        the key's current SQN (``head().sqn``) is this, or with 0 only if the key is absent;
        otherwise raise :class:`~inkpen.ConflictError` and write nothing.
        """
        started = perf_counter()
        self._check_open()
        self._check_not_head_only("put")
        change = self._changes.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn)
        try:
            self._engine.write(change)
        except BaseException as exc:
            self._meter.refused(exc)
            raise
        self._meter.put.record(perf_counter() - started, len(change.value or b""))

    def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """Delete (bucket, key): a durable tombstone. ``indexes`` names index entries to remove
        (the object's other index entries stop answering queries too). ``if_sqn`` as for
        :meth:`put`."""
        started = perf_counter()
        self._check_open()
        self._check_not_head_only("delete")
        change = self._changes.delete(bucket, key, indexes, if_sqn=if_sqn)
        try:
            self._engine.write(change)
        except BaseException as exc:
            self._meter.refused(exc)
            raise
        self._meter.delete.record(perf_counter() - started)

    def merge(
        self,
        bucket: str | bytes,
        key: str | bytes,
        operand: bytes,
        *,
        operator: str,
    ) -> None:
        """Fold ``operand`` onto the value of (bucket, key) with the merge operator named
        ``operator`` (given to ``inkpen.open`` in ``merge_operators``), without reading the key
        here; returns once durable, as :meth:`put`.

        The writer calls ``fn(key, existing, [operand])`` (``existing`` None for an absent,
        deleted or expired key) in the same step as the write, so concurrent merges of one key
        never conflict and each is applied once, in the order they are written. The new value
        replaces the old one as a put without ``ttl`` or index changes would (index entries are
        kept). An unknown operator, an operand that is not bytes, or an operator that raises or
        answers anything but bytes (or a bytearray or memoryview) is a
        :class:`~inkpen.UsageError` and writes nothing. The first merge with a name that lands
        records the name in the manifest (see :func:`inkpen.forget_merge_operator`).
        """
        started = perf_counter()
        self._check_open()
        self._check_not_head_only("merge")
        change = self._changes.merge(bucket, key, operand, operator)
        try:
            self._engine.write(change)
        except BaseException as exc:
            self._meter.refused(exc)
            raise
        self._engine.record_merge_operators((operator,))  # only a merge that landed names it
        self._meter.put.record(perf_counter() - started)  # the writer counts the folded bytes

    def write(self, batch: Batch) -> None:
        """Apply every change of ``batch`` atomically and in order; returns once durable.

        After any crash either every change of the batch is there or none is, and no reader
        ever sees part of it. One failed ``if_sqn`` condition rejects the whole batch with
        :class:`~inkpen.ConflictError`. An empty batch is a no-op; a batch is written once.
        """
        started = perf_counter()
        changes = self._batch_changes(batch)
        if changes:
            self._write_unit(changes, started)
            self._engine.record_merge_operators(merge_operators_of(changes))

    def _write_unit(self, changes: list[PendingChange], started: float) -> None:
        """Write ``changes`` as one unit and record it as a batch."""
        try:
            self._engine.write_unit(changes)
        except BaseException as exc:
            self._meter.refused(exc)
            raise
        self._meter.write.record_many(perf_counter() - started, len(changes), value_bytes(changes))

    def _batch_changes(self, batch: Batch) -> list[PendingChange]:
        """The checked changes of ``batch``, which is marked written (a batch is written once)."""
        self._check_open()
        self._check_not_head_only("write")
        if not isinstance(batch, Batch):
            raise UsageError(f"write takes an inkpen.Batch, got {type(batch).__name__}")
        make = self._changes
        changes = [
            make.delete(op.bucket, op.key, op.indexes, if_sqn=op.if_sqn)
            if op.delete
            else make.merge(op.bucket, op.key, op.value, op.operator)
            if op.operator is not None
            else make.put(op.bucket, op.key, op.value, op.indexes, op.ttl, if_sqn=op.if_sqn)
            for op in batch._pending()
        ]
        batch._mark_written()
        return changes

    def _check_not_head_only(self, what: str) -> None:
        if self._head_only is not None:
            raise UsageError(
                f"{what} is not available in a head-only store (head_only={self._head_only!r}); "
                'write with mput([("add" | "remove", bucket, key, subkey, value), ...])'
            )

    def mput(self, specs: Iterable[tuple[str, Any, Any, Any, Any]]) -> None:
        """Apply head-only changes (Leveled's ``book_mput``) as one durable batch.

        Each spec is ``("add" | "remove", bucket, key, subkey, value)`` (value ignored for a
        remove; at most 64 KiB). Every spec is checked first (one bad spec: nothing is written);
        then all of them go into one journal segment, so after a crash either all or none are
        there. Values are kept in the ledger, read by ``head_only_get`` and ``heads``; the
        journal only serves recovery and is trimmed (``trim_journal``). Only in a store opened
        with ``head_only``.
        """
        started = perf_counter()
        changes = self._mput_changes(specs)
        if changes:
            self._write_unit(changes, started)

    def _mput_changes(self, specs: Iterable[tuple[str, Any, Any, Any, Any]]) -> list[PendingChange]:
        """The checked changes of an :meth:`mput` (any bad spec: UsageError, nothing written)."""
        self._check_open()
        if self._head_only is None:
            raise UsageError(
                "mput writes head-only objects; open a new database with "
                "head_only='with_lookup' or 'no_lookup' to use it"
            )
        if isinstance(specs, str | bytes) or not isinstance(specs, Iterable):
            raise UsageError("mput takes a sequence of (op, bucket, key, subkey, value) specs")
        return [self._changes.head_only(spec) for spec in specs]

    def trim_journal(self) -> CompactionReport:
        """Drop the journal files of a head-only store whose every entry the ledger has
        persisted (Leveled's ``book_trimjournal``); returns what was dropped (``compacted``).

        Runs on its own too, every ``compaction_interval`` (60 s without one).
        """
        self._check_open()
        if self._head_only is None:
            raise UsageError(
                "trim_journal is for head-only stores, whose journal only serves recovery; "
                "a normal store's journal holds its values: use compact_journal()"
            )
        return self._engine.compact_journal()

    # -- reads (the ReadAPI hooks) --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"this Bookie is closed; open the database again with {self._opener}")

    def _now_ms(self) -> int:
        return int(self._options.clock() * 1000)

    def _point_source(self) -> ViewSource:
        return self._live

    def _fold_source(self, *, long_running: bool) -> PartsSource:
        engine = self._engine
        parts = engine.take_snapshot(long_running=long_running, ledger_only=False)
        return PartsSource(parts, lambda: engine.release_snapshot(parts.snapshot_id))

    def _vanished(self, error: NotFoundError) -> InkpenError:
        """A file gone under a fenced Bookie was replaced by the newer writer: say so. A Bookie
        that has not yet learnt of a fence asks the manifest (which fences it if so)."""
        fenced = self._engine.fence()
        if fenced is None:
            return error
        return FencedError(
            f"{fenced}; since then the newer writer has replaced {error.key or 'a file'}, which "
            "this handle's reads still named. Close it, and read through the newer writer or an "
            "inkpen.open_reader handle"
        )

    # -- the change feed -------------------------------------------------------------------------

    def changes(
        self,
        since: int = 0,
        *,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
        wait: float | None = None,
    ) -> FoldIterator[Change]:
        """Every change with an SQN above ``since``, in SQN order (see :class:`ReadAPI`).

        With ``wait`` (seconds) the iterator tails this writer's own commits, as a following
        Reader's does: having given every change readable so far, it waits for the next batch
        this Bookie applies (woken by it, not polling) and goes on; it ends once ``wait``
        seconds pass with nothing new, or when the Bookie closes. Without ``wait`` it ends at
        the last change readable now.
        """
        if wait is None:
            return super().changes(since, bucket=bucket, gaps=gaps)
        steps, seconds = self._start_tail(since, bucket, gaps, wait)
        return FoldIterator(waiting(steps, seconds), lambda: None)

    def _start_tail(
        self, since: int, bucket: str | bytes | None, gaps: GapPolicy, wait: float
    ) -> tuple[Iterator[Change | CaughtUp], float]:
        """Check the arguments of ``changes(since, wait=...)`` and start its steps (the changes
        readable now, then a :class:`CaughtUp` on the writer's news, and so on). The caller
        waits: :meth:`changes` in its thread, :mod:`inkpen.aio` in its loop."""
        first = check_since(since)
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        policy = check_gaps(gaps)
        seconds = check_seconds("wait", wait)
        self._check_open()
        return self._tail_steps(first, b, policy), seconds

    def _tail_steps(
        self, since: int, bucket: bytes | None, gaps: GapPolicy
    ) -> Iterator[Change | CaughtUp]:
        news = self._engine.applied
        position = since
        while True:
            version = news.version  # before the views: a batch applied after it wakes the wait
            self._check_open()
            seen = [position]
            views = self._engine.board.take()
            files = views[2].files
            if not files or files[-1].descriptor.max_sqn <= position:
                # What lies above ``position`` is in the unrolled segments, in memory: the live
                # views serve it without a snapshot (no file is read that a commit could drop).
                yield from changes_in(views, position, bucket=bucket, gaps=gaps, seen=seen)
            else:
                source = self._fold_source(long_running=True)
                try:
                    found = changes_in(
                        source.views(), position, bucket=bucket, gaps=gaps, seen=seen
                    )
                    yield from self._guarded_items(found)
                finally:
                    source.release()
            position = seen[0]
            yield CaughtUp(news, version)

    # -- snapshots and maintenance ------------------------------------------------------------

    def snapshot(self, *, long_running: bool = False, ledger_only: bool = False) -> Snapshot:
        """An isolated read-only view of the database as it is now (see :class:`Snapshot`)."""
        self._check_open()
        check_flag("long_running", long_running)
        check_flag("ledger_only", ledger_only)
        parts = self._engine.take_snapshot(long_running=long_running, ledger_only=ledger_only)
        return Snapshot(
            parts,
            head_only=self._head_only,
            now_ms=self._now_ms,
            owner_open=lambda: not self._closed,
            release=self._engine.release_snapshot,
            meter=self._meter,
            read_ahead=self._read_ahead,
        )

    def transaction(self, isolation: str = "snapshot") -> Transaction:
        """A :class:`~inkpen.Transaction`: reads from one snapshot plus its own writes, which
        commit atomically when the ``with`` block ends (``isolation``: ``"snapshot"`` or
        ``"serializable"``; see :mod:`inkpen.transaction` for the conflict rules).

        Refused (:class:`~inkpen.UsageError`) on a thread inside the ``with`` block of another
        open transaction of this Bookie: transactions do not nest."""
        self._check_open()
        level = check_isolation(isolation)
        refuse_nested(self._engine)
        commits = self._engine.commits
        token = commits.register()  # before the snapshot: see inkpen.actors.write.commits
        try:
            parts, let_go = self._anchors.views()
        except BaseException:
            commits.release(token)
            raise
        snap = Snapshot(
            parts,
            head_only=self._head_only,
            now_ms=self._now_ms,
            owner_open=lambda: not self._closed,
            release=lambda _: let_go(),
            meter=self._meter,
            read_ahead=self._read_ahead,
        )
        sqn = parts.max_sqn()
        commits.raise_floor(token, sqn)

        def ended(txn: Transaction) -> None:
            commits.release(token)
            with self._transactions_lock:
                self._transactions.discard(txn)

        txn = Transaction(
            isolation=level,
            snapshot=snap,
            snapshot_sqn=sqn,
            engine=self._engine,
            changes=self._changes,
            options=self._options,
            check_book=self._check_writable,
            release=ended,
        )
        with self._transactions_lock:
            self._transactions.add(txn)
        return txn

    def _check_writable(self, what: str) -> None:
        self._check_open()
        self._check_not_head_only(what)

    def compact_journal(self) -> CompactionReport:
        """Run one journal compaction (Leveled's ``book_compactjournal``) and return its report.

        Scores the journal files against a ledger snapshot, rewrites the most rewarding run
        without the values nothing needs, and commits. ``report.outcome`` says how it ended:
        ``"compacted"``, ``"nothing_to_do"``, or ``"replaced_meanwhile"`` when a newer commit
        (a re-roll of the same files) replaced what it chose first; nothing is committed then.
        """
        self._check_open()
        return self._engine.compact_journal()

    def checkpoint(self, lifetime: float | None = None, *, name: str | None = None) -> str:
        """Record a checkpoint of everything acknowledged so far; returns its id.

        A checkpoint is a durable, cross-process snapshot: ``inkpen.open_reader(url,
        checkpoint=id)`` reads exactly this state from any process, and no file it needs is
        deleted while the checkpoint lives (``lifetime`` seconds; None: until deleted, e.g. with
        ``inkpen checkpoint delete``).
        """
        self._check_open()
        life = None if lifetime is None else check_seconds("lifetime", lifetime, above_minimum=True)
        name = check_text("checkpoint name", name, optional=True)
        return self._engine.checkpoint(life, name)

    # -- feed cursors ---------------------------------------------------------------------------

    def _manifests(self) -> ManifestStore:
        return self._engine.manifests

    def create_feed_cursor(
        self, name: str, sqn: int = 0, *, lifetime: float | None = None, owner: str | None = None
    ) -> FeedCursor:
        """Create the named feed cursor at ``sqn`` (the consumer has read every change up to it).

        While it lives, journal compaction keeps every change above the lowest live cursor, so
        ``changes(cursor.sqn)`` meets no gap. ``lifetime`` (seconds): it expires that long after
        its creation or last advance; None: until deleted. ``owner``: free text saying who holds
        it (``inkpen feed list`` shows it). A name in use, or an ``sqn`` above the last SQN this
        writer has acknowledged, is a ``UsageError``.
        """
        self._check_open()
        return create_feed_cursor(
            self._manifests(),
            name,
            sqn,
            lifetime=lifetime,
            owner=owner,
            history=_WriterHistory(self._engine),
        )

    def advance_feed_cursor(self, name: str, sqn: int) -> FeedCursor:
        """Move the named cursor to ``sqn``, renewing its lifetime: forward up to the last SQN
        (above it: ``UsageError``), or back over changes the journal still holds whole
        (otherwise ``FeedGapError`` naming the first it does not)."""
        self._check_open()
        return advance_feed_cursor(
            self._manifests(), name, sqn, history=_WriterHistory(self._engine)
        )

    def delete_feed_cursor(self, name: str) -> None:
        """Delete the named cursor (``NotFoundError`` if there is none)."""
        self._check_open()
        delete_feed_cursor(self._manifests(), name)

    def feed_cursors(self) -> tuple[FeedCursor, ...]:
        """Every feed cursor in the latest manifest (expired ones too: see ``is_live``)."""
        self._check_open()
        return list_feed_cursors(self._manifests())

    def hot_backup(self) -> HotBackup:
        """Prepare a hot backup (Leveled's ``book_hotbackup``): returns ``backup``, a function.

        ``backup(dest_url)`` copies the journal and the ledger's files as they are now to
        ``dest_url`` (hard links on one local filesystem, server-side copies on S3) and writes
        its manifest there; repeating the pair into the same destination copies only new files.
        ``inkpen.open(dest_url)`` opens the backup as a database, replaying the journal above
        what its ledger holds. Writes may go on meanwhile. A head-only store's backup keeps its
        mode.
        """
        self._check_open()
        return self._engine.hot_backup()

    def run_gc(self, *, min_age: float | None = None, dry_run: bool = False) -> GcReport:
        """Run this writer's GC now (it also runs at open and on a schedule); returns its report.

        ``min_age`` defaults to the ``gc_min_age`` option; objects this writer is still writing
        are never deleted whatever their age.
        """
        self._check_open()
        age = None if min_age is None else check_seconds("min_age", min_age)
        check_flag("dry_run", dry_run)
        return self._engine.run_gc(min_age=age, dry_run=dry_run)

    def flush(self) -> None:
        """Persist the ledger now: write recent changes from memory to an L0 file.

        Not needed for durability (a put is durable when it returns); it shortens the journal
        replay of the next start-up, as a clean ``close`` does.
        """
        self._check_open()
        self._engine.flush()

    def compact_ledger(self) -> None:
        """Run ledger merges now, until L0 is empty and no level is over its target size."""
        self._check_open()
        self._engine.compact_ledger()

    def metrics(self) -> Metrics:
        """Typed metrics (every field is documented on :class:`inkpen.Metrics`): operations
        counted and timed since open, store requests, files per level, the journal,
        backpressure, caches, merges, compactions and GC. Read at once, waiting for no actor."""
        self._check_open()
        return self._engine.metrics()

    def stats(self) -> Stats:
        """Counters: cache and memory sizes, files per level (from L0), journal size, SQNs,
        epoch, backpressure, the fence (every key is documented on :class:`inkpen.Stats`)."""
        self._check_open()
        return self._engine.stats()

    # -- life cycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Persist what memory holds and stop. Idempotent; later calls raise UsageError."""
        if self._closed:
            return
        self._closed = True
        self._end_transactions()
        self._engine.close()

    def abandon(self) -> None:
        """Stop at once, persisting nothing more: what a crash at this moment would leave.

        Every acknowledged write is already durable, so nothing acknowledged is lost; the next
        ``inkpen.open`` recovers by replaying the journal. Useful for tests and for giving up on a
        fenced Bookie quickly.
        """
        if self._closed:
            return
        self._closed = True
        self._end_transactions()
        self._engine.close(persist=False)

    def _end_transactions(self) -> None:
        """Closing: every open transaction ends unwritten and releases its snapshot."""
        with self._transactions_lock:
            open_ones = list(self._transactions)
        for txn in open_ones:
            txn._abandon()
        self._anchors.close()

    def __enter__(self) -> Bookie:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<inkpen.Bookie {self.url} {state}>"


def open(
    url: str | ObjectStore,
    options: Options | None = None,
    /,
    **overrides: Any,
) -> Bookie:
    """Open (creating if empty) the database at ``url`` for reading and writing.

    ``url``: a directory path, ``file:///abs/path``, ``s3://bucket/prefix?endpoint=...`` or
    ``memory://name`` (or an :class:`~inkpen.objectstore.ObjectStore`). ``options`` and keyword
    overrides: see :class:`~inkpen.Options`. Opening fences any earlier writer of the database.
    """
    engine, opts = start_engine(url, options, overrides)
    return Bookie(engine, opts)


def start_engine(
    url: str | ObjectStore, options: Options | None, overrides: dict[str, Any]
) -> tuple[Engine, Options]:
    """The writer's engine for :func:`open` (and :func:`inkpen.aio.open`, which drives the same
    engine from asyncio), with the options it was started with."""
    opts = Options.build(options, **overrides)
    disk_cache_for(opts)  # an unusable cache_dir is refused before the store is touched
    if isinstance(url, str):
        store = open_store(url)
        owns = True
    elif isinstance(url, ObjectStore):
        store, owns = url, False
    else:
        raise UsageError(f"url must be a store URL or an ObjectStore, got {type(url).__name__}")
    try:
        engine = Engine.start(store, opts, owns_store=owns)
    except BaseException:
        if owns:
            store.close()
        raise
    return engine, opts
