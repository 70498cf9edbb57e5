"""GC: the pure planner against generated manifest histories, and run_gc on real stores."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inkpen.actors.kernel.in_flight import InFlight
from inkpen.errors import UsageError
from inkpen.formats.journal import EMPTY_JOURNAL_SIZE, JournalEntry, Kind, build_journal
from inkpen.manifest.checkpoints import create_checkpoint
from inkpen.manifest.destroy import destroy
from inkpen.manifest.fencing import claim_writer, write_segment
from inkpen.manifest.gc import GcOptions, plan_gc, run_gc
from inkpen.manifest.model import (
    Checkpoint,
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
    VersionedManifest,
)
from inkpen.manifest.paths import (
    is_journal_file_key,
    is_sst_key,
    journal_file_key,
    manifest_key,
    new_file_id,
    parse_manifest_key,
    parse_segment_key,
    segment_key,
    sst_key,
)
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, ObjectInfo, ObjectStore
from support.logs import capture_logs
from support.refusing import RefusingDeletes

# -- generated histories -------------------------------------------------------------------------

OPERATIONS = (
    "add_sst",
    "drop_sst",
    "add_journal_file",
    "drop_journal_file",
    "segment",
    "fence",
    "roll",
    "checkpoint",
    "drop_checkpoint",
    "orphan",
    "foreign",
)


@dataclass(frozen=True)
class History:
    """Every manifest version of a generated database, and every object it left in its root."""

    versions: dict[int, Manifest]
    objects: dict[str, tuple[float, int]]
    """key -> (time written, size)"""
    now: float

    @property
    def latest(self) -> VersionedManifest:
        top = max(self.versions)
        return VersionedManifest(top, self.versions[top])

    def listing(self) -> list[ObjectInfo]:
        return [ObjectInfo(k, size, t) for k, (t, size) in self.objects.items()]


@st.composite
def histories(draw: st.DrawFn) -> History:
    clock = 1_700_000_000.0
    counter = itertools.count(1)
    objects: dict[str, tuple[float, int]] = {}
    ssts: list[SstDescriptor] = []
    files: list[JournalFileDescriptor] = []
    checkpoints: list[Checkpoint] = []
    rolled, next_segment, sqn = 0, 1, 1
    manifest = Manifest()
    versions = {1: manifest}
    objects[manifest_key(1)] = (clock, 90)

    for op in draw(st.lists(st.sampled_from(OPERATIONS), max_size=40)):
        clock += draw(st.floats(0, 300))
        if op == "add_sst":
            name = sst_key(f"{next(counter):025x}")
            objects[name] = (clock, 400)
            ssts.append(SstDescriptor(name, b"a", b"z", sqn, sqn, 400, 1, 0))
        elif op == "drop_sst" and ssts:
            ssts.pop(draw(st.integers(0, len(ssts) - 1)))
        elif op == "add_journal_file":
            name = journal_file_key(f"{next(counter):025x}")
            objects[name] = (clock, 300)
            files.append(JournalFileDescriptor(name, sqn, sqn, 300, 1))
            sqn += 1
        elif op == "drop_journal_file" and files:
            files.pop(draw(st.integers(0, len(files) - 1)))
        elif op in ("segment", "fence"):
            size = EMPTY_JOURNAL_SIZE if op == "fence" else 250
            objects[segment_key(next_segment)] = (clock, size)
            next_segment += 1
        elif op == "roll":
            rolled = draw(st.integers(rolled, next_segment - 1))
        elif op == "checkpoint":
            lifetime = draw(st.none() | st.floats(1, 3000))
            checkpoints.append(
                Checkpoint(
                    f"cp-{next(counter)}",
                    max(versions) + 1,
                    clock,
                    None if lifetime is None else clock + lifetime,
                )
            )
        elif op == "drop_checkpoint" and checkpoints:
            checkpoints.pop(draw(st.integers(0, len(checkpoints) - 1)))
        elif op == "orphan":
            key = draw(st.sampled_from([sst_key, journal_file_key]))(f"{next(counter):025x}")
            objects[key] = (clock, 100)
        elif op == "foreign":
            key = draw(st.sampled_from(["notes/readme", "ledger/odd.txt", "journal/x.tmp"]))
            objects[f"{key}{next(counter)}"] = (clock, 10)
        manifest = Manifest(
            writer_epoch=1,
            journal=JournalState(tuple(files), rolled, next_segment),
            ledger=LedgerState((tuple(ssts),), sqn),
            checkpoints=tuple(checkpoints),
        )
        new_id = max(versions) + 1
        versions[new_id] = manifest
        objects[manifest_key(new_id)] = (clock, 90)
    return History(versions, objects, clock + draw(st.floats(0, 4000)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    histories(),
    st.floats(0, 2000),
    st.none() | st.floats(0, 4000),
    st.none() | st.floats(0, 2000),
)
def test_plan_deletes_only_what_no_active_manifest_needs(
    history: History, min_age: float, fence_min_age: float | None, rolled_age: float | None
) -> None:
    latest = history.latest
    now = history.now
    live = latest.manifest.live_checkpoints(now)
    pinned = {cp.manifest_id: history.versions[cp.manifest_id] for cp in live}
    options = GcOptions(
        min_age=min_age, fence_min_age=fence_min_age, rolled_segment_min_age=rolled_age
    )
    plan = plan_gc(latest, pinned, history.listing(), now=now, options=options)

    active = [latest.manifest, *pinned.values()]
    referenced = {name for m in active for root, name in m.referenced_objects() if root is None}
    needed_segments = {s for m in pinned.values() for s in m.journal.unrolled_segments()}
    active_ids = {latest.id, *pinned}
    assert not plan.destroy
    assert len(set(plan.deletes)) == len(plan.deletes)
    assert set(plan.reasons) == set(plan.deletes)
    assert plan.expired_checkpoints == tuple(
        cp.id for cp in latest.manifest.checkpoints if not cp.is_live(now)
    )
    for key in plan.deletes:
        written, size = history.objects[key]
        age = now - written
        data_segment = parse_segment_key(key) is not None and size != EMPTY_JOURNAL_SIZE
        if data_segment and rolled_age is not None:
            assert age >= min(min_age, rolled_age), key  # a rolled segment may go younger
        else:
            assert age >= min_age, key
        if (manifest_id := parse_manifest_key(key)) is not None:
            assert manifest_id not in active_ids
        elif (segment_id := parse_segment_key(key)) is not None:
            assert segment_id <= latest.manifest.journal.last_rolled_segment
            assert segment_id not in needed_segments
            if size == EMPTY_JOURNAL_SIZE:
                assert fence_min_age is not None and age >= fence_min_age
        else:
            assert is_sst_key(key) or is_journal_file_key(key), key
            assert key not in referenced

    # And it is not merely timid: every old, unreferenced file and manifest goes.
    for key, (written, _) in history.objects.items():
        if now - written < min_age:
            continue
        manifest_id = parse_manifest_key(key)
        if ((is_sst_key(key) or is_journal_file_key(key)) and key not in referenced) or (
            manifest_id is not None and manifest_id not in active_ids
        ):
            assert key in plan.deletes, key


@settings(max_examples=100, deadline=None)
@given(histories(), st.floats(0, 100))
def test_plan_for_a_destroyed_database(history: History, grace: float) -> None:
    latest = history.latest
    destroyed = VersionedManifest(
        latest.id, replace(latest.manifest, destroyed_at=history.now - 2 * grace - 1)
    )
    live = destroyed.manifest.live_checkpoints(history.now)
    pinned = {cp.manifest_id: history.versions[cp.manifest_id] for cp in live}
    plan = plan_gc(
        destroyed,
        pinned,
        history.listing(),
        now=history.now,
        options=GcOptions(min_age=1e9, destroy_grace=grace),
    )
    if live:
        assert not plan.destroy
        return
    assert plan.destroy
    assert sorted(plan.deletes) == sorted(history.objects)
    assert plan.deletes[-1] == manifest_key(latest.id)


def test_plan_needs_every_pinned_manifest() -> None:
    manifest = Manifest(checkpoints=(Checkpoint("c", 2, 0.0),))
    with pytest.raises(UsageError, match="pins manifest 2, which is missing"):
        plan_gc(VersionedManifest(3, manifest), {}, [], now=1.0, options=GcOptions())


def test_writer_checkpoint_pins_every_manifest_from_its_target() -> None:
    """A live writer's snapshots may read files created after their manifest and dropped since;
    only the manifests in between name them, so a writer checkpoint pins the whole range."""

    def sst(name: str) -> SstDescriptor:
        return SstDescriptor(sst_key(name), b"a", b"z", 1, 1, 10, 1, 0)

    made, dropped = sst(new_file_id()), sst(new_file_id())
    writer = Checkpoint("w", 5, 0.0, metadata={"kind": "writer", "epoch": "1"})
    versions = {
        4: Manifest(ledger=LedgerState(((made,),))),
        5: Manifest(ledger=LedgerState(((made,),))),
        6: Manifest(ledger=LedgerState(((made, dropped),))),
        7: Manifest(ledger=LedgerState(((made,),)), checkpoints=(writer,)),
    }
    listing = [ObjectInfo(manifest_key(i), 100, 0.0) for i in versions] + [
        ObjectInfo(made.name, 10, 0.0),
        ObjectInfo(dropped.name, 10, 0.0),
    ]
    latest = VersionedManifest(7, versions[7])
    pinned = {i: versions[i] for i in (5, 6)}
    plan = plan_gc(latest, pinned, listing, now=1000.0, options=GcOptions(min_age=0))
    assert dropped.name not in plan.deletes
    assert set(plan.deletes) == {manifest_key(4)}
    # With the writer gone (no checkpoint), the dropped file and the old manifests may go.
    latest = VersionedManifest(7, Manifest(ledger=LedgerState(((made,),))))
    plan = plan_gc(latest, {}, listing, now=1000.0, options=GcOptions(min_age=0))
    assert set(plan.deletes) == {manifest_key(i) for i in (4, 5, 6)} | {dropped.name}


@pytest.mark.parametrize(
    "options",
    [
        {"min_age": -1},
        {"min_age": float("nan")},
        {"fence_min_age": "1d"},
        {"destroy_grace": True},
        {"rolled_segment_min_age": -0.5},
    ],
)
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="GcOptions"):
        GcOptions(**options)  # type: ignore[arg-type]


# -- run_gc on real stores -----------------------------------------------------------------------


def segment(sqn: int, epoch: int) -> bytes:
    entry = JournalEntry(sqn, Kind.OBJECT, b"k%d" % sqn, b"v", (), None, 0)
    return build_journal([entry], writer_epoch=epoch)


def keys(store: ObjectStore, prefix: str = "") -> set[str]:
    return {info.key for info in store.list(prefix)}


@dataclass
class Scene:
    """A database with history: superseded manifests, rolled data and fence segments, a live
    SST and journal file, an orphan SST, and objects that are not inkpen's."""

    ms: ManifestStore
    live_sst: str
    live_journal_file: str
    orphan: str
    epoch: int


def build_scene(store: ObjectStore) -> Scene:
    ms = ManifestStore(store)
    ms.create(Manifest())
    first = claim_writer(ms)  # fence at segment 1
    write_segment(store, 2, segment(1, first.epoch), writer_epoch=first.epoch)
    claim = claim_writer(ms)  # fence at segment 3
    write_segment(store, 4, segment(2, claim.epoch), writer_epoch=claim.epoch)
    write_segment(store, 5, segment(3, claim.epoch), writer_epoch=claim.epoch)
    live_sst = sst_key(new_file_id())
    store.put_if_absent(live_sst, b"live sst")
    live_jfile = journal_file_key(new_file_id())
    store.put_if_absent(live_jfile, b"live journal file")
    orphan = sst_key(new_file_id())
    store.put_if_absent(orphan, b"orphan from a crashed merge")
    store.put("notes/readme.txt", b"not inkpen's")
    store.put("ledger/readme.txt", b"not inkpen's either")

    def roll(versioned: VersionedManifest) -> Manifest:
        sst = SstDescriptor(live_sst, b"a", b"z", 1, 3, 8, 3, 0)
        jfile = JournalFileDescriptor(live_jfile, 1, 3, 17, 3)
        return versioned.manifest.with_ledger(LedgerState(((sst,),), 3)).with_journal(
            JournalState((jfile,), 5, 6)
        )

    ms.update(roll, writer_epoch=claim.epoch)
    return Scene(ms, live_sst, live_jfile, orphan, claim.epoch)


def test_run_gc_removes_what_nothing_needs(store: ObjectStore) -> None:
    scene = build_scene(store)
    latest = scene.ms.latest()
    assert latest is not None
    writer_pin = next(cp for cp in latest.manifest.checkpoints if cp.kind == "writer")
    before = keys(store)
    sizes = {info.key: info.size for info in store.list("")}
    with capture_logs() as logs:
        report = run_gc(store, options=GcOptions(min_age=300), now=time.time() + 3600)
    deleted = set(report.deleted)
    assert deleted == {
        segment_key(2),
        segment_key(4),
        segment_key(5),
        scene.orphan,
        *(manifest_key(i) for i in range(1, latest.id) if i != writer_pin.manifest_id),
    }
    assert keys(store) == before - deleted
    assert {segment_key(1), segment_key(3)} <= keys(store)  # fences stay
    assert {"notes/readme.txt", "ledger/readme.txt", scene.live_sst, scene.live_journal_file} <= (
        keys(store)
    )
    assert report.counts() == {
        "manifests": latest.id - 2,
        "segments": 3,
        "journal_files": 0,
        "ssts": 1,
        "other": 0,
    }
    assert report.bytes_deleted == sum(sizes[key] for key in deleted)
    events = [e["event"] for e in logs]
    assert events.count("gc.planned") == 1 and events.count("gc.deleted") == 1
    # The next pass finds nothing more to do.
    assert run_gc(store, options=GcOptions(min_age=300), now=time.time() + 3600).deleted == ()


def test_run_gc_keeps_young_objects(store: ObjectStore) -> None:
    build_scene(store)
    before = keys(store)
    report = run_gc(store, options=GcOptions(min_age=300))
    assert report.deleted == () and report.plan.deletes == ()
    assert keys(store) == before


def test_run_gc_fence_min_age(store: ObjectStore) -> None:
    build_scene(store)
    report = run_gc(
        store, options=GcOptions(min_age=300, fence_min_age=600), now=time.time() + 3600
    )
    assert {segment_key(1), segment_key(3)} <= set(report.deleted)


def test_dry_run_changes_nothing(store: ObjectStore) -> None:
    scene = build_scene(store)
    create_checkpoint(scene.ms, lifetime=10, now=time.time() - 100)  # already expired
    before = [(i.key, i.size) for i in store.list("")]
    report = run_gc(store, options=GcOptions(min_age=300), now=time.time() + 3600, dry_run=True)
    assert report.dry_run and report.deleted == () and report.dropped_checkpoints == ()
    assert len(report.plan.expired_checkpoints) == 1
    assert scene.orphan in report.plan.deletes
    assert report.counts()["ssts"] == 1
    assert [(i.key, i.size) for i in store.list("")] == before


def test_run_gc_drops_expired_checkpoints(store: ObjectStore) -> None:
    scene = build_scene(store)
    cp = create_checkpoint(scene.ms, lifetime=10, now=time.time() - 100)
    report = run_gc(store, options=GcOptions(min_age=300))
    assert report.dropped_checkpoints == (cp.id,)
    latest = scene.ms.latest()
    assert latest is not None and latest.manifest.checkpoint(cp.id) is None


def test_run_gc_on_an_empty_root(store: ObjectStore) -> None:
    report = run_gc(store)
    assert report.deleted == () and report.plan.deletes == ()
    assert keys(store) == set()


def test_checkpoint_keeps_its_segments_and_files(store: ObjectStore) -> None:
    scene = build_scene(store)
    write_segment(store, 6, segment(4, scene.epoch), writer_epoch=scene.epoch)
    cp = create_checkpoint(scene.ms, lifetime=None)
    pinned = scene.ms.read(cp.manifest_id)
    write_segment(store, 7, segment(5, scene.epoch), writer_epoch=scene.epoch)

    def reroll(versioned: VersionedManifest) -> Manifest:
        return versioned.manifest.with_ledger(LedgerState()).with_journal(JournalState((), 7, 8))

    scene.ms.update(reroll, writer_epoch=scene.epoch)
    report = run_gc(store, options=GcOptions(min_age=300), now=time.time() + 3600)
    assert list(pinned.journal.unrolled_segments()) == [6]
    assert segment_key(7) in report.deleted
    assert segment_key(6) not in report.deleted
    assert scene.live_sst not in report.deleted and scene.live_journal_file not in report.deleted
    assert manifest_key(cp.manifest_id) not in report.deleted


class _WriterLandsDuringListing:
    """A store whose next root listing first sees a writer store one more file (its put lands
    just as GC starts listing, after anything GC could have asked the writer beforehand)."""

    def __init__(self, inner: ObjectStore, land: Callable[[], None]) -> None:
        self._inner = inner
        self._land: Callable[[], None] | None = land

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if prefix == "" and self._land is not None:
            land, self._land = self._land, None
            land()
        return self._inner.list(prefix)


def test_a_writer_s_uncommitted_file_is_kept_when_it_lands_as_gc_lists(store: ObjectStore) -> None:
    build_scene(store)
    in_flight = InFlight()
    landing = sst_key(new_file_id())

    def land() -> None:  # a merge's clerk: recorded in flight first, then stored
        in_flight.add(landing)
        store.put_if_absent(landing, b"a merge's output, committed a moment later")

    racing = _WriterLandsDuringListing(store, land)
    report = run_gc(racing, options=GcOptions(min_age=0.0, offline=True), keep=in_flight.names)
    assert landing not in report.plan.deletes
    assert store.get(landing) == b"a merge's output, committed a moment later"
    in_flight.discard([landing])  # the commit failed: now it is an orphan like any other
    again = run_gc(store, options=GcOptions(min_age=0.0, offline=True), keep=in_flight.names)
    assert landing in again.deleted


# -- batched deletes -------------------------------------------------------------------------------


def test_run_gc_deletes_rolled_segments_in_requests_of_a_thousand(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    ms.create(Manifest())
    ids = range(1, 2_101)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda i: store.put(segment_key(i), segment(i, 1)), ids))
    ms.update(lambda v: v.manifest.with_journal(JournalState((), ids[-1], ids[-1] + 1)))
    counting = CountingStore(store)
    report = run_gc(counting, options=GcOptions(min_age=300), now=time.time() + 3600)
    assert report.counts()["segments"] == len(ids) and report.failed == {}
    assert keys(store, "journal/") == set()
    # 2,100 segments in three requests, then the superseded manifest in one.
    assert counting.snapshot()["deletes"] == 3 + 1


def test_run_gc_names_what_it_could_not_delete_and_the_next_pass_retries(
    store: ObjectStore,
) -> None:
    scene = build_scene(store)
    refusing = RefusingDeletes(store, refuse_prefix="ledger/")  # the orphan SST fails to go
    later = time.time() + 3600
    with capture_logs() as logs:
        report = run_gc(refusing, options=GcOptions(min_age=300), now=later)
    failed = set(report.failed)
    assert failed == {scene.orphan}
    assert set(report.deleted) == set(report.plan.deletes) - failed  # the others went
    assert failed <= keys(store) and not set(report.deleted) & keys(store)
    assert all("refuses to delete" in error for error in report.failed.values())
    warned = [e for e in logs if e["event"] == "gc.delete_failed"]
    assert warned and sum(e["count"] for e in warned) == len(failed)
    again = run_gc(store, options=GcOptions(min_age=300), now=later)
    assert set(again.deleted) == failed and again.failed == {}


def test_a_destroyed_database_keeps_its_manifest_until_every_other_object_is_gone(
    store: ObjectStore,
) -> None:
    build_scene(store)
    destroy(store, soft=True)
    refusing = RefusingDeletes(store, refuse_prefix="ledger/")
    later = time.time() + 7200
    report = run_gc(refusing, options=GcOptions(destroy_grace=0), now=later)
    assert report.destroyed and report.failed
    assert {key.split("/")[0] for key in report.failed} == {"ledger"}
    latest = ManifestStore(store).latest()
    assert latest is not None and latest.manifest.destroyed_at is not None
    assert set(report.failed) | {manifest_key(latest.id)} == keys(store)
    finished = run_gc(store, options=GcOptions(destroy_grace=0), now=later)
    assert finished.destroyed and finished.failed == {} and keys(store) == set()
