"""Clones: a new database that starts from a parent's checkpoint and shares the parent's files.

A clone is shallow. Its manifest copies the journal and ledger state of the parent's pinned
manifest with every file descriptor's ``root`` set to the parent's URL (descriptors already
pointing further up keep their root), so reads resolve those files in the parent's store (see
:class:`StoreResolver`). Only the journal segments the pinned manifest has not rolled yet, the ids
in ``(last_rolled_segment, next_segment)``, are copied into the clone's own ``journal/`` under the
same ids (server-side copy, or a hard link on a local directory): the clone's writer replays them
like its own. Writes go to the clone only; its writer epoch starts one above the pinned
manifest's, above every copied segment's epoch.

The parent keeps a checkpoint for the clone (metadata ``{"kind": "clone", "clone": URL}``, no
expiry), so parent GC never removes a file the clone may read.

Creation is resumable, in the order that leaves nothing untracked at any crash point:

1. the clone's first manifest: ``initialized`` False, ``parent`` naming the parent's URL and the
   id of the pin checkpoint (decided here, so a rerun finds and reuses it);
2. the pin in the parent, created unless present: from the named checkpoint, or from the
   parent's latest state (including its acknowledged segments);
3. the unrolled segments of the pinned manifest, copied unless already present (one listing of
   the clone's journal, then the copies, many at once);
4. the clone's manifest with the copied state and ``initialized`` True.

Calling :func:`create_clone` again with the same arguments finishes an interrupted clone; on a
finished clone it changes nothing. A destroyed parent: the pin is removed and the call fails.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from inkpen.errors import AlreadyExistsError, CorruptionError, NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.parallel import concurrency, run_bounded
from inkpen.objectstore.url import check_distinct_locations

from .checkpoints import ensure_checkpoint
from .model import (
    CHECKPOINT_KIND,
    KIND_CLONE,
    CloneParent,
    JournalState,
    LedgerState,
    Manifest,
    VersionedManifest,
)
from .paths import JOURNAL_PREFIX, segment_key
from .store import ManifestStore, RootState, as_store, require_live

log = get_logger("inkpen.manifest")


def rooted_journal(journal: JournalState, root: str) -> JournalState:
    """``journal`` as a clone sees it: files without a root now point at ``root``."""
    return replace(
        journal,
        files=tuple(f if f.root is not None else f.with_root(root) for f in journal.files),
    )


def rooted_ledger(ledger: LedgerState, root: str) -> LedgerState:
    """``ledger`` as a clone sees it: SSTs without a root now point at ``root``."""
    return replace(
        ledger,
        levels=tuple(
            tuple(s if s.root is not None else s.with_root(root) for s in level)
            for level in ledger.levels
        ),
    )


def create_clone(
    parent: ObjectStore | str,
    clone: ObjectStore | str,
    *,
    checkpoint_id: str | None = None,
    now: float | None = None,
) -> VersionedManifest:
    """Create (or finish creating) a clone of ``parent`` at ``clone`` and return its manifest.

    ``checkpoint_id`` names a live checkpoint of the parent to clone from; without it the clone
    starts from the parent's latest state. The clone root must be empty or hold an unfinished
    clone of the same parent.
    """
    parent_store = as_store(parent)
    clone_store = as_store(clone)
    if checkpoint_id is not None and (not isinstance(checkpoint_id, str) or not checkpoint_id):
        raise UsageError(f"checkpoint_id must be a checkpoint id or None, got {checkpoint_id!r}")
    check_distinct_locations(parent_store, clone_store, what="clone")
    when = time.time() if now is None else now
    parent_ms = ManifestStore(parent_store)
    clone_ms = ManifestStore(clone_store)
    parent_url = parent_store.url
    clone_url = clone_store.url

    existing = _existing_clone(clone_ms, parent_url)
    if existing is not None and existing.manifest.initialized:
        return existing

    parent_latest = parent_ms.latest()
    if parent_latest is None:
        raise NotFoundError(f"no inkpen database at {parent_url} to clone")
    if parent_latest.manifest.destroyed_at is not None:
        if existing is not None and existing.manifest.parent is not None:
            _release_pin(parent_ms, existing.manifest.parent.checkpoint_id)
        raise NotFoundError(
            f"cannot clone {parent_url}: it was destroyed at {parent_latest.manifest.destroyed_at}"
            + (
                f"; the unfinished clone at {clone_url} can never be finished, destroy it"
                if existing is not None
                else ""
            ),
            key=None,
        )
    require_live(parent_latest, parent_url)

    if existing is None:
        if checkpoint_id is not None:
            _check_source(parent_latest, checkpoint_id, parent_url, when)
        existing = _start_clone(clone_ms, parent_url)
    assert existing.manifest.parent is not None
    pin_id = existing.manifest.parent.checkpoint_id

    pin = ensure_checkpoint(
        parent_ms,
        pin_id,
        lifetime=None,
        source=checkpoint_id,
        metadata={CHECKPOINT_KIND: KIND_CLONE, "clone": clone_url},
        now=when,
    )
    pinned = parent_ms.read(pin.manifest_id)
    _copy_segments(parent_store, clone_store, pinned.journal)

    def finish(versioned: VersionedManifest) -> Manifest | None:
        current = versioned.manifest
        if current.initialized:
            return None
        return Manifest(
            writer_epoch=pinned.writer_epoch + 1,
            compactor_epoch=pinned.compactor_epoch,
            journal=rooted_journal(pinned.journal, parent_url),
            ledger=rooted_ledger(pinned.ledger, parent_url),
            checkpoints=(),
            parent=current.parent,
            initialized=True,
            head_only=pinned.head_only,
            merge_operators=pinned.merge_operators,
        )

    done = clone_ms.update(finish)
    log.info(
        "clone.created",
        parent=parent_url,
        clone=clone_url,
        checkpoint=pin_id,
        parent_manifest_id=pin.manifest_id,
        manifest_id=done.id,
    )
    return done


def _existing_clone(clone_ms: ManifestStore, parent_url: str) -> VersionedManifest | None:
    state = clone_ms.check_root_state()
    if state is RootState.FOREIGN:
        raise UsageError(
            f"{clone_ms.url} holds objects but no inkpen manifest; clone into an empty root"
        )
    if state is RootState.EMPTY:
        return None
    existing = clone_ms.latest()
    assert existing is not None
    manifest = existing.manifest
    if manifest.parent is None or manifest.parent.root != parent_url:
        raise UsageError(
            f"{clone_ms.url} already holds a database that is not a clone of {parent_url}; "
            "clone into an empty root"
        )
    if manifest.destroyed_at is not None:
        require_live(existing, clone_ms.url)
    return existing


def _check_source(latest: VersionedManifest, checkpoint_id: str, url: str, now: float) -> None:
    source = latest.manifest.checkpoint(checkpoint_id)
    if source is None:
        raise NotFoundError(
            f"checkpoint {checkpoint_id} does not exist in the database at {url}; "
            "list its checkpoints to pick a live one"
        )
    if not source.is_live(now):
        raise UsageError(
            f"checkpoint {checkpoint_id} of {url} expired at {source.expire_time}; "
            "clone from a live checkpoint or from the latest state"
        )


def _start_clone(clone_ms: ManifestStore, parent_url: str) -> VersionedManifest:
    first = Manifest(initialized=False, parent=CloneParent(parent_url, str(uuid.uuid4())))
    try:
        return clone_ms.create(first)
    except AlreadyExistsError:
        # A concurrent create_clone got there first: continue with its pin id.
        existing = _existing_clone(clone_ms, parent_url)
        assert existing is not None
        return existing


def _copy_segments(source: ObjectStore, dest: ObjectStore, journal: JournalState) -> None:
    """Copy the unrolled segments of ``journal`` the clone lacks (one listing tells which),
    up to the clone store's :func:`~inkpen.objectstore.parallel.concurrency` at once."""
    present = {info.key for info in dest.list(JOURNAL_PREFIX)}
    wanted = [segment_key(i) for i in journal.unrolled_segments()]

    def copy(key: str) -> None:
        try:
            dest.copy(key, key, source=source)
        except NotFoundError:
            raise CorruptionError(
                f"{source.url}/{key}",
                "journal segment referenced by the pinned manifest is missing",
            ) from None

    run_bounded(copy, [k for k in wanted if k not in present], limit=concurrency(dest))


def _release_pin(parent_ms: ManifestStore, pin_id: str) -> None:
    """Remove a clone's pin checkpoint from its parent; a missing pin or parent is fine."""

    def change(versioned: VersionedManifest) -> Manifest | None:
        if versioned.manifest.checkpoint(pin_id) is None:
            return None
        return versioned.manifest.without_checkpoint(pin_id)

    try:
        parent_ms.update(change)
    except NotFoundError:
        return
    log.debug("clone.pin_released", parent=parent_ms.url, checkpoint=pin_id)


def release_parent_pin(manifest: Manifest, resolver: StoreResolver) -> None:
    """If ``manifest`` is a clone's, remove the checkpoint that pins it in its parent."""
    if manifest.parent is None:
        return
    parent_ms = ManifestStore(resolver.store_for(manifest.parent.root))
    _release_pin(parent_ms, manifest.parent.checkpoint_id)


class StoreResolver:
    """Answers which store holds a file: this database's own, or an ancestor's by URL.

    Descriptors with ``root`` None live in the own store; any other root is opened once, cached
    and shared. Thread-safe. :meth:`close` closes the stores it opened. ``wrap``, when given, is
    applied to each store it opens (a writer's request counting wraps its parents' stores too).
    """

    def __init__(
        self,
        own_store: ObjectStore,
        *,
        wrap: Callable[[ObjectStore], ObjectStore] | None = None,
    ) -> None:
        self._own = as_store(own_store)
        self._wrap = wrap
        self._opened: dict[str, ObjectStore] = {}
        self._lock = threading.Lock()

    @property
    def own_store(self) -> ObjectStore:
        return self._own

    def store_for(self, root: str | None) -> ObjectStore:
        """The store holding objects of ``root`` (None or the own URL: the own store)."""
        if root is None or root == self._own.url:
            return self._own
        with self._lock:
            store = self._opened.get(root)
            if store is None:
                store = open_store(root)
                if self._wrap is not None:
                    store = self._wrap(store)
                self._opened[root] = store
            return store

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened.values()), {}
        for store in opened:
            store.close()
