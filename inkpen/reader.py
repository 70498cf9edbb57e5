"""Reader: read-only access to a database at one checkpoint, from any process.

``inkpen.open_reader(url)`` establishes its own checkpoint on the database's latest state (with
``checkpoint_lifetime``, refreshed at half-life for as long as the Reader is open, deleted on
close) and reads exactly that state: later writes are not seen, and no file it needs is deleted —
not by the writer's merges and compactions, not by GC in any process — while the checkpoint
lives. ``inkpen.open_reader(url, checkpoint=ID)`` reads at an existing checkpoint (made by
``Bookie.checkpoint`` or the CLI) and leaves its lifetime to its owner. A Reader never writes data;
with its own checkpoint it writes only the manifest changes that create, refresh and delete it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from inkpen.actors.reader import ManifestViews, load_views
from inkpen.manifest.checkpoints import CheckpointLease
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store, parse_store_url

from .errors import NotFoundError, UsageError
from .options import Options, check_text
from .reading import ReadAPI


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
            raise NotFoundError(
                f"no inkpen database at {url}: the directory {parsed.location} does not exist"
            )
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
    )
