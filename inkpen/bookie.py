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

from collections.abc import Iterable
from typing import Any

from inkpen.actors.engine.hot_backup import HotBackup
from inkpen.actors.engine.startup import Engine
from inkpen.actors.journal.changes import ChangeMaker
from inkpen.actors.journal.clerk import CompactionReport
from inkpen.actors.read.path import Views, ViewSource
from inkpen.actors.read.views import ViewBoard
from inkpen.manifest.feed_cursors import (
    advance_feed_cursor,
    create_feed_cursor,
    delete_feed_cursor,
    list_feed_cursors,
)
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import FeedCursor
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store

from .errors import UsageError
from .options import Options, check_flag, check_seconds, check_text
from .read_api import ReadAPI
from .snapshot import PartsSource, Snapshot

IndexSpecs = Iterable[tuple[str, str | bytes, str | bytes]]


class _LiveSource(ViewSource):
    __slots__ = ("_board",)

    def __init__(self, board: ViewBoard) -> None:
        self._board = board

    def views(self) -> Views:
        return self._board.take()


class Bookie(ReadAPI):
    """An open, writable inkpen database. Use ``inkpen.open`` to get one; close it when done."""

    def __init__(self, engine: Engine, options: Options) -> None:
        self._engine = engine
        self._options = options
        self._changes = ChangeMaker(options)
        self._live = _LiveSource(engine.board)
        self._closed = False

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
    ) -> None:
        """Store ``value`` under (bucket, key); returns once it is durable in the journal.

        ``indexes``: ``("add" | "remove", field, term)`` specs; the application says which index
        entries to add and which to remove (as in Leveled). ``ttl``: seconds until the object
        expires (Leveled's tempput); expired objects read as absent.
        """
        self._check_open()
        self._engine.write(self._changes.put(bucket, key, value, indexes, ttl))

    def delete(self, bucket: str | bytes, key: str | bytes, *, indexes: IndexSpecs = ()) -> None:
        """Delete (bucket, key): a durable tombstone. ``indexes`` names index entries to remove."""
        self._check_open()
        self._engine.write(self._changes.delete(bucket, key, indexes))

    # -- reads (the ReadAPI hooks) --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this Bookie is closed; open the database again with inkpen.open")

    def _now_ms(self) -> int:
        return int(self._options.clock() * 1000)

    def _point_source(self) -> ViewSource:
        return self._live

    def _fold_source(self, *, long_running: bool) -> PartsSource:
        engine = self._engine
        parts = engine.take_snapshot(long_running=long_running, ledger_only=False)
        return PartsSource(parts, lambda: engine.release_snapshot(parts.snapshot_id))

    # -- snapshots and maintenance ------------------------------------------------------------

    def snapshot(self, *, long_running: bool = False, ledger_only: bool = False) -> Snapshot:
        """An isolated read-only view of the database as it is now (see :class:`Snapshot`)."""
        self._check_open()
        check_flag("long_running", long_running)
        check_flag("ledger_only", ledger_only)
        parts = self._engine.take_snapshot(long_running=long_running, ledger_only=ledger_only)
        return Snapshot(
            parts,
            now_ms=self._now_ms,
            owner_open=lambda: not self._closed,
            release=self._engine.release_snapshot,
        )

    def compact_journal(self) -> CompactionReport:
        """Run one journal compaction (Leveled's ``book_compactjournal``) and return its report.

        Scores the journal files against a ledger snapshot, rewrites the most rewarding run
        without the values nothing needs, and commits.
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
        return ManifestStore(self._engine.ctx.keeper.manifests.store)

    def create_feed_cursor(
        self, name: str, sqn: int = 0, *, lifetime: float | None = None
    ) -> FeedCursor:
        """Create the named feed cursor at ``sqn`` (the consumer has read every change up to it).

        While it lives, journal compaction keeps every change above the lowest live cursor, so
        ``changes(cursor.sqn)`` meets no gap. ``lifetime`` (seconds): it expires that long after
        its creation or last advance; None: until deleted. A name in use is a ``UsageError``.
        """
        self._check_open()
        return create_feed_cursor(self._manifests(), name, sqn, lifetime=lifetime)

    def advance_feed_cursor(self, name: str, sqn: int) -> FeedCursor:
        """Move the named cursor forward to ``sqn`` (renewing its lifetime); never back."""
        self._check_open()
        return advance_feed_cursor(self._manifests(), name, sqn)

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

        ``backup(dest_url)`` copies the journal as it is now to ``dest_url`` (hard links on one
        local filesystem, server-side copies on S3) and writes its manifest there; repeating the
        pair into the same destination copies only new files. ``inkpen.open(dest_url)`` opens the
        backup as a database, rebuilding its ledger from the journal. Writes may go on meanwhile.
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

    def stats(self) -> dict[str, Any]:
        """Counters: cache and memory sizes, files per level, journal size, SQNs, epoch."""
        self._check_open()
        return self._engine.stats()

    # -- life cycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Persist what memory holds and stop. Idempotent; later calls raise UsageError."""
        if self._closed:
            return
        self._closed = True
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
        self._engine.close(persist=False)

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
    opts = Options.build(options, **overrides)
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
    return Bookie(engine, opts)
