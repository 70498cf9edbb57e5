"""Checkpoints and leases: creation (from the latest state or a source), expiry, refresh,
deletion, and a reader's lease holding files back from GC across a compaction."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from inkpen.errors import NotFoundError, UsageError
from inkpen.formats.journal import JournalEntry, Kind, build_journal
from inkpen.manifest.checkpoints import (
    CheckpointLease,
    create_checkpoint,
    delete_checkpoint,
    drop_expired,
    list_checkpoints,
    refresh_checkpoint,
)
from inkpen.manifest.fencing import claim_writer, write_segment
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import LedgerState, Manifest, SstDescriptor, VersionedManifest
from inkpen.manifest.paths import new_file_id, sst_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.faults import FaultPlan, FaultyStore
from support.logs import capture_logs
from support.stores import listing
from support.waiting import wait_until

DEADLINE = 30.0


def segment(sqn: int, epoch: int) -> bytes:
    entry = JournalEntry(sqn, Kind.OBJECT, b"k%d" % sqn, b"v", (), None, 0)
    return build_journal([entry], writer_epoch=epoch)


def write_sst(store: ObjectStore, first: bytes, last: bytes) -> SstDescriptor:
    name = sst_key(new_file_id())
    store.put_if_absent(name, b"sst bytes " + first)
    return SstDescriptor(name, first, last, 1, 2, len(b"sst bytes " + first), 2, 0)


def set_level(level: tuple[SstDescriptor, ...]) -> Callable[[VersionedManifest], Manifest]:
    def change(versioned: VersionedManifest) -> Manifest:
        return versioned.manifest.with_ledger(LedgerState((level,), 0))

    return change


@pytest.fixture
def database(store: ObjectStore) -> ManifestStore:
    ms = ManifestStore(store)
    ms.create(Manifest())
    return ms


def test_checkpoint_pins_the_manifest_it_writes(database: ManifestStore) -> None:
    cp = create_checkpoint(database, lifetime=60, name="nightly", now=1000.0)
    latest = database.latest()
    assert latest is not None
    assert cp.manifest_id == latest.id == 2
    assert cp.expire_time == 1060.0 and cp.create_time == 1000.0 and cp.name == "nightly"
    assert latest.manifest.checkpoint(cp.id) == cp
    assert list_checkpoints(database) == (cp,)


def test_checkpoint_covers_acknowledged_segments(database: ManifestStore) -> None:
    claim = claim_writer(database)
    for n, segment_id in enumerate((2, 3, 4)):
        write_segment(database.store, segment_id, segment(n + 1, claim.epoch), writer_epoch=1)
    cp = create_checkpoint(database, lifetime=None)
    pinned = database.read(cp.manifest_id)
    assert pinned.journal.next_segment == 5
    assert list(pinned.journal.unrolled_segments()) == [1, 2, 3, 4]

    explicit = create_checkpoint(database, lifetime=None, next_segment=7)
    assert database.read(explicit.manifest_id).journal.next_segment == 7
    # next_segment never moves back.
    lower = create_checkpoint(database, lifetime=None, next_segment=2)
    assert database.read(lower.manifest_id).journal.next_segment == 7


def test_checkpoint_without_segments_leaves_the_journal_alone(database: ManifestStore) -> None:
    claim_writer(database)
    write_segment(database.store, 2, segment(1, 1), writer_epoch=1)
    cp = create_checkpoint(database, lifetime=None, include_segments=False)
    assert database.read(cp.manifest_id).journal.next_segment == 1


def test_expiry_and_drop_expired(database: ManifestStore) -> None:
    short = create_checkpoint(database, lifetime=10, now=1000.0)
    forever = create_checkpoint(database, lifetime=None, now=1000.0)
    assert short.is_live(1009.9) and not short.is_live(1010.0)
    latest = database.latest()
    assert latest is not None
    trimmed = drop_expired(latest.manifest, 1011.0)
    assert trimmed.checkpoints == (forever,)
    assert drop_expired(trimmed, 1e12) is trimmed


def test_refresh(database: ManifestStore, store: ObjectStore) -> None:
    cp = create_checkpoint(database, lifetime=10, now=1000.0)
    refreshed = refresh_checkpoint(database, cp.id, lifetime=30, now=1005.0)
    assert refreshed.expire_time == 1035.0
    assert refreshed.manifest_id == cp.manifest_id
    assert refresh_checkpoint(database, cp.id, lifetime=None, now=1006.0).expire_time is None
    expiring = create_checkpoint(database, lifetime=10, now=1000.0)
    before = listing(store)
    with pytest.raises(UsageError, match=r"expired at 1010\.0"):
        refresh_checkpoint(database, expiring.id, lifetime=10, now=1010.0)
    with pytest.raises(NotFoundError, match="checkpoint nope does not exist"):
        refresh_checkpoint(database, "nope", lifetime=10)
    assert listing(store) == before


def test_delete(database: ManifestStore, store: ObjectStore) -> None:
    cp = create_checkpoint(database, lifetime=None)
    delete_checkpoint(database, cp.id)
    assert list_checkpoints(database) == ()
    before = listing(store)
    with pytest.raises(NotFoundError, match=f"checkpoint {cp.id} does not exist"):
        delete_checkpoint(database, cp.id)
    assert listing(store) == before


def test_from_source(database: ManifestStore, store: ObjectStore) -> None:
    source = create_checkpoint(database, lifetime=100, now=1000.0)
    database.update(lambda v: replace(v.manifest, compactor_epoch=5))
    copy = create_checkpoint(
        database, lifetime=None, source=source.id, metadata={"purpose": "backup"}, now=1050.0
    )
    assert copy.manifest_id == source.manifest_id
    assert copy.id != source.id and copy.metadata == {"purpose": "backup"}
    before = listing(store)
    with pytest.raises(UsageError, match=f"checkpoint {source.id} expired at 1100.0"):
        create_checkpoint(database, lifetime=None, source=source.id, now=1100.0)
    with pytest.raises(NotFoundError, match="checkpoint missing does not exist"):
        create_checkpoint(database, lifetime=None, source="missing")
    assert listing(store) == before


@pytest.mark.parametrize(
    "manifest",
    [Manifest(destroyed_at=1.0), Manifest(initialized=False)],
    ids=["destroyed", "unfinished-clone"],
)
def test_refuses_unusable_databases(store: ObjectStore, manifest: Manifest) -> None:
    ms = ManifestStore(store)
    ms.create(manifest)
    before = listing(store)
    with pytest.raises((NotFoundError, UsageError), match=r"destroyed|did not finish"):
        create_checkpoint(ms, lifetime=10)
    assert listing(store) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lifetime": 0}, "positive number of seconds"),
        ({"lifetime": -5}, "positive number of seconds"),
        ({"lifetime": float("inf")}, "positive number of seconds"),
        ({"lifetime": "1h"}, "positive number of seconds"),
        ({"lifetime": 1, "metadata": {"a": 1}}, "mapping of str to str"),
        ({"lifetime": 1, "name": 5}, "name must be a str"),
        ({"lifetime": 1, "next_segment": 0}, "next_segment must be an int"),
        ({"lifetime": 1, "source": ""}, "source must be a checkpoint id"),
    ],
)
def test_bad_arguments_change_nothing(
    database: ManifestStore, store: ObjectStore, kwargs: dict[str, object], message: str
) -> None:
    before = listing(store)
    with pytest.raises(UsageError, match=message):
        create_checkpoint(database, **kwargs)  # type: ignore[arg-type]
    assert listing(store) == before


# -- leases --------------------------------------------------------------------------------------


def test_lease_refreshes_until_closed(database: ManifestStore) -> None:
    lease = CheckpointLease.establish(database, lifetime=0.5, name="reader")
    first = lease.checkpoint
    assert first.kind == "reader" and first.name == "reader"
    assert lease.manifest == database.read(first.manifest_id)
    assert first.expire_time is not None

    def refreshed() -> bool:
        latest = database.latest()
        assert latest is not None
        stored = latest.manifest.checkpoint(first.id)
        return stored is not None and (stored.expire_time or 0) > (first.expire_time or 0)

    # The refresh thread commits to the manifest first and sets the lease's own field a moment
    # later: wait on each state asserted, not on a neighbour of it.
    wait_until(refreshed, "the lease to refresh its checkpoint in the manifest", DEADLINE)
    wait_until(
        lambda: (lease.checkpoint.expire_time or 0) > (first.expire_time or 0),
        "the lease to record its refreshed checkpoint",
        DEADLINE,
    )
    lease.close()
    lease.close()
    assert list_checkpoints(database) == ()


def test_lease_logs_failed_refreshes_and_recovers(store: ObjectStore) -> None:
    faulty = FaultyStore(store, FaultPlan(seed=7, before={"put_if_absent": 1.0}))
    ms = ManifestStore(faulty)
    with faulty.paused():
        ms.create(Manifest())
        lease = CheckpointLease.establish(ms, lifetime=2.0)
    start = lease.checkpoint.expire_time
    with capture_logs() as logs:
        wait_until(
            lambda: any(e["event"] == "checkpoint.refresh_failed" for e in list(logs)),
            "a failed refresh to be logged",
            DEADLINE,
        )
        faulty.enabled = False
        wait_until(
            lambda: (lease.checkpoint.expire_time or 0) > (start or 0),
            "the lease to refresh again once the store recovers",
            DEADLINE,
        )
    failure = next(e for e in logs if e["event"] == "checkpoint.refresh_failed")
    assert failure["log_level"] == "warning"
    assert failure["checkpoint"] == lease.checkpoint.id
    assert "injected failure" in failure["error"]
    lease.close()
    assert list_checkpoints(ms) == ()


def test_lease_outlives_a_compaction_until_closed(
    database: ManifestStore, store: ObjectStore
) -> None:
    old = (write_sst(store, b"a", b"f"), write_sst(store, b"g", b"p"))
    database.update(set_level(old))
    lease = CheckpointLease.establish(database, lifetime=600)
    assert {s.name for s in lease.manifest.ledger.ssts()} == {s.name for s in old}

    merged = write_sst(store, b"a", b"p")
    database.update(set_level((merged,)))  # the compaction drops both old files
    report = run_gc(store, options=GcOptions(min_age=0, offline=True))
    assert not {s.name for s in old} & set(report.deleted)
    for sst in old:
        assert store.get(sst.name).startswith(b"sst bytes")

    lease.close()
    report = run_gc(store, options=GcOptions(min_age=0, offline=True))
    assert {s.name for s in old} <= set(report.deleted)
    keys = {info.key for info in store.list("ledger/")}
    assert keys == {merged.name}


def test_expired_checkpoint_stops_protecting_its_files(
    database: ManifestStore, store: ObjectStore
) -> None:
    now = time.time()
    old = (write_sst(store, b"a", b"z"),)
    database.update(set_level(old))
    create_checkpoint(database, lifetime=100, now=now)
    database.update(set_level((write_sst(store, b"a", b"z"),)))
    kept = run_gc(store, options=GcOptions(min_age=0, offline=True), now=now + 50)
    assert old[0].name not in kept.deleted
    gone = run_gc(store, options=GcOptions(min_age=0, offline=True), now=now + 101)
    assert old[0].name in gone.deleted
    assert len(gone.dropped_checkpoints) == 1
    assert list_checkpoints(database) == ()
