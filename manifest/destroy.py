"""Destroying a database, softly (mark it, let GC remove it later) or hard (remove it now).

Soft destroy:

1. claim the writer role (bump the epoch and fence the journal), so any live writer is fenced at
   its next segment write or manifest update;
2. in one CAS update, drop the writer checkpoint and set ``destroyed_at``.

GC then removes every object once ``destroy_grace`` has passed and no live checkpoint remains
(readers may finish), releasing a clone's pin in its parent first, the latest manifest last.

Hard destroy (the caller makes sure no writer is running):

1. refuse while live checkpoints exist (:class:`UsageError` naming them; delete them with
   ``delete_checkpoint`` first);
2. in one CAS update set ``destroyed_at`` and bump the writer epoch, so a writer that was still
   running is fenced at its next manifest update;
3. delete every object under the root except that manifest (in batches,
   :meth:`~inkpen.objectstore.ObjectStore.delete_many`: other objects first, then the older
   manifests; a few passes of listing and deleting catch objects written meanwhile and retry
   what the store refused), release a clone's pin in its parent, then delete that manifest last.
   Objects still there after the last pass stop it with a :class:`StoreError` naming them, the
   manifest kept.

An interrupted hard destroy leaves a manifest that says "destroyed": opening the database fails
with a clear error, and calling :func:`destroy` again finishes the job.
"""

from __future__ import annotations

import time
from dataclasses import replace

from inkpen.errors import NotFoundError, StoreError, UsageError
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.base import DeleteResult, innermost
from inkpen.objectstore.local import LocalStore

from .clones import StoreResolver, release_parent_pin
from .fencing import claim_writer
from .model import KIND_WRITER, Manifest, VersionedManifest
from .paths import manifest_key, parse_manifest_key
from .store import ManifestStore, RootState, as_store

log = get_logger("inkpen.manifest")

_DELETE_PASSES = 3


def destroy(
    store_or_url: ObjectStore | str, *, soft: bool, now: float | None = None
) -> VersionedManifest:
    """Destroy the database at ``store_or_url`` and return the manifest that records it.

    ``soft=True`` marks it destroyed and leaves the removal to GC; ``soft=False`` removes every
    object now (refused while live checkpoints exist). Destroying a destroyed database again is
    allowed: a soft call returns at once, a hard call finishes the removal.
    """
    if not isinstance(soft, bool):
        raise UsageError("destroy needs soft=True (mark, GC removes later) or soft=False (now)")
    store = as_store(store_or_url)
    when = time.time() if now is None else now
    manifest_store = ManifestStore(store)
    latest = manifest_store.latest()
    if latest is None:
        if manifest_store.check_root_state() is RootState.FOREIGN:
            raise UsageError(
                f"{store.url} holds objects but no inkpen manifest; it is not an inkpen "
                "database, so destroy will not touch it"
            )
        raise NotFoundError(f"no inkpen database at {store.url} to destroy")
    if soft:
        return _soft(manifest_store, latest, when)
    return _hard(manifest_store, when)


def remove_empty_directories(store: ObjectStore) -> None:
    """After the last object of a destroyed database is gone: a local root leaves no empty
    directories behind (other stores have none)."""
    inner = innermost(store)
    if isinstance(inner, LocalStore):
        inner.remove_empty_directories()


def _soft(
    manifest_store: ManifestStore, latest: VersionedManifest, now: float
) -> VersionedManifest:
    if latest.manifest.destroyed_at is not None:
        return latest
    claim = claim_writer(manifest_store, now=now, require_initialized=False)

    def mark(versioned: VersionedManifest) -> Manifest:
        manifest = versioned.manifest.without_checkpoints_of_kind(KIND_WRITER)
        return replace(manifest, destroyed_at=manifest.destroyed_at or now)

    marked = manifest_store.update(mark, writer_epoch=claim.epoch)
    log.info("database.destroyed", url=manifest_store.url, soft=True, manifest_id=marked.id)
    return marked


def _hard(manifest_store: ManifestStore, now: float) -> VersionedManifest:
    url = manifest_store.url

    def mark(versioned: VersionedManifest) -> Manifest | None:
        manifest = versioned.manifest
        live = manifest.live_checkpoints(now)
        if live:
            listed = ", ".join(
                f"{cp.id} (kind {cp.kind or 'unnamed'}, expires "
                f"{'never' if cp.expire_time is None else cp.expire_time})"
                for cp in live
            )
            raise UsageError(
                f"database at {url} still has live checkpoints: {listed}. A hard destroy would "
                "pull their files from under their holders; delete them with "
                "delete_checkpoint(), wait for them to expire, or destroy with soft=True"
            )
        if manifest.destroyed_at is not None:
            return None
        return replace(manifest, destroyed_at=now, writer_epoch=manifest.writer_epoch + 1)

    marked = manifest_store.update(mark)
    keep = manifest_key(marked.id)
    store = manifest_store.store
    left = DeleteResult()
    for done in range(_DELETE_PASSES + 1):
        others = [info.key for info in store.list("") if info.key != keep]
        if not others:
            break
        if done == _DELETE_PASSES:
            error = left.error(url)
            raise StoreError(
                f"destroying {url} left {len(others)} object(s) after {done} passes "
                f"({error or 'written meanwhile'}); its manifest says it is destroyed: call "
                "destroy again to finish",
                definite=True,
                key=others[0],
            )
        manifests = sorted(k for k in others if parse_manifest_key(k) is not None)
        left = store.delete_many(k for k in others if parse_manifest_key(k) is None)
        left = DeleteResult.merge([left, store.delete_many(manifests)])
    resolver = StoreResolver(store)
    try:
        release_parent_pin(marked.manifest, resolver)
    finally:
        resolver.close()
    store.delete(keep)
    remove_empty_directories(store)
    log.info("database.destroyed", url=url, soft=False, manifest_id=marked.id)
    return marked
