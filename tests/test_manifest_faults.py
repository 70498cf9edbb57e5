"""The manifest protocols under injected store failures: lost responses are resolved by reading
back, definite failures pass through unchanged, and no failure breaks an invariant."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inkpen.errors import StoreError
from inkpen.formats.journal import JournalEntry, Kind, build_journal
from inkpen.manifest.fencing import claim_writer, segment_epoch, write_segment
from inkpen.manifest.model import Manifest, VersionedManifest
from inkpen.manifest.paths import segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.faults import FaultPlan, FaultyStore


def bump(versioned: VersionedManifest) -> Manifest:
    return replace(versioned.manifest, compactor_epoch=versioned.manifest.compactor_epoch + 1)


def segment(sqn: int, epoch: int) -> bytes:
    entry = JournalEntry(sqn, Kind.OBJECT, b"k%d" % sqn, b"v", (), None, 0)
    return build_journal([entry], writer_epoch=epoch)


def counter(store: ObjectStore) -> tuple[int, list[int]]:
    ms = ManifestStore(store)
    latest = ms.latest()
    assert latest is not None
    return latest.manifest.compactor_epoch, ms.ids()


def test_lost_responses_are_resolved(store: ObjectStore) -> None:
    ManifestStore(store).create(Manifest())
    faulty = FaultyStore(store, FaultPlan(seed=11, after={"put_if_absent": 1.0}))
    ms = ManifestStore(faulty)
    for _ in range(10):
        ms.update(bump)
    assert faulty.counts()[("put_if_absent", "after")] == 10
    assert counter(store) == (10, list(range(1, 12)))


def test_definite_failures_pass_through_and_change_nothing(store: ObjectStore) -> None:
    ManifestStore(store).create(Manifest())
    faulty = FaultyStore(store, FaultPlan(seed=12, before={"put_if_absent": 1.0}))
    with pytest.raises(StoreError, match="injected failure before") as caught:
        ManifestStore(faulty).update(bump)
    assert caught.value.definite
    assert counter(store) == (0, [1])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_faults_never_break_contiguity(store: ObjectStore, seed: int) -> None:
    ManifestStore(store).create(Manifest())
    plan = FaultPlan(
        seed=seed,
        before={"put_if_absent": 0.15, "get": 0.05, "list": 0.05},
        after={"put_if_absent": 0.25, "get": 0.05},
    )
    faulty = FaultyStore(store, plan)
    ms = ManifestStore(faulty)
    landed = uncertain = 0
    for _ in range(60):
        try:
            ms.update(bump)
            landed += 1
        except StoreError as exc:
            uncertain += 0 if exc.definite else 1
    value, ids = counter(store)
    assert ids == list(range(1, value + 2))
    assert landed <= value <= landed + uncertain
    assert sum(faulty.counts().values()) > 0


def test_segment_writes_resolve_lost_responses(store: ObjectStore) -> None:
    ManifestStore(store).create(Manifest())
    faulty = FaultyStore(store, FaultPlan(seed=13, after={"put_if_absent": 1.0}))
    claim = claim_writer(ManifestStore(faulty))
    assert claim.fence_segment == 1
    for n in range(2, 6):
        write_segment(faulty, n, segment(n, claim.epoch), writer_epoch=claim.epoch)
    assert [segment_epoch(store, n) for n in range(1, 6)] == [claim.epoch] * 5
    assert store.get(segment_key(5)) == segment(5, claim.epoch)
    second = claim_writer(ManifestStore(faulty))
    assert second.fence_segment == 6
    assert [r.id for r in second.segments] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_claims_under_random_faults(store: ObjectStore, seed: int) -> None:
    ManifestStore(store).create(Manifest())
    plan = FaultPlan.everywhere(seed, before=0.05, after=0.1)
    faulty = FaultyStore(store, plan)
    claimed: list[int] = []
    for _ in range(8):
        try:
            claimed.append(claim_writer(ManifestStore(faulty)).epoch)
        except StoreError:
            continue
    assert claimed == sorted(set(claimed))
    ms = ManifestStore(store)
    latest = ms.latest()
    assert latest is not None
    assert ms.ids() == list(range(1, ms.ids()[-1] + 1))
    # Whatever failed on the way, a clean claim afterwards fences after every segment there is.
    final = claim_writer(ms)
    assert final.epoch == latest.manifest.writer_epoch + 1
    assert all(r.writer_epoch is not None and r.writer_epoch < final.epoch for r in final.segments)
    assert segment_epoch(store, final.fence_segment) == final.epoch
