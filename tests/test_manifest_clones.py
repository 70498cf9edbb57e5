"""Clones: a clone sees its parent's checkpoint and nothing later, shares the parent's files
(which parent GC keeps), resumes when interrupted, and resolves files across roots."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import pytest

from inkpen.errors import FencedError, NotFoundError, StoreError, UsageError
from inkpen.formats.journal import JournalEntry, Kind, build_journal
from inkpen.manifest.checkpoints import create_checkpoint
from inkpen.manifest.clones import StoreResolver, create_clone
from inkpen.manifest.destroy import destroy
from inkpen.manifest.fencing import claim_writer, segment_epoch, write_segment
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import (
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
    VersionedManifest,
)
from inkpen.manifest.paths import journal_file_key, new_file_id, segment_key, sst_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.faults import FaultPlan, FaultyStore
from support.stores import listing


def segment(sqn: int, epoch: int) -> bytes:
    entry = JournalEntry(sqn, Kind.OBJECT, b"k%d" % sqn, b"v", (), None, 0)
    return build_journal([entry], writer_epoch=epoch)


def write_sst(store: ObjectStore, first: bytes, last: bytes) -> SstDescriptor:
    name = sst_key(new_file_id())
    store.put_if_absent(name, b"sst " + first + last)
    return SstDescriptor(name, first, last, 1, 2, 4 + len(first + last), 2, 0)


def set_level(level: tuple[SstDescriptor, ...]) -> Callable[[VersionedManifest], Manifest]:
    def change(versioned: VersionedManifest) -> Manifest:
        return versioned.manifest.with_ledger(LedgerState((level,), 0))

    return change


@pytest.fixture
def clone_url(store_kind: str, make_store_url: Callable[[str], str]) -> str:
    return make_store_url(store_kind)


@pytest.fixture
def clone_store(clone_url: str) -> ObjectStore:
    return open_store(clone_url)


@pytest.fixture
def parent(store: ObjectStore) -> ManifestStore:
    """A parent database with a writer, two acknowledged segments, an SST and a journal file."""
    ms = ManifestStore(store)
    ms.create(Manifest())
    claim = claim_writer(ms)
    write_segment(store, 2, segment(1, claim.epoch), writer_epoch=claim.epoch)
    write_segment(store, 3, segment(2, claim.epoch), writer_epoch=claim.epoch)
    sst = write_sst(store, b"a", b"m")
    jname = journal_file_key(new_file_id())
    store.put_if_absent(jname, b"journal file")
    jfile = JournalFileDescriptor(jname, 1, 1, 12, 1)

    def commit(versioned: VersionedManifest) -> Manifest:
        journal = JournalState((jfile,), 0, 1)
        return versioned.manifest.with_ledger(LedgerState(((sst,),), 0)).with_journal(journal)

    ms.update(commit, writer_epoch=claim.epoch)
    return ms


def clone_pins(parent: ManifestStore) -> list[str]:
    latest = parent.latest()
    assert latest is not None
    return [cp.id for cp in latest.manifest.checkpoints if cp.kind == "clone"]


def test_clone_copies_state_and_unrolled_segments(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    made = create_clone(store, clone_store)
    clone = made.manifest
    parent_latest = parent.latest()
    assert parent_latest is not None
    assert clone.initialized and clone.checkpoints == ()
    assert clone.parent is not None and clone.parent.root == store.url
    assert clone.writer_epoch == parent_latest.manifest.writer_epoch + 1
    assert all(s.root == store.url for s in clone.ledger.ssts())
    assert all(f.root == store.url for f in clone.journal.files)
    assert clone.journal.next_segment == 4  # segments 1 (fence), 2 and 3 were acknowledged

    for segment_id in (1, 2, 3):
        key = segment_key(segment_id)
        assert clone_store.get(key) == store.get(key)
        assert segment_epoch(clone_store, segment_id) == segment_epoch(store, segment_id)
    assert [i.key for i in clone_store.list("ledger/")] == []

    pins = clone_pins(parent)
    assert pins == [clone.parent.checkpoint_id]
    pin = parent_latest.manifest.checkpoint(pins[0])
    assert pin is not None and pin.expire_time is None
    assert pin.metadata == {"kind": "clone", "clone": clone_store.url}

    # The clone's writer replays the copied segments and fences its own journal after them.
    claim = claim_writer(ManifestStore(clone_store))
    assert claim.epoch == clone.writer_epoch + 1
    assert [r.id for r in claim.segments] == [1, 2, 3]
    assert claim.fence_segment == 4
    assert segment_epoch(store, 4) is None  # nothing reached the parent


def test_clone_sees_the_checkpoint_not_later_parent_writes(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    cp = create_checkpoint(parent, lifetime=3600)
    latest = parent.latest()
    assert latest is not None
    epoch = latest.manifest.writer_epoch
    write_segment(store, 4, segment(3, epoch), writer_epoch=epoch)
    write_segment(store, 5, segment(4, epoch), writer_epoch=epoch)
    later = write_sst(store, b"n", b"z")

    def add_later(versioned: VersionedManifest) -> Manifest:
        ledger = versioned.manifest.ledger
        return versioned.manifest.with_ledger(LedgerState((*ledger.levels, (later,)), 0))

    parent.update(add_later, writer_epoch=epoch)

    made = create_clone(store.url, clone_store.url, checkpoint_id=cp.id)
    names = {s.name for s in made.manifest.ledger.ssts()}
    assert later.name not in names and len(names) == 1
    assert made.manifest.journal.next_segment == 4
    assert [i.key for i in clone_store.list("journal/")] == [segment_key(n) for n in (1, 2, 3)]

    # The clone writes on its own from here; the parent's later segments stay the parent's.
    claim = claim_writer(ManifestStore(clone_store))
    own = segment(9, claim.epoch)
    write_segment(clone_store, claim.next_segment, own, writer_epoch=claim.epoch)
    assert store.get(segment_key(5)) == segment(4, epoch)
    assert segment_epoch(clone_store, 5) == claim.epoch


def test_parent_gc_keeps_files_the_clone_references(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    made = create_clone(store, clone_store)
    shared = [s.name for s in made.manifest.ledger.ssts()]
    latest = parent.latest()
    assert latest is not None
    epoch = latest.manifest.writer_epoch
    parent.update(set_level((write_sst(store, b"a", b"z"),)), writer_epoch=epoch)

    report = run_gc(store, options=GcOptions(min_age=0, offline=True))
    assert not set(shared) & set(report.deleted)
    resolver = StoreResolver(clone_store)
    try:
        for sst in made.manifest.ledger.ssts():
            assert resolver.store_for(sst.root).get(sst.name).startswith(b"sst ")
    finally:
        resolver.close()

    # Once the clone is gone (its pin released) and the parent's writer has closed (a live
    # writer's checkpoint pins every manifest from the oldest one its snapshots read), the
    # parent may collect them.
    destroy(clone_store, soft=False)
    assert clone_pins(parent) == []
    parent.update(lambda v: v.manifest.without_checkpoints_of_kind("writer"))
    report = run_gc(store, options=GcOptions(min_age=0, offline=True))
    assert set(shared) <= set(report.deleted)


def test_clone_interrupted_while_copying_resumes(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    faulty = FaultyStore(clone_store, FaultPlan(seed=1, before={"copy": 1.0}))
    with pytest.raises(StoreError, match="injected failure before copy"):
        create_clone(store, faulty)
    unfinished = ManifestStore(clone_store).latest()
    assert unfinished is not None and not unfinished.manifest.initialized
    assert len(clone_pins(parent)) == 1
    with pytest.raises(UsageError, match="call create_clone again"):
        ManifestStore(clone_store).open_database(create_if_missing=True)
    with pytest.raises(UsageError, match="did not finish"):
        claim_writer(ManifestStore(clone_store))

    done = create_clone(store, clone_store)
    assert done.manifest.initialized
    assert clone_pins(parent) == [unfinished.manifest.parent.checkpoint_id]  # type: ignore[union-attr]
    assert create_clone(store, clone_store) == done  # finished: nothing more happens


def test_clone_interrupted_before_pinning_resumes(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    faulty_parent = FaultyStore(store, FaultPlan(seed=2, before={"put_if_absent": 1.0}))
    with pytest.raises(StoreError, match="injected failure before put_if_absent"):
        create_clone(faulty_parent, clone_store)
    assert clone_pins(parent) == []
    first = ManifestStore(clone_store).latest()
    assert first is not None and not first.manifest.initialized

    done = create_clone(store, clone_store)
    assert done.manifest.initialized
    assert clone_pins(parent) == [first.manifest.parent.checkpoint_id]  # type: ignore[union-attr]


def test_clone_with_a_lost_response_lands_once(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    """Every write's response is lost (it happened; the caller hears it may not have)."""
    plan = FaultPlan(seed=3, after={"put_if_absent": 1.0, "copy": 1.0})
    faulty = FaultyStore(clone_store, plan)
    done = None
    for _ in range(10):
        try:
            done = create_clone(store, faulty)
            break
        except StoreError as exc:
            assert not exc.definite
    assert done is not None and done.manifest.initialized
    assert len(clone_pins(parent)) == 1
    assert faulty.counts()[("put_if_absent", "after")] >= 2
    assert faulty.counts()[("copy", "after")] >= 1
    assert ManifestStore(clone_store).ids() == [1, 2]


def test_clone_of_a_clone_keeps_roots_further_up(
    parent: ManifestStore,
    store: ObjectStore,
    clone_store: ObjectStore,
    store_kind: str,
    make_store_url: Callable[[str], str],
) -> None:
    create_clone(store, clone_store)
    child = ManifestStore(clone_store)
    claim = claim_writer(child)
    own = write_sst(clone_store, b"x", b"y")

    def add_own(versioned: VersionedManifest) -> Manifest:
        ledger = versioned.manifest.ledger
        return versioned.manifest.with_ledger(LedgerState((*ledger.levels, (own,)), 0))

    child.update(add_own, writer_epoch=claim.epoch)
    grandchild_store = open_store(make_store_url(store_kind))
    made = create_clone(clone_store, grandchild_store)
    roots = {s.name: s.root for s in made.manifest.ledger.ssts()}
    assert roots[own.name] == clone_store.url
    assert {r for n, r in roots.items() if n != own.name} == {store.url}


def test_destroyed_parent_releases_the_pin(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    faulty = FaultyStore(clone_store, FaultPlan(seed=4, before={"copy": 1.0}))
    with pytest.raises(StoreError):
        create_clone(store, faulty)
    assert len(clone_pins(parent)) == 1
    # A soft destroy while the clone pin is live (it never expires): the parent stays marked.
    destroy(store, soft=True)
    with pytest.raises(NotFoundError, match="was destroyed") as caught:
        create_clone(store, clone_store)
    assert "can never be finished" in str(caught.value)
    assert clone_pins(parent) == []


@pytest.mark.parametrize("case", ["self", "foreign", "not-a-clone", "unknown", "expired"])
def test_bad_clone_requests_change_nothing(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore, case: str
) -> None:
    source = None
    if case == "foreign":
        clone_store.put("notes/readme.txt", b"hello")
    elif case == "not-a-clone":
        ManifestStore(clone_store).create(Manifest())
    elif case == "unknown":
        source = "no-such-checkpoint"
    elif case == "expired":
        source = create_checkpoint(parent, lifetime=10, now=1000.0).id
    parent_before, clone_before = listing(store), listing(clone_store)
    target = store if case == "self" else clone_store
    errors = (UsageError, NotFoundError)
    expected = r"onto itself|no inkpen manifest|not a clone|does not exist|expired"
    with pytest.raises(errors, match=expected):
        create_clone(store, target, checkpoint_id=source)
    assert listing(store) == parent_before
    assert listing(clone_store) == clone_before


def test_missing_parent(store: ObjectStore, clone_store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="no inkpen database"):
        create_clone(store, clone_store)
    assert listing(clone_store) == []


def test_clone_fences_nothing_in_the_parent(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    latest = parent.latest()
    assert latest is not None
    epoch = latest.manifest.writer_epoch
    create_clone(store, clone_store)
    claim_writer(ManifestStore(clone_store))
    # The parent's writer carries on: its segments and manifest updates still land.
    write_segment(store, 4, segment(3, epoch), writer_epoch=epoch)
    parent.update(lambda v: replace(v.manifest, compactor_epoch=1), writer_epoch=epoch)
    with pytest.raises(FencedError):
        parent.update(lambda v: v.manifest, writer_epoch=epoch - 1)


def test_store_resolver(store: ObjectStore, clone_store: ObjectStore) -> None:
    resolver = StoreResolver(clone_store)
    try:
        assert resolver.store_for(None) is clone_store
        assert resolver.store_for(clone_store.url) is clone_store
        seen: list[ObjectStore] = []
        lock = threading.Lock()

        def resolve() -> None:
            found = resolver.store_for(store.url)
            with lock:
                seen.append(found)

        threads = [threading.Thread(target=resolve) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(s) for s in seen}) == 1
        assert seen[0].url == store.url
        store.put("ledger/x", b"parent bytes")
        assert seen[0].get("ledger/x") == b"parent bytes"
    finally:
        resolver.close()


def test_gc_detaches_a_clone_once_it_reads_nothing_upstream(
    parent: ManifestStore, store: ObjectStore, clone_store: ObjectStore
) -> None:
    create_clone(store, clone_store)
    clone = ManifestStore(clone_store)
    claim = claim_writer(clone)
    first = run_gc(clone_store, options=GcOptions(min_age=0, offline=True))
    assert not first.detached and len(clone_pins(parent)) == 1

    # The clone's merges rewrite everything it read from the parent into its own files; the
    # writer moves its checkpoint to the manifest that commits them.
    own = write_sst(clone_store, b"a", b"z")

    def rewrite(versioned: VersionedManifest) -> Manifest:
        manifest = versioned.manifest
        writer = next(cp for cp in manifest.checkpoints if cp.kind == "writer")
        return (
            manifest.with_ledger(LedgerState(((own,),), 0))
            .with_journal(replace(manifest.journal, files=()))
            .with_checkpoint(replace(writer, manifest_id=versioned.id + 1))
        )

    clone.update(rewrite, writer_epoch=claim.epoch)
    second = run_gc(clone_store, options=GcOptions(min_age=0, offline=True))
    assert second.detached
    assert clone_pins(parent) == []
    latest = clone.latest()
    assert latest is not None and latest.manifest.parent is None
    assert not run_gc(clone_store, options=GcOptions(min_age=0, offline=True)).detached
