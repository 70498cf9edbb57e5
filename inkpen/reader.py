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
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from inkpen.actors.read.checkpoint_views import ManifestViews, load_views
from inkpen.actors.read.path import Head
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import CheckpointLease
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store, parse_store_url

from .errors import CheckpointLapsedError, InkpenError, NotFoundError, UsageError
from .options import Options, check_text
from .read_api import FoldIterator, ReadAPI

log = get_logger("inkpen.reader")

T = TypeVar("T")

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
    ) -> None:
        self._store = store
        self._owns_store = owns_store
        self._resolver = resolver
        self._source = _Source(views)
        self._checkpoint_id = checkpoint_id
        self._manifest_id = manifest_id
        self._lease = lease
        self._options = options
        self._closed = False
        self._lock = threading.Lock()
        self._lapse: str | None = None
        self._head_only = head_only

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint this Reader reads at."""
        return self._checkpoint_id

    @property
    def manifest_id(self) -> int:
        return self._manifest_id

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this Reader is closed; open another with inkpen.open_reader")

    def _now_ms(self) -> int:
        return int(self._options.clock() * 1000)

    def _point_source(self) -> _Source:
        return self._source

    def _fold_source(self, *, long_running: bool) -> _Source:
        return self._source

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
                checkpoint=self._checkpoint_id,
                manifest_id=self._manifest_id,
                reason=reason,
            )
        return CheckpointLapsedError(
            f"the Reader's checkpoint lease {self._checkpoint_id} (manifest {self._manifest_id}) "
            f"lapsed: {reason}; files it pinned may be gone. Close this Reader and open a new one "
            "(with a longer checkpoint_lifetime if refreshes are slow)",
            key=self._checkpoint_id,
        )

    def _check_pin(self) -> None:
        """Raise :class:`CheckpointLapsedError` once the checkpoint may no longer protect."""
        with self._lock:
            known = self._lapse
        if known is not None:
            raise self._lapsed(known)
        if self._lease is not None:
            reason = self._lease.lapse()
            if reason is not None:
                raise self._lapsed(reason)

    def _vanished(self, error: NotFoundError) -> InkpenError:
        """The error for a file found missing: a lapsed pin, or a store missing a pinned file."""
        if isinstance(error, CheckpointLapsedError):
            return error
        reason = None if self._lease is None else self._lease.lapse()
        if reason is not None:
            return self._lapsed(reason)
        # Ask the store: is the checkpoint still there and live?
        try:
            latest = ManifestStore(self._store).latest()
        except InkpenError as exc:
            return exc
        found = None if latest is None else latest.manifest.checkpoint(self._checkpoint_id)
        if found is None:
            if self._lease is not None:
                self._lease.vanished()
            return self._lapsed(GONE)
        if not found.is_live(time.time()):
            return self._lapsed(f"it expired at {found.expire_time}")
        return NotFoundError(
            f"{error.key or 'an object'} is missing from {self._store.url} although checkpoint "
            f"{self._checkpoint_id} is live and its manifest {self._manifest_id} names it; "
            f"something other than inkpen's GC deleted it ({error})",
            key=error.key,
        )

    def _guarded(self, read: Callable[[], T]) -> T:
        self._check_open()
        self._check_pin()
        try:
            return read()
        except NotFoundError as exc:
            raise self._vanished(exc) from exc

    def _guarded_items(self, items: Iterator[T]) -> Iterator[T]:
        try:
            yield from items
        except NotFoundError as exc:
            raise self._vanished(exc) from exc

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        return self._guarded(lambda: ReadAPI.get(self, bucket, key))

    def get_many(self, bucket: str | bytes, keys: Iterable[str | bytes]) -> list[bytes | None]:
        return self._guarded(lambda: ReadAPI.get_many(self, bucket, keys))

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        return self._guarded(lambda: ReadAPI.head(self, bucket, key))

    def head_only_get(
        self, bucket: str | bytes, key: str | bytes, subkey: str | bytes = b""
    ) -> bytes | None:
        return self._guarded(lambda: ReadAPI.head_only_get(self, bucket, key, subkey))

    def _fold(
        self, run: Callable[[Any, int], Iterator[T]], *, long_running: bool
    ) -> FoldIterator[T]:
        self._check_open()
        self._check_pin()
        return super()._fold(
            lambda source, now: self._guarded_items(run(source, now)), long_running=long_running
        )

    def close(self) -> None:
        """Release the Reader's own checkpoint (if it made one) and its store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._lease is not None:
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
    **overrides: Any,
) -> Reader:
    """Open a read-only :class:`Reader` on the database at ``url`` (see the module docstring)."""
    opts = Options.build(options, **overrides)
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise UsageError(f"checkpoint must be a checkpoint id (str), got {checkpoint!r}")
    check_text("checkpoint", checkpoint, optional=True)
    if isinstance(url, str):
        parsed = parse_store_url(url)
        if parsed.scheme == "file" and not os.path.isdir(parsed.location):
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
    resolver = StoreResolver(store)
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
        views = load_views(resolver, manifest, manifest_id, opts)
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
    )
