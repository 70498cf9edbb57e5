"""The writer's manifest keeper: every manifest commit of an open Bookie goes through it.

The Inker commits the journal half of the manifest and the Penciller the ledger half; both go
through one :class:`ManifestKeeper`, which serialises them within the process (so the two owners
never make each other retry), applies each change with the writer's epoch (a newer epoch in the
store raises :class:`~inkpen.errors.FencedError` instead of a retry) and keeps the writer's
checkpoint pointing at the manifest the writer relies on.

The keeper is the one holder of the writer's fenced state (:attr:`ManifestKeeper.fenced`): the
Bookie actor, the Inker, the Penciller, GC and the engine ask it rather than keep a copy. It is
set by whoever sees the fence first (a commit or refresh that finds a newer epoch, a segment
write that finds a newer writer's slot, a GC pass); a fenced keeper refuses every later commit
with the same error and calls ``on_fenced`` once, which halts the throttle and shuts the write
intake so that nothing waits for a writer that can write no more.

A commit that adds files names them (``new_files``): each must still be on the store just before
the update, so the keeper never writes a manifest naming an object that is gone. One that vanished
was deleted by another process (a GC whose ``min_age`` was too short for it, or a newer writer's
GC); the keeper then re-reads the manifest (a newer writer epoch fences it) and otherwise refuses
the commit with a definite :class:`~inkpen.errors.StoreError`, which the owner retries by writing
the file again.

It also caches manifests by id (they are immutable) for the owners' delete confirmations, which
must know which files live checkpoints still reference.

**Commit, then install or roll back.** Every change that adds files an owner wrote (a roll, a
journal compaction, an L0 write, a merge) goes through :func:`commit_or_roll_back`, so all
behave alike: the new files leave the in-flight set either way; on success the owner installs
its new state; on failure their clerks are stopped, ``<site>_commit_failed`` is logged, the owner
rolls its state back and, unless the writer is fenced, its work is retried
(:data:`COMMIT_RETRY_AFTER` seconds later, on the owner's timer) with freshly written files.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import pykka

from inkpen.actors.base import stop
from inkpen.actors.kernel.in_flight import InFlight
from inkpen.errors import FencedError, InkpenError, StoreError
from inkpen.logs import get_logger
from inkpen.manifest.model import Manifest, VersionedManifest
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.parallel import concurrency, run_bounded

log = get_logger("inkpen.manifest")

Change = Callable[[Manifest], Manifest]

COMMIT_RETRY_AFTER = 1.0
"""Seconds after a failed commit before its owner's work is tried again."""


class NewFile(Protocol):
    """A file an owner wrote for a commit: its name and the clerk that owns it."""

    @property
    def name(self) -> str: ...

    @property
    def clerk(self) -> pykka.ActorRef[Any] | None: ...


class ManifestKeeper:
    """Serialised, epoch-checked manifest commits for one writer; thread-safe."""

    def __init__(
        self,
        manifests: ManifestStore,
        *,
        epoch: int,
        writer_checkpoint: str | None,
        latest: VersionedManifest,
        timeout: float,
    ) -> None:
        self.manifests = manifests
        self.epoch = epoch
        self.writer_checkpoint = writer_checkpoint
        self._latest = latest
        self._latest_as_of = 0.0  # unknown: expire nothing until a commit or refresh says when
        self._timeout = timeout
        self._lock = threading.Lock()
        self._fenced: FencedError | None = None
        self._halted: InkpenError | None = None
        self._cache: dict[int, Manifest] = {latest.id: latest.manifest}
        self.on_fenced: Callable[[FencedError], None] | None = None
        self.commits = 0
        self._floors: dict[str, int] = {}

    @property
    def latest(self) -> VersionedManifest:
        return self._latest

    @property
    def latest_as_of(self) -> float:
        """A wall-clock time at which :attr:`latest` was the latest manifest (taken before it
        was read). A checkpoint it holds that was live then may have been refreshed since, so
        judge liveness at this time, not now: a stale copy must never declare one expired."""
        return self._latest_as_of

    @property
    def fenced(self) -> FencedError | None:
        return self._fenced

    def commit(
        self, change: Change, *, reason: str, new_files: Iterable[str] = ()
    ) -> VersionedManifest:
        """Apply ``change`` to the latest manifest and write it at the next id.

        ``new_files``: objects of this store the change adds; each must still exist."""
        return self.commit_at(
            lambda manifest, _: change(manifest), reason=reason, new_files=new_files
        )

    def commit_at(
        self,
        change: Callable[[Manifest, int], Manifest],
        *,
        reason: str,
        new_files: Iterable[str] = (),
    ) -> VersionedManifest:
        """As :meth:`commit`, for a change that must know the id it is written at."""
        if self._fenced is not None:
            raise self._fenced
        if self._halted is not None:
            raise self._halted
        self._check_present(new_files, reason)
        with self._lock:
            if self._fenced is not None:
                raise self._fenced
            if self._halted is not None:
                raise self._halted
            started = time.monotonic()
            as_of = time.time()
            seen: list[VersionedManifest] = []

            def apply(current: VersionedManifest) -> Manifest:
                seen.append(current)
                new_id = current.id + 1
                return self._with_writer_checkpoint(change(current.manifest, new_id), new_id)

            try:
                versioned = self.manifests.update(
                    apply, writer_epoch=self.epoch, timeout=self._timeout
                )
            except FencedError as exc:
                self._fence(exc)
                raise
            except InkpenError:
                # A change refused on a manifest newer than ours (another process's cursor or
                # checkpoint): the work redone next must judge that manifest, not ours.
                if seen and seen[-1].id > self._latest.id:
                    self._latest = seen[-1]
                    self._latest_as_of = as_of
                    self._cache[seen[-1].id] = seen[-1].manifest
                raise
            self._latest = versioned
            self._latest_as_of = as_of
            self._cache[versioned.id] = versioned.manifest
            self.commits += 1
        log.debug(
            "manifest.commit",
            reason=reason,
            id=versioned.id,
            ms=round((time.monotonic() - started) * 1000, 2),
        )
        return versioned

    def _check_present(self, names: Iterable[str], reason: str) -> None:
        """Raise unless every one of ``names`` is on the store (see the module docstring)."""
        store = self.manifests.store
        tables = TableStore(store)
        wanted = list(names)
        found = run_bounded(tables.exists, wanted, limit=concurrency(store))  # heads at once
        for name, present in zip(wanted, found, strict=True):
            if not present:
                log.error("manifest.commit_file_missing", reason=reason, name=name)
                self.refresh()  # a newer writer's GC: FencedError
                raise StoreError(
                    f"{name}, written for a {reason} commit, vanished before the commit: another "
                    "process deleted it (a GC whose min_age is below the time this writer takes "
                    "to commit a file); the manifest was not changed and the work is retried",
                    definite=True,
                    key=name,
                )

    def read(self, manifest_id: int) -> Manifest:
        """The manifest with this id (cached; manifests never change)."""
        found = self._cache.get(manifest_id)
        if found is None:
            found = self.manifests.read(manifest_id)
            with self._lock:
                self._cache[manifest_id] = found
        return found

    def forget_before(self, manifest_id: int) -> None:
        """Drop cached manifests older than ``manifest_id`` that no checkpoint names."""
        keep = {c.manifest_id for c in self._latest.manifest.checkpoints}
        with self._lock:
            for key in [k for k in self._cache if k < manifest_id and k not in keep]:
                del self._cache[key]

    def refresh(self) -> VersionedManifest:
        """Re-read the latest manifest (to see checkpoints other processes added)."""
        as_of = time.time()
        latest = self.manifests.latest()
        if latest is not None:
            if latest.manifest.writer_epoch > self.epoch:
                error = FencedError(
                    f"writer epoch {latest.manifest.writer_epoch} has opened this database; "
                    f"this Bookie (epoch {self.epoch}) can no longer write"
                )
                with self._lock:
                    self._fence(error)
                raise error
            with self._lock:
                if latest.id > self._latest.id:
                    self._latest = latest
                    self._cache[latest.id] = latest.manifest
                if latest.id >= self._latest.id:
                    self._latest_as_of = max(self._latest_as_of, as_of)
        return self._latest

    def set_floor(self, owner: str, manifest_id: int | None) -> None:
        """The oldest manifest ``owner``'s live snapshots read (None: none).

        The writer checkpoint points at the oldest floor (or the newest manifest when there is
        none), so GC of any process keeps every file an open snapshot of this writer may read.
        It moves at the next commit.
        """
        with self._lock:
            if manifest_id is None:
                self._floors.pop(owner, None)
            else:
                self._floors[owner] = manifest_id

    def _with_writer_checkpoint(self, manifest: Manifest, new_id: int) -> Manifest:
        if self.writer_checkpoint is None:
            return manifest
        new_id = min([new_id, *self._floors.values()])
        checkpoints = tuple(
            dataclasses.replace(c, manifest_id=new_id) if c.id == self.writer_checkpoint else c
            for c in manifest.checkpoints
        )
        return dataclasses.replace(manifest, checkpoints=checkpoints)

    def drop_writer_checkpoint(self) -> None:
        """On a clean close: the writer no longer pins anything."""
        cid = self.writer_checkpoint
        if cid is None:
            return
        self.commit(
            lambda m: dataclasses.replace(
                m, checkpoints=tuple(c for c in m.checkpoints if c.id != cid)
            ),
            reason="close",
        )
        self.writer_checkpoint = None

    def halt(self, error: InkpenError) -> None:
        """Refuse every later commit with ``error``; a commit under way ends first (this takes
        the commit lock). An abandoned writer commits nothing after this, as after a crash."""
        with self._lock:
            if self._halted is None:
                self._halted = error

    def fence(self, error: FencedError) -> None:
        """Record that a newer writer owns the database (seen by any actor); idempotent."""
        with self._lock:
            self._fence(error)

    def _fence(self, error: FencedError) -> None:
        if self._fenced is None:
            self._fenced = error
            log.warning("writer.fenced", epoch=self.epoch, error=str(error))
            if self.on_fenced is not None:
                self.on_fenced(error)


def commit_or_roll_back(
    keeper: ManifestKeeper,
    change: Change,
    *,
    reason: str,
    new_files: Sequence[NewFile],
    in_flight: InFlight,
    install: Callable[[VersionedManifest], None],
    roll_back: Callable[[InkpenError], None],
    retry: Callable[[float], object],
    failed_event: str | None = None,
) -> VersionedManifest | None:
    """Commit a change adding ``new_files``, then install the new state or roll back, once.

    On success ``install`` gets the committed manifest. On failure the new files' clerks are
    stopped (nothing names the files: GC removes them), ``failed_event`` (by default
    ``<reason>_commit_failed``) is logged,
    ``roll_back`` gets the error and, unless it is the fence, ``retry`` is asked to try the
    work again after :data:`COMMIT_RETRY_AFTER` seconds. Answers the manifest, or None.
    """
    names = [f.name for f in new_files]
    try:
        versioned = keeper.commit(change, reason=reason, new_files=names)
    except InkpenError as exc:
        in_flight.discard(names)
        log.warning(failed_event or f"{reason}_commit_failed", error=str(exc))
        for new in new_files:
            stop(new.clerk)
        roll_back(exc)
        if not isinstance(exc, FencedError) and keeper.fenced is None:
            retry(COMMIT_RETRY_AFTER)
        return None
    in_flight.discard(names)
    install(versioned)
    return versioned
