"""Checkpoints: durable pins on a manifest version, and the leases readers hold them through.

A checkpoint names a manifest id; while it is live (not past its ``expire_time``) GC keeps that
manifest and every object it references, so a reader in any process can read a consistent view
for as long as it holds one. Checkpoints live in the manifest itself and change only through CAS
updates.

Creating one from the latest manifest (at id ``n``): refuse a destroyed or unfinished database;
point the checkpoint at ``n + 1``, the id of the very update that adds it; and record in that
manifest ``journal.next_segment``, one past the last journal segment listed *after reading
manifest n* (inside the CAS change, once per attempt), so the checkpoint covers every segment
manifest n's ledger may name — a flush persists SQNs only of segments already written — and every
segment acknowledged but not yet rolled. A segment missing below a later one, or below
``next_segment``, is damage: a :class:`CorruptionError`, unless the caller allows missing
segments, when the checkpoint covers every segment present. Creating
one from a live source checkpoint: the new checkpoint names the source's manifest id. Refreshing
moves ``expire_time``; an expired checkpoint can no longer be refreshed (GC may already have
removed what it pinned).

A :class:`CheckpointLease` is a reader's checkpoint kept alive by a daemon thread that refreshes
it at half its remaining life; an idle lease makes no other store requests. A lease *lapses* when
its checkpoint may have stopped protecting its files: the checkpoint vanished, its expiry passed
before a refresh succeeded, or a refresh returned only after the expiry it extended (it may have
landed late, after another process judged the checkpoint expired). A lapsed lease says so and is
never refreshed again.

**An update that lands below the latest.** The CAS reads the latest version ``n`` and creates
``n + 1`` if absent. GC collects superseded versions, and the writer's own GC may do so at any
age (``gc_min_age`` 0): between a Reader's read and its create, the writer may commit ``n + 1``
and ``n + 2`` — dropping files ``n`` names — and its GC collect version ``n + 1`` and those
files. The create then finds the slot free and succeeds: a version below the latest, which no
process ever takes for the latest (a higher id exists from then on) or builds on. A checkpoint
created so is seen by nobody and names files that may already be gone: a Reader that read it
failed with a bare ``NotFoundError`` opening its views. A refresh landing so is lost (the lease
believes an expiry no GC sees: a lapse that did not have to be), a delete too (the checkpoint
pins on until it expires, for ever without an expiry). The writer's own commits cannot land so:
its checkpoint pins every version from its last commit up, so none above the one it read is
collected.

So every checkpoint change here is confirmed: after the CAS the latest manifest must show it —
the checkpoint present (its id is new: only a version derived from the one this creation wrote
can hold it, and a version below the latest is derived by no one), its new expiry, or its
absence. Shown, the version is in the line every later version, GC pass and delete check builds
on, and a new checkpoint protects its files from its commit as above (until that commit ``n``
was the latest, so nothing it names was collected). Not shown, the change is made again from the
latest — a creation with the same id, a fresh clock and the segments listed anew; a refresh
judging the expiry again — up to :data:`~inkpen.manifest.store.LANDING_ATTEMPTS` times, then a
definite
:class:`StoreError`; the stray version is a superseded manifest GC collects. (A checkpoint
dropped by someone else before the check is created again, or its refresh ends in
:class:`NotFoundError`.)
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from inkpen.checks import (
    check_count,
    check_flag,
    check_seconds,
    check_text,
    check_timestamp,
)
from inkpen.errors import InkpenError, NotFoundError, StoreError, UsageError
from inkpen.logs import get_logger

from .fencing import judge_tail, scan_segments, settle_missing
from .model import CHECKPOINT_KIND, KIND_READER, Checkpoint, Manifest, VersionedManifest
from .store import ManifestStore, require_live

log = get_logger("inkpen.manifest")


def _check_lifetime(lifetime: object, *, optional: bool) -> float | None:
    if lifetime is None and optional:
        return None
    return check_seconds("checkpoint lifetime", lifetime, above_minimum=True)


def _check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise UsageError("checkpoint metadata must be a mapping of str to str")
    for k, v in metadata.items():
        check_text("checkpoint metadata key", k, limit=256)
        check_text(f"checkpoint metadata {k!r}", v, limit=64 * 1024)
    return dict(metadata)


def _expiry(now: float, lifetime: float | None) -> float | None:
    return None if lifetime is None else now + lifetime


def _require_checkpoint(versioned: VersionedManifest, checkpoint_id: str, url: str) -> Checkpoint:
    found = versioned.manifest.checkpoint(checkpoint_id)
    if found is None:
        raise NotFoundError(
            f"checkpoint {checkpoint_id} does not exist in the database at {url}; "
            f"`inkpen checkpoint list {url}` lists the ones it holds"
        )
    return found


def create_checkpoint(
    manifest_store: ManifestStore,
    *,
    lifetime: float | None,
    source: str | None = None,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
    next_segment: int | None = None,
    include_segments: bool = True,
    allow_missing_segments: bool = False,
    now: float | None = None,
) -> Checkpoint:
    """Add a checkpoint to the database and return it.

    ``lifetime`` seconds until it expires (None: never; its holder must delete it). Without
    ``source`` it pins the latest state, including journal segments up to ``next_segment``
    (exclusive) when given, else, when ``include_segments``, every segment present now (a
    segment missing below a later one raises :class:`CorruptionError` unless
    ``allow_missing_segments``). With ``source`` (the id of a live checkpoint) it pins the same
    manifest as the source.
    """
    return ensure_checkpoint(
        manifest_store,
        str(uuid.uuid4()),
        lifetime=lifetime,
        source=source,
        name=name,
        metadata=metadata,
        next_segment=next_segment,
        include_segments=include_segments,
        allow_missing_segments=allow_missing_segments,
        now=now,
    )


def ensure_checkpoint(
    manifest_store: ManifestStore,
    checkpoint_id: str,
    *,
    lifetime: float | None,
    source: str | None = None,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
    next_segment: int | None = None,
    include_segments: bool = True,
    allow_missing_segments: bool = False,
    now: float | None = None,
) -> Checkpoint:
    """Like :func:`create_checkpoint` with a chosen id; a checkpoint already holding that id is
    returned unchanged (so a retried creation, as a resumed clone makes, adds one pin only)."""
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise UsageError("checkpoint id must be a non-empty str")
    check_text("checkpoint id", checkpoint_id)
    check_flag("allow_missing_segments", allow_missing_segments)
    life = _check_lifetime(lifetime, optional=True)
    extra = _check_metadata(metadata)
    check_text("checkpoint name", name, optional=True)
    if source is not None and (not isinstance(source, str) or not source):
        raise UsageError(f"source must be a checkpoint id (str) or None, got {source!r}")
    if next_segment is not None:
        check_count("next_segment", next_segment, minimum=1)
    if now is not None:
        check_timestamp("now", now)
    url = manifest_store.url
    list_journal = source is None and next_segment is None and include_segments

    def change(versioned: VersionedManifest) -> Manifest | None:
        require_live(versioned, url)
        manifest = versioned.manifest
        if manifest.checkpoint(checkpoint_id) is not None:
            return None
        # The clock is read per attempt: a CAS that lost races for a while must not write a
        # checkpoint whose lifetime was spent before it landed.
        when = time.time() if now is None else now
        segment_floor = next_segment
        if list_journal:
            # Listed after reading the very manifest this update builds on, so every segment
            # its ledger may name (a flush persists SQNs of segments written before it) is
            # listed: a listing taken before reading it misses a flush that lands in between.
            # A segment GC removes meanwhile was already rolled into this manifest.
            # A segment missing below a later one or below next_segment is damage, unless a
            # newer manifest rolled it (then this CAS fails and the next attempt lists again).
            # A writer's segments in flight may leave gaps at the tail (a torn tail, judged by
            # the durable floors the segments record): the window ends at the first of them.
            journal = manifest.journal
            store = manifest_store.store
            scan = judge_tail(
                store,
                scan_segments(
                    store, journal.last_rolled_segment, next_segment=journal.next_segment
                ),
            )
            if scan.missing:
                latest = manifest_store.latest()
                if latest is None or latest.id == versioned.id:
                    settle_missing(url, scan, allow=allow_missing_segments)
            segment_floor = scan.end if scan.refs else None
        if source is not None:
            origin = _require_checkpoint(versioned, source, url)
            if not origin.is_live(when):
                raise UsageError(
                    f"checkpoint {source} expired at {origin.expire_time}; create the new "
                    "checkpoint from the latest state or from a live checkpoint"
                )
            pinned = origin.manifest_id
        else:
            pinned = versioned.id + 1
            if segment_floor is not None:
                journal = manifest.journal
                floor = max(journal.next_segment, segment_floor, journal.last_rolled_segment + 1)
                manifest = manifest.with_journal(replace(journal, next_segment=floor))
        checkpoint = Checkpoint(
            id=checkpoint_id,
            manifest_id=pinned,
            create_time=when,
            expire_time=_expiry(when, life),
            name=name,
            metadata=extra,
        )
        return manifest.with_checkpoint(checkpoint)

    result = _update_landed(
        manifest_store,
        change,
        lambda latest: latest.checkpoint(checkpoint_id) is not None,
        checkpoint_id,
        "added",
    )
    created = _require_checkpoint(result, checkpoint_id, url)
    log.debug(
        "checkpoint.created",
        url=url,
        checkpoint=checkpoint_id,
        manifest_id=created.manifest_id,
        expire_time=created.expire_time,
    )
    return created


def _update_landed(
    manifest_store: ManifestStore,
    change: Callable[[VersionedManifest], Manifest | None],
    landed: Callable[[Manifest], bool],
    checkpoint_id: str,
    what: str,
) -> VersionedManifest:
    """``manifest_store.update(change)``, confirmed in the latest manifest (module docstring;
    :meth:`~inkpen.manifest.store.ManifestStore.update_landed`)."""
    return manifest_store.update_landed(
        change,
        landed,
        event="checkpoint.landed_below_latest",
        subject=f"checkpoint {checkpoint_id} ({what})",
        checkpoint=checkpoint_id,
        what=what,
    )


def refresh_checkpoint(
    manifest_store: ManifestStore,
    checkpoint_id: str,
    *,
    lifetime: float | None,
    now: float | None = None,
) -> Checkpoint:
    """Set the checkpoint's expiry to ``now + lifetime`` (None: never expires) and return it.

    A missing checkpoint raises :class:`NotFoundError`; an expired one :class:`UsageError`.
    """
    life = _check_lifetime(lifetime, optional=True)
    if now is not None:
        check_timestamp("now", now)
    url = manifest_store.url

    def change(versioned: VersionedManifest) -> Manifest:
        # Read per attempt: after losing races past the expiry, the checkpoint must count as
        # expired (others may already have acted on it), not be revived.
        when = time.time() if now is None else now
        found = _require_checkpoint(versioned, checkpoint_id, url)
        if not found.is_live(when):
            raise UsageError(
                f"checkpoint {checkpoint_id} expired at {found.expire_time} and may no longer "
                "pin its files; create a new checkpoint instead"
            )
        return versioned.manifest.with_checkpoint(replace(found, expire_time=_expiry(when, life)))

    written: list[Checkpoint] = []

    def landed(latest: Manifest) -> bool:
        # The expiry written (or a later one) is in the latest; a checkpoint gone from it is
        # the next attempt's NotFoundError.
        found = latest.checkpoint(checkpoint_id)
        if found is None:
            return False
        mine = written[-1].expire_time
        return found.expire_time is None or (mine is not None and found.expire_time >= mine)

    def refresh(versioned: VersionedManifest) -> Manifest:
        manifest = change(versioned)
        found = manifest.checkpoint(checkpoint_id)
        assert found is not None
        written.append(found)
        return manifest

    result = _update_landed(manifest_store, refresh, landed, checkpoint_id, "refreshed")
    return _require_checkpoint(result, checkpoint_id, url)


def delete_checkpoint(manifest_store: ManifestStore, checkpoint_id: str) -> None:
    """Remove a checkpoint; :class:`NotFoundError` when the database holds no such checkpoint."""
    url = manifest_store.url

    def change(versioned: VersionedManifest) -> Manifest:
        _require_checkpoint(versioned, checkpoint_id, url)
        return versioned.manifest.without_checkpoint(checkpoint_id)

    _update_landed(
        manifest_store,
        change,
        lambda latest: latest.checkpoint(checkpoint_id) is None,
        checkpoint_id,
        "deleted",
    )
    log.debug("checkpoint.deleted", url=url, checkpoint=checkpoint_id)


def list_checkpoints(manifest_store: ManifestStore) -> tuple[Checkpoint, ...]:
    """Every checkpoint the latest manifest holds, expired ones included."""
    latest = manifest_store.latest()
    if latest is None:
        raise NotFoundError(f"no inkpen database at {manifest_store.url}")
    return latest.manifest.checkpoints


def drop_expired(manifest: Manifest, now: float) -> Manifest:
    """``manifest`` without the checkpoints that have expired at ``now``."""
    live = manifest.live_checkpoints(check_timestamp("now", now))
    if len(live) == len(manifest.checkpoints):
        return manifest
    return replace(manifest, checkpoints=live)


class CheckpointLease:
    """A reader's checkpoint, kept alive by refreshing it at half its remaining life until closed.

    ``checkpoint`` is the checkpoint as last written; ``manifest`` is the manifest it pins (what
    the reader reads). Failed refreshes are logged (``checkpoint.refresh_failed``) and retried
    sooner. The lease **lapses** — it is logged once (``checkpoint.lease_lost``, with the reason)
    and never refreshed again — when

    - the checkpoint vanished (deleted elsewhere, or dropped by GC once expired);
    - its expiry passed before a refresh succeeded;
    - a refresh returned after the expiry it extended: it may have landed late, and in between
      another process (GC, the writer) may have judged the checkpoint expired and deleted files.

    So while :meth:`lapse` says None, every file the pinned manifest names is still stored.
    """

    def __init__(
        self,
        manifest_store: ManifestStore,
        checkpoint: Checkpoint,
        manifest: Manifest,
        lifetime: float,
    ) -> None:
        self._manifest_store = manifest_store
        self._checkpoint = checkpoint
        self._manifest = manifest
        self._lifetime = lifetime
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._lapse: str | None = None
        self._vanished = False
        self._thread = threading.Thread(
            target=self._run, name=f"inkpen-lease-{checkpoint.id[:8]}", daemon=True
        )
        self._thread.start()

    @classmethod
    def establish(
        cls,
        manifest_store: ManifestStore,
        *,
        lifetime: float,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        allow_missing_segments: bool = False,
    ) -> CheckpointLease:
        """Create a reader checkpoint on the latest state and start refreshing it.

        A creation that returns only after the checkpoint's expiry (a store slower than the
        lifetime) deletes it again and raises :class:`StoreError`: it never pinned anything
        for sure. Missing journal segments raise :class:`CorruptionError` (nothing is written)
        unless ``allow_missing_segments`` (see :func:`create_checkpoint`).
        """
        life = _check_lifetime(lifetime, optional=False)
        assert life is not None
        tags = {**_check_metadata(metadata), CHECKPOINT_KIND: KIND_READER}
        checkpoint = create_checkpoint(
            manifest_store,
            lifetime=life,
            name=name,
            metadata=tags,
            allow_missing_segments=allow_missing_segments,
        )
        try:
            manifest = manifest_store.read(checkpoint.manifest_id)
            if checkpoint.expire_time is not None and time.time() >= checkpoint.expire_time:
                raise StoreError(
                    f"creating checkpoint {checkpoint.id} in {manifest_store.url} took longer "
                    f"than its lifetime of {life} s; use a longer checkpoint_lifetime",
                    definite=True,
                )
        except BaseException:
            with contextlib.suppress(NotFoundError):
                delete_checkpoint(manifest_store, checkpoint.id)
            raise
        return cls(manifest_store, checkpoint, manifest, life)

    @property
    def checkpoint(self) -> Checkpoint:
        with self._lock:
            return self._checkpoint

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def manifest_id(self) -> int:
        return self._checkpoint.manifest_id

    @property
    def lost(self) -> bool:
        """True once the lease lapsed (see the class docstring)."""
        return self.lapse() is not None

    def lapse(self, now: float | None = None) -> str | None:
        """Why the lease lapsed, or None while it holds (``now``: seconds since the epoch)."""
        with self._lock:
            if self._lapse is not None:
                return self._lapse
            expire = self._checkpoint.expire_time
        when = time.time() if now is None else now
        if expire is not None and when >= expire:
            self._lapsed(f"it expired at {expire:.3f} before a refresh succeeded")
            with self._lock:
                return self._lapse
        return None

    def vanished(self) -> None:
        """Record that the checkpoint was found missing from the latest manifest."""
        self._vanished = True
        self._lapsed("the checkpoint is gone from the manifest (deleted, or dropped by GC)")

    def _lapsed(self, reason: str) -> None:
        with self._lock:
            if self._lapse is not None:
                return
            self._lapse = reason
        self._stop.set()
        log.warning(
            "checkpoint.lease_lost",
            url=self._manifest_store.url,
            checkpoint=self._checkpoint.id,
            manifest_id=self._checkpoint.manifest_id,
            reason=reason,
        )

    def _half_life(self) -> float:
        expire = self.checkpoint.expire_time
        remaining = self._lifetime if expire is None else expire - time.time()
        return max(remaining / 2, 0.0)

    def _run(self) -> None:
        wait = self._half_life()
        while not self._stop.wait(wait):
            if self.lapse() is not None:
                return
            expire = self.checkpoint.expire_time
            try:
                refreshed = refresh_checkpoint(
                    self._manifest_store, self._checkpoint.id, lifetime=self._lifetime
                )
            except NotFoundError:
                self.vanished()
                return
            except UsageError as exc:
                self._lapsed(str(exc))
                return
            except InkpenError as exc:
                if self.lapse() is not None:
                    return
                remaining = (expire or time.time()) - time.time()
                wait = max(min(self._lifetime / 8, remaining / 4), 0.01)
                log.warning(
                    "checkpoint.refresh_failed",
                    url=self._manifest_store.url,
                    checkpoint=self._checkpoint.id,
                    error=str(exc),
                    retry_in=round(wait, 3),
                )
                continue
            if expire is not None and time.time() >= expire:
                # The refresh may have landed after the expiry: someone may have acted on it.
                self._lapsed(
                    f"a refresh returned only after its expiry at {expire:.3f}, so it may have "
                    "landed too late"
                )
                return
            with self._lock:
                self._checkpoint = refreshed
            wait = self._half_life()

    def close(self) -> None:
        """Stop refreshing and delete the checkpoint. Safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        if self._vanished:
            return
        with contextlib.suppress(NotFoundError):
            delete_checkpoint(self._manifest_store, self._checkpoint.id)

    def __enter__(self) -> CheckpointLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
