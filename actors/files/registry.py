"""The snapshot register an owner (Penciller or Inker) keeps, and its delete confirmations.

A clone registers with the owner of the files it reads, naming the manifest id of the view it
took; the registration lapses after its timeout (short for queries, long for long folds), so a
clone that dies without releasing holds nothing back for ever. When a file clerk in
delete_pending asks whether its file may go, the owner says yes only when

- no live registration took its view before the manifest change that dropped the file, and
- no live checkpoint's manifest names the file (checkpoints protect other processes' readers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import InkpenActor, handles, stop
from inkpen.actors.files.file_clerk import (
    ConfirmDelete,
    FileDeleted,
    answer_confirm_delete,
    set_for_delete,
)
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.keeper import ManifestKeeper
from inkpen.errors import InkpenError
from inkpen.logs import get_logger

log = get_logger("inkpen.snapshots")

CHECKPOINT_REFRESH_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class Registration:
    """One clone's claim: the manifest id its view came from, and when the claim lapses."""

    snapshot_id: str
    manifest_id: int
    started: float
    timeout: float

    def expired(self, now: float) -> bool:
        return now > self.started + self.timeout


class SnapshotRegistry:
    """Registrations by snapshot id; owned by one actor, so not locked.

    After every change it tells the keeper the oldest manifest a live registration reads, so the
    writer checkpoint protects those files from GC in any process.
    """

    def __init__(self, owner: str, keeper: ManifestKeeper) -> None:
        self._owner = owner
        self._keeper = keeper
        self._live: dict[str, Registration] = {}

    def register(self, snapshot_id: str, manifest_id: int, timeout: float) -> Registration:
        registration = Registration(snapshot_id, manifest_id, time.monotonic(), timeout)
        self._live[snapshot_id] = registration
        self._report()
        return registration

    def release(self, snapshot_id: str) -> bool:
        released = self._live.pop(snapshot_id, None) is not None
        self._report()
        return released

    def expire(self) -> list[str]:
        """Drop lapsed registrations; return their ids."""
        now = time.monotonic()
        lapsed = [sid for sid, r in self._live.items() if r.expired(now)]
        for sid in lapsed:
            del self._live[sid]
            log.warning("snapshot.registration_expired", owner=self._owner, snapshot=sid)
        if lapsed:
            self._report()
        return lapsed

    def _report(self) -> None:
        oldest = min((r.manifest_id for r in self._live.values()), default=None)
        self._keeper.set_floor(self._owner, oldest)

    def holds(self, change_id: int) -> bool:
        """Whether a live registration predates the manifest change ``change_id``."""
        self.expire()
        return any(r.manifest_id < change_id for r in self._live.values())

    def __len__(self) -> int:
        return len(self._live)

    def oldest_manifest(self) -> int | None:
        self.expire()
        return min((r.manifest_id for r in self._live.values()), default=None)


class CheckpointGuard:
    """Answers an owner's delete confirmations: may this dropped file go now?

    Never once the writer is fenced: the newer writer owns the database and its GC decides.
    Otherwise a file may go when no live registration predates the change that dropped it and
    no live checkpoint still references it.

    Other processes add checkpoints, so the guard re-reads the latest manifest before answering,
    at most once per second; manifests named by checkpoints are read once and cached. A
    checkpoint counts as live when it was live at the time that manifest was read
    (``keeper.latest_as_of``): its holder may have refreshed it since.
    """

    def __init__(self, keeper: ManifestKeeper) -> None:
        self._keeper = keeper
        self._refreshed = 0.0
        self._names: dict[int, frozenset[str]] = {}

    def may_delete(self, registry: SnapshotRegistry, request: ConfirmDelete) -> bool:
        if self._keeper.fenced is not None:
            return False
        if registry.holds(request.change_id):
            return False
        try:
            return not self.holds(request.name)
        except InkpenError as exc:
            log.warning("snapshot.delete_check_failed", name=request.name, error=str(exc))
            return False

    def holds(self, name: str) -> bool:
        now_mono = time.monotonic()
        if now_mono - self._refreshed > CHECKPOINT_REFRESH_INTERVAL:
            self._keeper.refresh()
            self._refreshed = now_mono
        latest = self._keeper.latest
        # Live as of when that manifest was read, not now: it may be up to a refresh interval
        # old, and a checkpoint it shows about to expire may have been refreshed since. Judged
        # by now, a reader's lease refreshed in time would look expired and lose its files.
        as_of = min(time.time(), self._keeper.latest_as_of)
        for checkpoint in latest.manifest.live_checkpoints(as_of):
            if checkpoint.id == self._keeper.writer_checkpoint:
                continue
            names = self._names.get(checkpoint.manifest_id)
            if names is None:
                manifest = self._keeper.read(checkpoint.manifest_id)
                names = frozenset(n for root, n in manifest.referenced_objects() if root is None)
                self._names[checkpoint.manifest_id] = names
            if name in names:
                return True
        return False


class FileOwner(InkpenActor):
    """Base of the two actors that own files (the Penciller its SSTs, the Inker its journal
    files): it keeps their snapshot registrations and answers their clerks in delete_pending.

    Answers :class:`ConfirmDelete` (through :func:`answer_confirm_delete`) and :class:`FileDeleted`.
    Each owner's own register message calls :meth:`_register_snapshot`, and its release message
    ``self.registry.release``.
    """

    def __init__(self, ctx: EngineContext, owner: str) -> None:
        super().__init__()
        self.ctx = ctx
        self.registry = SnapshotRegistry(owner, ctx.keeper)
        self.guard = CheckpointGuard(ctx.keeper)
        self.pending_deletes: dict[str, int] = {}
        """Files set for delete, by the id of the manifest change that dropped them."""
        self._retiring: dict[str, pykka.ActorRef[Any]] = {}
        """The clerks of those files, stopped when the owner shuts down."""

    def retire(self, name: str, clerk: pykka.ActorRef[Any] | None, change_id: int) -> None:
        """The manifest with id ``change_id`` dropped ``name``: its clerk enters delete_pending."""
        self.pending_deletes[name] = change_id
        if clerk is not None:
            self._retiring[name] = clerk
            set_for_delete(clerk, change_id)

    def stop_retiring(self) -> None:
        """Stop the clerks of files still in delete_pending (at shutdown): a file a stopped
        writer no longer deletes is an orphan the next GC removes."""
        retiring, self._retiring = list(self._retiring.values()), {}
        for clerk in retiring:
            stop(clerk)

    def _register_snapshot(self, snapshot_id: str, *, long_running: bool) -> None:
        options = self.ctx.options
        timeout = options.snapshot_timeout_long if long_running else options.snapshot_timeout_short
        # The latest manifest, not the view's: the owner's half of it is exactly the view (the
        # owner publishes after each of its commits), and unlike an older one it cannot have
        # been collected already, so the writer checkpoint may safely pin it.
        self.registry.register(snapshot_id, self._snapshot_floor(), timeout)

    def _snapshot_floor(self) -> int:
        """The manifest a snapshot registered now reads (the latest; an owner whose view can
        lag the latest manifest answers the one its view holds)."""
        return self.ctx.keeper.latest.id

    @handles(ConfirmDelete)
    def _confirm_delete(self, message: ConfirmDelete) -> None:
        may = self.guard.may_delete(self.registry, message)
        answer_confirm_delete(message.clerk, may_delete=may)

    @handles(FileDeleted)
    def _deleted(self, message: FileDeleted) -> None:
        self.pending_deletes.pop(message.name, None)
        self._retiring.pop(message.name, None)
