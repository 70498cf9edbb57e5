"""Reader: read-only access to a database at one checkpoint, from any process.

``inkpen.open_reader(url)`` establishes its own checkpoint on the database's latest state (with
``checkpoint_lifetime``, refreshed at half-life for as long as the Reader is open, deleted on
close) and reads exactly that state: later writes are not seen, and no file it needs is deleted —
not by the writer's merges and compactions, not by GC in any process — while the checkpoint
lives. ``inkpen.open_reader(url, checkpoint=ID)`` reads at an existing checkpoint (made by
``Bookie.checkpoint`` or the CLI) and leaves its lifetime to its owner. A Reader never writes data;
with its own checkpoint it writes only the manifest changes that create, refresh and delete it.

Every file a Reader reads is named by its checkpoint's manifest, which the checkpoint protects
from the moment the checkpoint is committed (the Reader reads that very manifest, never the one
before it). When the checkpoint stops protecting them — its own lease lapsed (see
:class:`~inkpen.manifest.checkpoints.CheckpointLease`), or the checkpoint it was opened at was
deleted or expired — the Reader says so: every later read raises
:class:`~inkpen.errors.CheckpointLapsedError` naming the checkpoint, and ``reader.lease_lapsed`` is
logged once. A file missing while the checkpoint is live is a :class:`~inkpen.errors.NotFoundError`
naming it: a missing object is never reported as corruption.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from inkpen.actors.journal.changes import as_bytes
from inkpen.actors.kernel.meter import IDLE, Meter, Metrics
from inkpen.actors.read.checkpoint_views import ManifestViews, load_views
from inkpen.actors.read.feed import (
    CaughtUp,
    Change,
    GapPolicy,
    changes_in,
    check_gaps,
    check_since,
    waiting,
)
from inkpen.actors.read.follower import Follower
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import CheckpointLease
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.disk_cache import disk_cache_for
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import CountingStore, ObjectStore, open_store, parse_store_url
from inkpen.objectstore.url import backend_of

from .checks import check_flag, check_seconds, check_text
from .errors import CheckpointLapsedError, InkpenError, NotFoundError, UsageError
from .options import Options
from .read_api import FoldIterator, ReadAPI

log = get_logger("inkpen.reader")

T = TypeVar("T")

RE_RESOLVE = 4
"""Attempts of a follower's read whose file vanished before it reports the error."""
MAX_BUCKET = 64 * 1024

GONE = "the checkpoint is gone from the manifest (deleted, or dropped by GC)"


class _Source:
    """A fold source over fixed views: nothing to release."""

    __slots__ = ("_views",)

    def __init__(self, views: ManifestViews) -> None:
        self._views = views

    def views(self) -> Any:
        return self._views.views()

    def release(self) -> None:
        return None


class Reader(ReadAPI):
    """A read-only view of a database at one checkpoint; a context manager."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        owns_store: bool,
        resolver: StoreResolver,
        views: ManifestViews,
        checkpoint_id: str,
        manifest_id: int,
        lease: CheckpointLease | None,
        options: Options,
        head_only: str | None = None,
        follower: Follower | None = None,
        meter: Meter = IDLE,
        tables: TableStore | None = None,
    ) -> None:
        self._store = store
        self._meter = meter
        self._tables = tables
        self._owns_store = owns_store
        self._resolver = resolver
        self._source = _Source(views)
        self._checkpoint_id = checkpoint_id
        self._manifest_id = manifest_id
        self._lease = lease
        self._options = options
        self._read_ahead = options.read_ahead_bytes
        self._closed = False
        self._opener = "inkpen.open_reader"
        """What opens another Reader, named when a call comes after close (``inkpen.aio``
        names its own)."""
        self._lock = threading.Lock()
        self._lapse: str | None = None
        self._head_only = head_only
        self._follower = follower

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint this Reader reads at (a follower's current lease checkpoint)."""
        if self._follower is not None:
            return self._follower.lease.checkpoint.id
        return self._checkpoint_id

    @property
    def manifest_id(self) -> int:
        """The manifest this Reader's files come from (a follower's current pin)."""
        if self._follower is not None:
            return self._follower.lease.manifest_id
        return self._manifest_id

    @property
    def following(self) -> bool:
        """True for a following Reader (``open_reader(url, follow=True)``)."""
        return self._follower is not None

    @property
    def last_sqn(self) -> int:
        """The highest SQN this Reader sees now (a follower's moves forward as it refreshes)."""
        self._check_open()
        return int(self._current().journal.max_sqn())

    def metrics(self) -> Metrics:
        """Typed metrics of this Reader (see :class:`inkpen.Metrics`): its gets and folds
        counted and timed since open, its store requests and caches, and the files per level
        and journal of the state it reads now. Its write and maintenance figures are 0."""
        self._check_open()
        views = self._current()
        return self._meter.metrics(ledger=views.ledger, journal=views.journal, tables=self._tables)

    def refresh(self) -> bool:
        """A following Reader: catch up with the writer now rather than at the next interval;
        True if anything new became readable. A Reader that does not follow: ``UsageError``."""
        self._check_open()
        if self._follower is None:
            raise UsageError(
                "this Reader reads one checkpoint and does not follow the writer; open it with "
                "inkpen.open_reader(url, follow=True) to keep up with new writes"
            )
        self._check_pin()
        return self._follower.refresh()

    def _current(self) -> ManifestViews:
        if self._follower is not None:
            return self._follower.views
        return self._source._views

    def _current_lease(self) -> CheckpointLease | None:
        return self._follower.lease if self._follower is not None else self._lease

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"this Reader is closed; open another with {self._opener}")

    def _now_ms(self) -> int:
        return int(self._options.clock() * 1000)

    def _point_source(self) -> _Source:
        if self._follower is not None:
            return _Source(self._follower.views)
        return self._source

    def _fold_source(self, *, long_running: bool) -> _Source:
        return self._point_source()

    # -- the checkpoint's protection ----------------------------------------------------------

    def _lapsed(self, reason: str) -> CheckpointLapsedError:
        with self._lock:
            first = self._lapse is None
            if first:
                self._lapse = reason
            reason = self._lapse or reason
        if first:
            log.warning(
                "reader.lease_lapsed",
                url=self._store.url,
                checkpoint=self.checkpoint_id,
                manifest_id=self.manifest_id,
                reason=reason,
            )
        return CheckpointLapsedError(
            f"the Reader's checkpoint lease {self.checkpoint_id} (manifest {self.manifest_id}) "
            f"lapsed: {reason}; files it pinned may be gone. Close this Reader and open a new one "
            "(with a longer checkpoint_lifetime if refreshes are slow)",
            key=self.checkpoint_id,
        )

    def _check_pin(self) -> None:
        """Raise :class:`CheckpointLapsedError` once the checkpoint may no longer protect."""
        with self._lock:
            known = self._lapse
        if known is not None:
            raise self._lapsed(known)
        lease = self._current_lease()
        if lease is not None:
            reason = lease.lapse()
            if reason is not None:
                raise self._lapsed(reason)

    def _vanished(self, error: NotFoundError) -> InkpenError:
        """The error for a file found missing: a lapsed pin, or a store missing a pinned file."""
        if isinstance(error, CheckpointLapsedError):
            return error
        lease = self._current_lease()
        reason = None if lease is None else lease.lapse()
        if reason is not None:
            return self._lapsed(reason)
        checkpoint_id, manifest_id = self.checkpoint_id, self.manifest_id
        # Ask the store: is the checkpoint still there and live?
        try:
            latest = ManifestStore(self._store).latest()
        except InkpenError as exc:
            return exc
        found = None if latest is None else latest.manifest.checkpoint(checkpoint_id)
        if found is None:
            if lease is not None:
                lease.vanished()
            return self._lapsed(GONE)
        if not found.is_live(time.time()):
            return self._lapsed(f"it expired at {found.expire_time}")
        return NotFoundError(
            f"{error.key or 'an object'} is missing from {self._store.url} although checkpoint "
            f"{checkpoint_id} is live and its manifest {manifest_id} names it; "
            f"something other than inkpen's GC deleted it ({error})",
            key=error.key,
        )

    _guards_point_reads = True

    def _guarded(self, read: Callable[[], T]) -> T:
        self._check_open()
        self._check_pin()
        attempts = RE_RESOLVE if self._follower is not None else 1
        for attempt in range(attempts):
            try:
                return read()
            except NotFoundError as exc:
                if attempt + 1 == attempts or isinstance(exc, CheckpointLapsedError):
                    raise self._vanished(exc) from exc
                self._re_resolve(exc)
        raise AssertionError("unreachable")

    def _re_resolve(self, error: NotFoundError) -> None:
        """A follower read through views taken before a re-pin found a file gone: catch up, so
        the next attempt reads through views whose lease protects their files."""
        log.debug("reader.re_resolve", url=self._store.url, missing=error.key)
        assert self._follower is not None
        self._follower.refresh()
        self._check_pin()

    def _fold(
        self, run: Callable[[Any, int], Iterator[T]], *, long_running: bool
    ) -> FoldIterator[T]:
        self._check_open()
        self._check_pin()
        return super()._fold(run, long_running=long_running)

    def changes(
        self,
        since: int = 0,
        *,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
        wait: float | None = None,
    ) -> FoldIterator[Change]:
        """Every change with an SQN above ``since``, in SQN order (see ``Bookie.changes``).

        A following Reader tails: with ``wait`` (seconds) the iterator, having given every change
        readable so far, waits for the follower to find more and goes on; it ends once ``wait``
        seconds pass with nothing new. Without ``wait`` it ends at the last change readable now.
        A file collected under it is re-resolved through the follower's current views.
        """
        if wait is None:
            return super().changes(since, bucket=bucket, gaps=gaps)
        steps, seconds = self._start_tail(since, bucket, gaps, wait)
        return FoldIterator(waiting(steps, seconds), lambda: None)

    def _start_tail(
        self, since: int, bucket: str | bytes | None, gaps: GapPolicy, wait: float
    ) -> tuple[Iterator[Change | CaughtUp], float]:
        """Check the arguments of ``changes(since, wait=...)`` and start its steps: the changes
        readable now, then a :class:`CaughtUp` saying which views to wait past, and so on. The
        caller does the waiting: :meth:`changes` in its thread, :mod:`inkpen.aio` in its loop."""
        if self._follower is None:
            raise UsageError(
                "changes(wait=...) tails a following Reader; open it with "
                "inkpen.open_reader(url, follow=True)"
            )
        first = check_since(since)
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_BUCKET)
        policy = check_gaps(gaps)
        seconds = check_seconds("wait", wait)
        self._check_open()
        self._check_pin()
        return self._tail_steps(first, b, policy), seconds

    def _tail_steps(
        self, since: int, bucket: bytes | None, gaps: GapPolicy
    ) -> Iterator[Change | CaughtUp]:
        follower = self._follower
        assert follower is not None
        position = since
        failures = 0
        while True:
            version = follower.version
            self._check_open()
            self._check_pin()
            seen = [position]
            try:
                yield from changes_in(
                    follower.views.views(), position, bucket=bucket, gaps=gaps, seen=seen
                )
                failures = 0
            except NotFoundError as exc:
                failures += 1
                if failures >= RE_RESOLVE or isinstance(exc, CheckpointLapsedError):
                    raise self._vanished(exc) from exc
                position = seen[0]
                self._re_resolve(exc)
                continue
            position = seen[0]
            yield CaughtUp(follower, version)

    def close(self) -> None:
        """Release the Reader's own checkpoint (if it made one) and its store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._follower is not None:
                self._follower.close()
            elif self._lease is not None:
                self._lease.close()
        finally:
            self._resolver.close()
            if self._owns_store:
                self._store.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_reader(
    url: str | ObjectStore,
    options: Options | None = None,
    /,
    *,
    checkpoint: str | None = None,
    follow: bool = False,
    refresh_interval: float = 1.0,
    **overrides: Any,
) -> Reader:
    """Open a read-only :class:`Reader` on the database at ``url`` (see the module docstring).

    ``follow=True``: a following Reader, which keeps up with the writer by itself every
    ``refresh_interval`` seconds (see :mod:`inkpen.actors.read.follower`).
    """
    opts = Options.build(options, **overrides)
    check_flag("follow", follow)
    check_seconds("refresh_interval", refresh_interval, minimum=0.01, maximum=3600)
    if follow and checkpoint is not None:
        raise UsageError(
            "a following Reader holds checkpoints of its own; pass either follow=True or "
            "checkpoint=ID"
        )
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise UsageError(f"checkpoint must be a checkpoint id (str), got {checkpoint!r}")
    check_text("checkpoint", checkpoint, optional=True)
    disk_cache_for(opts)  # an unusable cache_dir is refused before the store is touched
    if isinstance(url, str):
        parsed = parse_store_url(url)
        if backend_of(parsed).local and not os.path.isdir(parsed.location):
            # Reading must not leave a directory behind for a mistyped path.
            what = (
                "is a file, not a directory"
                if os.path.lexists(parsed.location)
                else ("does not exist")
            )
            raise NotFoundError(f"no inkpen database at {url}: {parsed.location} {what}")
    store, owns = (open_store(url), True) if isinstance(url, str) else (url, False)
    if not isinstance(store, ObjectStore):
        raise UsageError(f"url must be a store URL or an ObjectStore, got {type(url).__name__}")
    meter = Meter(opts.metrics)
    counts = meter.store_counts
    wrap: Callable[[ObjectStore], ObjectStore] | None = None
    if counts is not None:  # the Reader's requests are counted, its parents' stores' too

        def wrap(inner: ObjectStore) -> ObjectStore:
            return CountingStore(inner, counts=counts)

        store = wrap(store)
    resolver = StoreResolver(store, wrap=wrap)
    tables = TableStore.for_options(resolver, opts)
    lease: CheckpointLease | None = None
    try:
        manifests = ManifestStore(store)
        latest = manifests.open_database(create_if_missing=False)
        if checkpoint is None:
            lease = CheckpointLease.establish(
                manifests,
                lifetime=opts.checkpoint_lifetime,
                metadata={"kind": "reader"},
                allow_missing_segments=opts.allow_missing_segments,
            )
            checkpoint_id, manifest_id, manifest = (
                lease.checkpoint.id,
                lease.manifest_id,
                lease.manifest,
            )
        else:
            found = latest.manifest.checkpoint(checkpoint)
            if found is None or not found.is_live(time.time()):
                raise NotFoundError(
                    f"no live checkpoint {checkpoint} in {store.url}; list them with "
                    "`inkpen checkpoint list URL`",
                    key=checkpoint,
                )
            checkpoint_id, manifest_id = found.id, found.manifest_id
            manifest = manifests.read(manifest_id)
        views = load_views(resolver, manifest, manifest_id, opts, tables=tables)
        follower = None
        if follow:
            assert lease is not None
            follower = Follower(
                manifests=manifests,
                resolver=resolver,
                options=opts,
                lease=lease,
                views=views,
                interval=float(refresh_interval),
                tables=tables,
            )
    except BaseException:
        if lease is not None:
            lease.close()
        resolver.close()
        if owns:
            store.close()
        raise
    return Reader(
        store=store,
        owns_store=owns,
        resolver=resolver,
        views=views,
        checkpoint_id=checkpoint_id,
        manifest_id=manifest_id,
        lease=lease,
        options=opts,
        head_only=manifest.head_only,
        follower=follower,
        meter=meter,
        tables=tables,
    )
