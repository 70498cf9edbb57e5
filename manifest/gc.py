"""Garbage collection: a pure planner that decides what may be deleted, and its executor.

The **active manifests** are the latest one and every manifest a live checkpoint of the latest one
pins: a checkpoint pins its own manifest, except a *writer* checkpoint, which pins its manifest
and every later one. A live writer's open snapshots may read files that were created after the
manifest they started from and dropped again since; only the manifests in between name those
files, so the writer points its checkpoint at the oldest manifest a snapshot of it still reads
and GC keeps the whole range. An object is kept while an active manifest may need it:

================================  ===============================================================
object                            deleted when
================================  ===============================================================
``manifest/<id>.manifest``        not active, below the latest id, and older than ``min_age``
``journal/<id>.jnl`` (data)       at or below the latest ``last_rolled_segment``, outside every
                                  active checkpoint manifest's ``(last_rolled, next_segment)``,
                                  and older than ``rolled_segment_min_age`` (the writer's GC:
                                  0), else ``min_age``
``journal/<id>.jnl`` (fence)      as a data segment at ``min_age``, and only when
                                  ``fence_min_age`` is set and the fence is older than it
                                  (kept by default: see fencing)
``journal/compacted/<id>.jnl``    referenced (root None) by no active manifest, and older than
                                  ``min_age``
``ledger/<id>.sst``               referenced (root None) by no active manifest, and older than
                                  ``min_age``
anything else                     never (not inkpen's, or written by a newer version)
a destroyed database              everything, once ``destroy_grace`` has passed since
                                  ``destroyed_at`` and no live checkpoint remains; a clone's pin
                                  in its parent is released first, the latest manifest goes last
================================  ===============================================================

Nothing younger than ``min_age`` is ever deleted outside a destroyed database. An uncommitted
file looks exactly like an orphan, so what protects another process's files in flight is one of:

- **the writer's epoch** (``run_gc(writer_epoch=E)``, the writer's own GC): the latest manifest
  read must hold epoch ``E``, else :class:`~inkpen.errors.FencedError` before anything is
  deleted. The executor lists the root *before* reading the latest manifest, so every file it may
  delete was stored before that read; while the manifest still says ``E`` no newer writer had
  claimed the database, and a newer writer stores files only after its claim. So the only files
  in flight in the listing are this writer's own (``keep``) and those of fenced writers, which
  can never commit them: any ``min_age`` is safe. The epoch is read again before each batch of
  :data:`DELETE_BATCH` deletes after the first (which follows the read of the latest manifest);
  a newer one stops the pass with ``FencedError``.
- **``min_age``** for a GC not run by the writer (``inkpen gc``, a script): it cannot know a live
  writer's files in flight, so ``min_age`` must exceed the longest time a writer takes from
  storing a file to committing it (a slow merge, a bulk load). Below
  :data:`MIN_AGE_WITHOUT_WRITER` it is refused with :class:`~inkpen.errors.UsageError` unless
  ``GcOptions(offline=True)`` says that no writer has the database open. Such a pass stops
  (logging ``gc.stopped``) before a batch of deletes if the writer epoch changed since it read
  the manifest.

A manifest a live checkpoint pins that turns out missing stops the pass: as a
:class:`NotFoundError` when the checkpoint lapsed and was collected meanwhile (another process's
GC judged later), as a :class:`CorruptionError` only when the latest manifest still holds it.

Collecting a superseded version can open a gap under an update in flight in another process
(it read ``n`` as the latest; ``n + 1`` and ``n + 2`` are written and ``n + 1`` collected before
its create of ``n + 1``, which then lands below the latest). A ``min_age`` longer than an update
rules that out; the writer's GC may run at any age, so the writer's checkpoint range covers its
own updates and checkpoint changes confirm that they show in the latest
(:mod:`inkpen.manifest.checkpoints`).

Fence segments (size :data:`~inkpen.formats.journal.EMPTY_JOURNAL_SIZE`) are kept by default: the
slot after each writer's last segment holds a newer writer's fence, and deleting it would let a
stalled writer write into that slot and acknowledge writes nobody replays.

**How the executor issues its requests.** The pinned manifests are read at once (up to the
store's :func:`~inkpen.objectstore.parallel.concurrency`); the deletes go in batches
(:meth:`~inkpen.objectstore.ObjectStore.delete_many`: ``DeleteObjects`` requests of 1,000 keys on
S3, several at once), one kind of object after another in the plan's order, with the epoch
read again before each batch after the first. A key the store could not delete does not stop
the pass: the report names it with its error (``GcReport.failed``, logged as
``gc.delete_failed``), and the next pass, which plans it again, retries it. A destroyed
database keeps its latest manifest until every other object is gone. A caller that holds the
database's :class:`ManifestStore` (a copy that just wrote the manifest) passes it in, and the
pass finds the latest from its cached version.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol

from inkpen.errors import CorruptionError, FencedError, InkpenError, NotFoundError, UsageError
from inkpen.formats.journal import EMPTY_JOURNAL_SIZE
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectInfo, ObjectStore
from inkpen.objectstore.base import DELETE_MANY_KEYS, DeleteResult
from inkpen.objectstore.parallel import concurrency, run_bounded

from .checkpoints import drop_expired
from .clones import StoreResolver, release_parent_pin
from .destroy import remove_empty_directories
from .model import KIND_WRITER, Manifest, VersionedManifest
from .paths import (
    is_journal_file_key,
    is_sst_key,
    manifest_key,
    parse_manifest_key,
    parse_segment_key,
)
from .store import ManifestStore, as_store

log = get_logger("inkpen.manifest")

REASON_MANIFEST = "manifest is superseded and pinned by no live checkpoint"
REASON_SEGMENT = "segment is rolled and outside every live checkpoint's segment range"
REASON_FENCE = "fence segment is rolled, unpinned and older than fence_min_age"
REASON_JOURNAL_FILE = "journal file is referenced by no active manifest"
REASON_SST = "SST is referenced by no active manifest"
REASON_DESTROYED = "database was destroyed, its grace period is over and no checkpoint is live"

MIN_AGE_WITHOUT_WRITER = 60.0
"""The least ``min_age`` of a GC not run by the writer (unless ``offline``): far above the time an
inkpen writer takes from storing an L0 file, a roll or a merge output to committing it. A bulk
load's tasks store files long before its commit and need a larger ``min_age``
(docs/spark.md, 'Bulk loading')."""
DELETE_BATCH = 8 * DELETE_MANY_KEYS
"""Deletes between two reads of the writer epoch: one ``delete_many`` of up to eight requests
(eight ``DeleteObjects`` of 1,000 keys on S3, sent at once)."""


@dataclass(frozen=True, slots=True)
class GcOptions:
    """How cautious GC is: ages in seconds."""

    min_age: float = 300.0
    """Nothing younger is deleted (except from a destroyed database and rolled segments)."""
    rolled_segment_min_age: float | None = None
    """Rolled data segments (not fences) no live checkpoint pins go at this age (None:
    ``min_age``). A segment at or below the latest ``last_rolled_segment`` is never a file in
    flight (its writes are in a journal file the manifest names), so only checkpoints can want
    it: the writer's own GC uses 0, and a database's store bytes do not wait ``min_age``."""
    fence_min_age: float | None = None
    """None keeps fence segments forever; else fences older than this may go once unpinned."""
    destroy_grace: float = 3600.0
    """Seconds after a soft destroy before GC removes the database."""
    offline: bool = False
    """The caller vouches that no writer has the database open: a GC not run by the writer may
    then use a ``min_age`` below :data:`MIN_AGE_WITHOUT_WRITER`."""

    def __post_init__(self) -> None:
        for name in ("min_age", "destroy_grace", "fence_min_age", "rolled_segment_min_age"):
            value = getattr(self, name)
            if value is None and name in ("fence_min_age", "rolled_segment_min_age"):
                continue
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value < 0
            ):
                raise UsageError(f"GcOptions.{name} must be seconds >= 0, got {value!r}")
        if not isinstance(self.offline, bool):
            raise UsageError(f"GcOptions.offline must be a bool, got {self.offline!r}")


@dataclass(frozen=True, slots=True)
class GcPlan:
    """What one GC pass deletes, in a safe order, and why."""

    deletes: tuple[str, ...]
    reasons: Mapping[str, str] = field(hash=False)
    expired_checkpoints: tuple[str, ...]
    """Checkpoints of the latest manifest that have expired (to be dropped from it)."""
    destroy: bool
    """True when the plan removes the whole (destroyed) database."""


def pinned_ids(
    latest: VersionedManifest, stored_ids: Iterable[int], now: float
) -> tuple[frozenset[int], frozenset[int]]:
    """Manifest ids the live checkpoints pin, as (required, ranged).

    ``required`` ids are pinned by name and must exist; ``ranged`` ids are stored manifests a
    writer checkpoint's range covers (one may vanish between listing and reading: it is then
    simply not needed by anyone, because the latest covers everything after it).
    """
    stored = sorted(set(stored_ids))
    required: set[int] = set()
    ranged: set[int] = set()
    for cp in latest.manifest.live_checkpoints(now):
        if cp.kind == KIND_WRITER:
            ranged.update(i for i in stored if cp.manifest_id <= i < latest.id)
        elif cp.manifest_id != latest.id:
            required.add(cp.manifest_id)
    return frozenset(required), frozenset(ranged - required)


def _active_manifests(
    latest: VersionedManifest,
    checkpoint_manifests: Mapping[int, Manifest],
    required: frozenset[int],
) -> list[Manifest]:
    active = [latest.manifest]
    for manifest_id in sorted(required):
        pinned = checkpoint_manifests.get(manifest_id)
        if pinned is None:
            raise UsageError(
                f"a live checkpoint pins manifest {manifest_id}, which is missing from "
                "checkpoint_manifests; GC cannot plan without it"
            )
        active.append(pinned)
    active.extend(m for i, m in sorted(checkpoint_manifests.items()) if i not in required)
    return active


def plan_gc(
    latest: VersionedManifest,
    checkpoint_manifests: Mapping[int, Manifest],
    listing: Iterable[ObjectInfo],
    *,
    now: float,
    options: GcOptions,
) -> GcPlan:
    """Decide which of the ``listing``'s objects may be deleted (rules in the module docstring).

    ``checkpoint_manifests`` maps each manifest id a live checkpoint pins to that manifest (the
    latest's own id may be left out). The plan deletes journal segments, then journal files,
    then SSTs, then manifests; for a destroyed database everything, the latest manifest last.
    """
    manifest = latest.manifest
    live = manifest.live_checkpoints(now)
    expired = tuple(cp.id for cp in manifest.checkpoints if not cp.is_live(now))
    objects = sorted(listing, key=lambda info: info.key)

    if (
        manifest.destroyed_at is not None
        and now >= manifest.destroyed_at + options.destroy_grace
        and not live
    ):
        last = manifest_key(latest.id)
        ordered = sorted(
            (info.key for info in objects),
            key=lambda key: (key == last, parse_manifest_key(key) is not None, key),
        )
        destroyed = MappingProxyType(dict.fromkeys(ordered, REASON_DESTROYED))
        return GcPlan(tuple(ordered), destroyed, expired, True)

    stored_ids = [i for i in (parse_manifest_key(info.key) for info in objects) if i is not None]
    required, ranged = pinned_ids(latest, stored_ids, now)
    active = _active_manifests(latest, checkpoint_manifests, required)
    needs = _Needs(
        now=now,
        options=options,
        latest_id=latest.id,
        active_ids=frozenset({latest.id, *required, *ranged}),
        referenced=frozenset(
            name for m in active for root, name in m.referenced_objects() if root is None
        ),
        pinned_segments=frozenset(
            segment for m in active[1:] for segment in m.journal.unrolled_segments()
        ),
        rolled=manifest.journal.last_rolled_segment,
    )
    chosen: dict[str, list[str]] = {collector.kind: [] for collector in COLLECTORS}
    reasons: dict[str, str] = {}
    for info in objects:
        collector = collector_of(info.key)
        reason = None if collector is None else collector.judge(info, needs)
        if collector is not None and reason is not None:
            chosen[collector.kind].append(info.key)
            reasons[info.key] = reason
    deletes = tuple(key for collector in COLLECTORS for key in chosen[collector.kind])
    return GcPlan(deletes, MappingProxyType(reasons), expired, False)


@dataclass(frozen=True, slots=True)
class _Needs:
    """What the active manifests need, which every collector judges an object by."""

    now: float
    options: GcOptions
    latest_id: int
    active_ids: frozenset[int]
    """The latest manifest's id and every id a live checkpoint pins."""
    referenced: frozenset[str]
    """Files of this root an active manifest references."""
    pinned_segments: frozenset[int]
    """Segments a live checkpoint's manifest has not rolled yet."""
    rolled: int
    """The latest manifest's ``last_rolled_segment``."""


class Collector(Protocol):
    """The collector of one kind of object: which keys are its kind, and whether one may go."""

    @property
    def kind(self) -> str:
        """The kind's name in :meth:`GcReport.counts`."""
        ...

    def claims(self, key: str) -> bool:
        """Whether ``key`` is an object of this kind."""
        ...

    def judge(self, info: ObjectInfo, needs: _Needs) -> str | None:
        """Why the object ``info`` may be deleted (its reason in the plan), or None to keep it."""
        ...


@dataclass(frozen=True, slots=True)
class _SegmentCollector:
    """Journal segments: a rolled data segment outside every live checkpoint's range, at
    ``rolled_segment_min_age``; a fence only when ``fence_min_age`` lets it go."""

    kind: str = "segments"

    def claims(self, key: str) -> bool:
        return parse_segment_key(key) is not None

    def judge(self, info: ObjectInfo, needs: _Needs) -> str | None:
        options = needs.options
        age = info.age(needs.now)
        fence = info.size == EMPTY_JOURNAL_SIZE
        min_age = options.min_age
        if not fence and options.rolled_segment_min_age is not None:
            min_age = min(min_age, options.rolled_segment_min_age)
        segment_id = parse_segment_key(info.key)
        if age < min_age or segment_id is None or segment_id > needs.rolled:
            return None
        if segment_id in needs.pinned_segments:
            return None
        if not fence:
            return REASON_SEGMENT
        if options.fence_min_age is None or age < options.fence_min_age:
            return None
        return REASON_FENCE


@dataclass(frozen=True, slots=True)
class _FileCollector:
    """Files the manifest references (journal files written by compaction, SSTs): one goes when
    no active manifest references it."""

    kind: str
    claims: Callable[[str], bool]
    reason: str

    def judge(self, info: ObjectInfo, needs: _Needs) -> str | None:
        if info.age(needs.now) < needs.options.min_age or info.key in needs.referenced:
            return None
        return self.reason


@dataclass(frozen=True, slots=True)
class _ManifestCollector:
    """Manifests: superseded and pinned by no live checkpoint."""

    kind: str = "manifests"

    def claims(self, key: str) -> bool:
        return parse_manifest_key(key) is not None

    def judge(self, info: ObjectInfo, needs: _Needs) -> str | None:
        manifest_id = parse_manifest_key(info.key)
        if info.age(needs.now) < needs.options.min_age or manifest_id is None:
            return None
        if manifest_id >= needs.latest_id or manifest_id in needs.active_ids:
            return None
        return REASON_MANIFEST


COLLECTORS: tuple[Collector, ...] = (
    _SegmentCollector(),
    _FileCollector("journal_files", is_journal_file_key, REASON_JOURNAL_FILE),
    _FileCollector("ssts", is_sst_key, REASON_SST),
    _ManifestCollector(),
)
"""One collector per kind of object, in the order a plan deletes them: segments, journal files,
SSTs, manifests (a manifest goes after the files it names)."""


def collector_of(key: str) -> Collector | None:
    """The collector of ``key``'s kind, or None for an object that is not inkpen's."""
    return next((c for c in COLLECTORS if c.claims(key)), None)


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one GC pass did (or, in a dry run, would do)."""

    url: str
    plan: GcPlan
    deleted: tuple[str, ...]
    bytes_deleted: int
    dropped_checkpoints: tuple[str, ...]
    """Expired checkpoints removed from the manifest by this pass."""
    dry_run: bool
    detached: bool = False
    """True when this pass detached a clone from its parent (see :func:`detach_clone`)."""
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Planned objects the store could not delete, each with its error (the next pass retries
    them); ``deleted`` never names them."""

    @property
    def destroyed(self) -> bool:
        return self.plan.destroy

    def counts(self) -> dict[str, int]:
        """Deleted (or planned, in a dry run) objects by kind."""
        names = self.plan.deletes if self.dry_run else self.deleted
        counts = {"manifests": 0, "segments": 0, "journal_files": 0, "ssts": 0, "other": 0}
        for key in names:
            counts[_kind(key)] += 1
        return counts


def _kind(key: str) -> str:
    collector = collector_of(key)
    return "other" if collector is None else collector.kind


def _read_pinned(
    manifest_store: ManifestStore,
    latest: VersionedManifest,
    now: float,
    listing: Iterable[ObjectInfo],
) -> dict[int, Manifest]:
    stored = (parse_manifest_key(info.key) for info in listing)
    required, ranged = pinned_ids(latest, (i for i in stored if i is not None), now)
    wanted = sorted(required | ranged)

    def read(manifest_id: int) -> Manifest | None:
        try:
            return manifest_store.read(manifest_id)
        except NotFoundError as exc:
            if manifest_id in required:
                raise _missing_pinned(manifest_store, manifest_id, now) from exc
            return None

    found = run_bounded(read, wanted, limit=concurrency(manifest_store.store))
    return {i: m for i, m in zip(wanted, found, strict=True) if m is not None}


def _missing_pinned(manifest_store: ManifestStore, manifest_id: int, now: float) -> Exception:
    """A manifest a live checkpoint pinned is missing: a lapsed pin, or a broken store?

    Another process's GC, judging later, may have dropped the checkpoint and deleted the manifest
    since this pass read the latest: that is a missing object, not corruption. Only when the
    latest manifest still holds a live checkpoint pinning it does the store contradict its
    manifest for good.
    """
    key = manifest_key(manifest_id)
    fresh = manifest_store.latest()
    still = fresh is not None and any(
        cp.manifest_id == manifest_id and cp.kind != KIND_WRITER
        for cp in fresh.manifest.live_checkpoints(now)
    )
    if still:
        detail = "manifest pinned by a live checkpoint is missing; GC stops here"
        return CorruptionError(key, detail)
    return NotFoundError(
        f"manifest {manifest_id} in {manifest_store.url}, pinned by a checkpoint when this GC pass "
        "read the latest manifest, is gone: the checkpoint lapsed and was collected meanwhile. "
        "GC stops here; run GC again",
        key=key,
    )


def run_gc(
    store: ObjectStore | str,
    *,
    options: GcOptions | None = None,
    now: float | None = None,
    dry_run: bool = False,
    keep: Collection[str] | Callable[[], Collection[str]] = frozenset(),
    writer_epoch: int | None = None,
    manifests: ManifestStore | None = None,
) -> GcReport:
    """Run one GC pass over the database at ``store``: drop expired checkpoints from the
    manifest, plan, and delete (nothing is written or deleted when ``dry_run``).

    ``keep`` names objects a live writer is writing and has not committed yet; they are never
    deleted, whatever their age (the writer's own GC passes them, so it may run with any
    ``min_age``). A writer passes a callable: it is asked after the listing and before the
    latest manifest is read, the only moment its answer is sound. A file in the listing was
    written before it; if the latest manifest does not name it, its commit comes after that
    read, so the writer still holds it in flight in between. A set taken earlier misses files
    written after it; one taken later misses files committed (and forgotten) after the read.

    ``writer_epoch``: the epoch of the writer running this pass (its own GC); the latest manifest
    must hold it, at the read and before each later batch of deletes, else ``FencedError``.
    Without it the pass is not the writer's and ``min_age`` must be at least
    :data:`MIN_AGE_WITHOUT_WRITER` unless ``options.offline`` (module docstring).

    ``manifests``: the caller's :class:`ManifestStore` of ``store``, whose cached latest version
    the pass finds the latest from (one listing rather than a listing and reads)."""
    opts = _checked_options(options, writer_epoch)
    target = as_store(store) if manifests is None else manifests.store
    if manifests is not None and store is not target:
        raise UsageError("run_gc was given the ManifestStore of another store than the one to GC")
    when = time.time() if now is None else now
    manifest_store = ManifestStore(target) if manifests is None else manifests
    listing = list(target.list(""))
    kept = frozenset(keep() if callable(keep) else keep)
    latest = manifest_store.latest()
    nothing = GcPlan((), MappingProxyType({}), (), False)
    if latest is None:
        return GcReport(target.url, nothing, (), 0, (), dry_run)
    _check_writer(latest, writer_epoch, target.url)
    epoch = latest.manifest.writer_epoch
    dropped: tuple[str, ...] = ()
    if not dry_run:
        latest, dropped = _drop_expired(manifest_store, latest, when, writer_epoch)
        if latest.manifest.writer_epoch != epoch:
            _stopped(target.url, epoch, latest.manifest.writer_epoch, writer_epoch, 0)
            return GcReport(target.url, nothing, (), 0, (), False)
    pinned = _read_pinned(manifest_store, latest, when, listing)
    plan = _without(plan_gc(latest, pinned, listing, now=when, options=opts), kept)
    log.debug(
        "gc.planned",
        url=target.url,
        deletes=len(plan.deletes),
        destroy=plan.destroy,
        expired_checkpoints=len(plan.expired_checkpoints),
        dry_run=dry_run,
    )
    if dry_run:
        return GcReport(target.url, plan, (), 0, dropped, True)
    deleter = _Deleter(target, {info.key: info.size for info in listing})
    if plan.destroy:
        deleter.destroy(plan, latest)
    else:
        for number, batch in enumerate(_batches(plan.deletes)):
            # The first batch follows the read of the latest manifest; each later one reads it.
            now_epoch = epoch if number == 0 else _current_epoch(manifest_store)
            if now_epoch != epoch:
                _stopped(target.url, epoch, now_epoch, writer_epoch, len(deleter.deleted))
                break
            deleter.delete(batch)
    detached = not plan.destroy and detach_clone(manifest_store, latest, pinned)
    report = GcReport(
        target.url,
        plan,
        tuple(deleter.deleted),
        deleter.freed(),
        dropped,
        False,
        detached,
        MappingProxyType(deleter.failed),
    )
    (log.info if report.deleted else log.debug)(
        "gc.deleted",
        url=target.url,
        count=len(report.deleted),
        bytes=report.bytes_deleted,
        **report.counts(),
    )
    return report


def _checked_options(options: GcOptions | None, writer_epoch: int | None) -> GcOptions:
    """``options`` (the defaults for None), refused when a GC not run by the writer would use a
    ``min_age`` too short to protect a live writer's files in flight."""
    opts = GcOptions() if options is None else options
    if not isinstance(opts, GcOptions):
        raise UsageError("options must be a GcOptions")
    if writer_epoch is None and not opts.offline and opts.min_age < MIN_AGE_WITHOUT_WRITER:
        raise UsageError(
            f"min_age={opts.min_age:g} s cannot protect the files a live writer has stored but "
            f"not committed yet: a GC not run by the writer needs min_age >= "
            f"{MIN_AGE_WITHOUT_WRITER:g} s (inkpen gc: --min-age 1m or more), or, only when no "
            "writer has the database open, offline=True (inkpen gc --offline)"
        )
    return opts


def _drop_expired(
    manifest_store: ManifestStore, latest: VersionedManifest, now: float, writer_epoch: int | None
) -> tuple[VersionedManifest, tuple[str, ...]]:
    """Drop the latest manifest's expired checkpoints (when it has any): the latest manifest
    after, and the ids dropped."""
    if all(cp.is_live(now) for cp in latest.manifest.checkpoints):
        return latest, ()

    def drop(versioned: VersionedManifest) -> Manifest | None:
        trimmed = drop_expired(versioned.manifest, now)
        return None if trimmed is versioned.manifest else trimmed

    before = {cp.id for cp in latest.manifest.checkpoints}
    latest = manifest_store.update(drop, writer_epoch=writer_epoch)
    return latest, tuple(sorted(before - {cp.id for cp in latest.manifest.checkpoints}))


def _without(plan: GcPlan, kept: frozenset[str]) -> GcPlan:
    """``plan`` without the objects a live writer keeps (a destroyed database keeps none)."""
    if not kept or plan.destroy:
        return plan
    return replace(
        plan,
        deletes=tuple(k for k in plan.deletes if k not in kept),
        reasons=MappingProxyType({k: v for k, v in plan.reasons.items() if k not in kept}),
    )


class _Deleter:
    """Deletes a pass's objects in batches, noting what went, what failed, and the bytes freed."""

    def __init__(self, store: ObjectStore, sizes: dict[str, int]) -> None:
        self.store = store
        self.sizes = sizes
        self.deleted: list[str] = []
        self.failed: dict[str, str] = {}

    def delete(self, keys: list[str]) -> None:
        result = self.store.delete_many(keys)
        self.deleted.extend(result.deleted(keys))
        _note_failures(self.store.url, result, self.failed)

    def destroy(self, plan: GcPlan, latest: VersionedManifest) -> None:
        """Remove a destroyed database: its pin in a parent first, then every object (also
        those written after the listing), the latest manifest last, once all else is gone."""
        store = self.store
        resolver = StoreResolver(store)
        try:
            release_parent_pin(latest.manifest, resolver)
        finally:
            resolver.close()
        last = manifest_key(latest.id)
        self.delete([key for key in plan.deletes if key != last])
        later = [i for i in store.list("") if i.key != last and i.key not in self.failed]
        for info in later:  # objects written after the listing
            self.sizes.setdefault(info.key, info.size)
        self.delete([info.key for info in later])
        if not self.failed:  # the destroyed manifest stays until everything else is gone
            self.delete([last])
        if not self.failed:
            remove_empty_directories(store)

    def freed(self) -> int:
        """The bytes of the objects deleted."""
        return sum(self.sizes.get(key, 0) for key in self.deleted)


def _batches(keys: tuple[str, ...]) -> list[list[str]]:
    """The plan's deletes in batches of at most :data:`DELETE_BATCH` keys, each of one kind of
    object, in the plan's order (segments, journal files, SSTs, manifests)."""
    found: list[list[str]] = []
    for key in keys:
        if not found or len(found[-1]) >= DELETE_BATCH or _kind(found[-1][0]) != _kind(key):
            found.append([])
        found[-1].append(key)
    return found


def _note_failures(url: str, result: DeleteResult, failed: dict[str, str]) -> None:
    """Record the keys ``result`` could not delete (and log them: ``gc.delete_failed``)."""
    if result.ok:
        return
    failed.update((key, str(error)) for key, error in result.failed.items())
    log.warning(
        "gc.delete_failed",
        url=url,
        count=len(result.failed),
        keys=sorted(result.failed)[:5],
        error=str(next(iter(result.failed.values()))),
    )


def collect_as_writer(manifests: ManifestStore, writer_epoch: int) -> tuple[str, ...]:
    """GC (any age) of a root whose manifest the caller just wrote with ``writer_epoch`` through
    ``manifests`` (a backup or copy destination: that manifest fenced any writer there); answers
    what it deleted. A writer that opens the root meanwhile owns it: the pass then deletes
    nothing more."""
    store = manifests.store
    try:
        return run_gc(
            store,
            options=GcOptions(min_age=0.0),
            writer_epoch=writer_epoch,
            manifests=manifests,
        ).deleted
    except FencedError as exc:
        log.info("gc.left_to_writer", url=store.url, error=str(exc))
        return ()


def _check_writer(latest: VersionedManifest, writer_epoch: int | None, url: str) -> None:
    """The writer's GC plans only from a manifest that still holds its epoch."""
    if writer_epoch is None:
        return
    stored = latest.manifest.writer_epoch
    if stored > writer_epoch:
        raise FencedError(
            f"manifest {latest.id} of {url} holds writer epoch {stored}, newer than this "
            f"writer's epoch {writer_epoch}: a newer writer owns the database and this GC "
            "deletes nothing"
        )
    if stored < writer_epoch:
        raise InkpenError(
            f"manifest {latest.id} of {url} holds writer epoch {stored}, below this writer's "
            f"{writer_epoch}; epochs never go down (a bug)"
        )


def _current_epoch(manifest_store: ManifestStore) -> int | None:
    latest = manifest_store.latest()
    return None if latest is None else latest.manifest.writer_epoch


def _stopped(
    url: str, planned: int, now: int | None, writer_epoch: int | None, deleted: int
) -> None:
    """A writer claimed the database since the pass read the manifest: delete nothing more."""
    log.warning("gc.stopped", url=url, planned_epoch=planned, epoch=now, deleted=deleted)
    if writer_epoch is not None:
        raise FencedError(
            f"writer epoch {now} has opened {url} while this writer's GC (epoch {writer_epoch}) "
            f"ran; it stopped after {deleted} deletes"
        )


def _refers_upwards(manifest: Manifest) -> bool:
    return any(root is not None for root, _ in manifest.referenced_objects())


def detach_clone(
    manifest_store: ManifestStore, latest: VersionedManifest, pinned: Mapping[int, Manifest]
) -> bool:
    """Cut a clone loose from its parent once nothing it may read lives there any more.

    When neither the latest manifest nor any live checkpoint's manifest references a file under
    another root, the clone's pin in its parent is removed first, then ``parent`` is dropped
    from the clone's manifest. A crash between the two leaves a parent reference whose pin is
    gone, which the next pass finishes. Returns True when the clone was detached.
    """
    manifest = latest.manifest
    if manifest.parent is None or not manifest.initialized or manifest.destroyed_at is not None:
        return False
    if _refers_upwards(manifest) or any(_refers_upwards(m) for m in pinned.values()):
        return False
    resolver = StoreResolver(manifest_store.store)
    try:
        release_parent_pin(manifest, resolver)
    finally:
        resolver.close()

    def drop_parent(versioned: VersionedManifest) -> Manifest | None:
        current = versioned.manifest
        if current.parent is None or _refers_upwards(current):
            return None
        return replace(current, parent=None)

    result = manifest_store.update(drop_parent)
    log.info("clone.detached", url=manifest_store.url, parent=manifest.parent.root)
    return result.manifest.parent is None
