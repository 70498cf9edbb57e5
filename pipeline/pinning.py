"""Which state of the database a Spark read sees: the checkpoint it pins, and how that ends.

A read reads one checkpoint, so every partition sees the same state however long the job runs
and whatever a live writer does meanwhile, and GC keeps every file that state needs.

Protocol:

1. **Pin, on the driver, when the DataFrame is loaded** (``spark.read...load()``). With the
   option ``checkpoint`` the read uses that existing checkpoint: it must be live, and its owner
   keeps it alive and deletes it. Otherwise the read creates its own checkpoint on the latest
   state (metadata ``kind=reader``, ``holder=spark``) with ``checkpoint_lifetime`` seconds to
   live. The same DataFrame reads the same checkpoint in every action.
2. **Check at planning** (the DataFrame's first action: Spark plans a DataFrame's read once and
   reuses the plan, see :mod:`.source`): the checkpoint must still be in the latest manifest and
   live, else the action fails before any task runs, saying to load the DataFrame again.
3. **Release.** Spark's Python data source API tells a batch reader neither when a job ends nor
   when a DataFrame is dropped, so a checkpoint the read pinned itself is *not* deleted: it
   expires after ``checkpoint_lifetime`` and GC drops it. A job that must outlive that, or that
   should release its pin at once, holds one with :func:`pinned_checkpoint` (a lease refreshed
   at half-life and deleted when the ``with`` block ends) and passes its id as ``checkpoint``.

Invariant: a task only ever reads files of a manifest some live checkpoint pins, provided the
job ends within the checkpoint's life (GC's ``min_age`` adds a further margin).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from inkpen.errors import NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import CheckpointLease, create_checkpoint
from inkpen.manifest.model import KIND_READER, Checkpoint, Manifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store

from .options import ReadOptions

log = get_logger("inkpen.pipeline")

HOLDER = "spark"
"""The ``holder`` metadata of checkpoints a Spark read pins for itself."""


@dataclass(frozen=True, slots=True)
class PinnedRead:
    """The checkpoint a read reads at, and the time by which TTLs are judged."""

    checkpoint_id: str
    manifest_id: int
    now_ms: int
    """Objects whose TTL ran out before this instant (the pin) are not read."""
    owned: bool
    """True when the read pinned the checkpoint itself (it then expires rather than being
    deleted); False for a checkpoint the caller passed in."""


def _open_database(store: ObjectStore) -> ManifestStore:
    manifests = ManifestStore(store)
    try:
        manifests.open_database(create_if_missing=False)
    except NotFoundError as exc:
        raise NotFoundError(
            f"{exc}; check the path option, or create the database first (inkpen.open(url), "
            "or a bulk load with df.write.format('inkpen'))",
            key=exc.key,
        ) from exc
    return manifests


def _live_checkpoint(manifests: ManifestStore, checkpoint_id: str, now: float) -> Checkpoint:
    latest = manifests.latest()
    found = None if latest is None else latest.manifest.checkpoint(checkpoint_id)
    if found is None:
        raise NotFoundError(
            f"no checkpoint {checkpoint_id} in {manifests.url}; list them with `inkpen "
            "checkpoint list URL`, or leave the checkpoint option out to pin a new one",
            key=checkpoint_id,
        )
    if not found.is_live(now):
        raise UsageError(
            f"checkpoint {checkpoint_id} of {manifests.url} expired at {found.expire_time}; GC "
            "may already have removed its files. Load the DataFrame again (a read without the "
            "checkpoint option pins a fresh one), or pass a longer-lived checkpoint"
        )
    return found


def pin_for_read(options: ReadOptions) -> PinnedRead:
    """Step 1 of the protocol: use the given checkpoint or pin a new one (driver side)."""
    store = open_store(options.url)
    try:
        manifests = _open_database(store)
        now = time.time()
        if options.checkpoint is not None:
            found = _live_checkpoint(manifests, options.checkpoint, now)
            owned = False
        else:
            found = create_checkpoint(
                manifests,
                lifetime=options.checkpoint_lifetime,
                metadata={"kind": KIND_READER, "holder": HOLDER},
            )
            owned = True
        log.info(
            "pipeline.read_pinned",
            url=store.url,
            checkpoint=found.id,
            manifest_id=found.manifest_id,
            owned=owned,
            expire_time=found.expire_time,
        )
        return PinnedRead(found.id, found.manifest_id, int(now * 1000), owned)
    finally:
        store.close()


def pinned_manifest(store: ObjectStore, pin: PinnedRead) -> Manifest:
    """Step 2 of the protocol: the pinned manifest, once the checkpoint is known to be live."""
    manifests = ManifestStore(store)
    _live_checkpoint(manifests, pin.checkpoint_id, time.time())
    return manifests.read(pin.manifest_id)


@contextmanager
def pinned_checkpoint(url: str, *, lifetime: float = 600.0) -> Iterator[str]:
    """Hold a checkpoint of the database at ``url`` for the ``with`` block; yields its id.

    The checkpoint is refreshed at half its ``lifetime`` while the block runs and deleted when it
    ends, so a read given ``.option("checkpoint", id)`` inside the block sees one state however
    long its jobs take, and releases it as soon as the block is done.
    """
    store = open_store(url)
    try:
        manifests = _open_database(store)
        with CheckpointLease.establish(
            manifests, lifetime=lifetime, metadata={"holder": HOLDER}
        ) as lease:
            yield lease.checkpoint.id
    finally:
        store.close()
