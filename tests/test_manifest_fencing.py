"""Writer epochs and fencing: the four outcomes of a fence write, the reader rule, and two or
three writers racing for one database in threads and in separate processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from inkpen.errors import (
    CorruptionError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from inkpen.formats.journal import EMPTY_JOURNAL_SIZE, JournalEntry, Kind, build_journal
from inkpen.manifest.checkpoints import create_checkpoint
from inkpen.manifest.fencing import (
    EPOCH_METADATA,
    FLOOR_METADATA,
    OlderSlot,
    SegmentRef,
    SegmentStamp,
    accepted_segments,
    claim_writer,
    list_segments,
    scan_segments,
    segment_epoch,
    segment_stamp,
    torn_tail,
    with_epochs,
    write_segment,
)
from inkpen.manifest.model import KIND_WRITER, Manifest, VersionedManifest
from inkpen.manifest.paths import segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import ObjectInfo, ObjectStore, open_store
from inkpen.objectstore.base import DEFAULT_PAGE_SIZE, ListPage
from inkpen.objectstore.faults import FaultPlan, FaultyStore
from support.logs import capture_logs
from support.stores import listing
from support.waiting import wait_until

DEADLINE = 120.0
SEGMENTS_PER_UPDATE = 3
"""A racing writer notes its progress in the manifest after every third segment, so both ways
of learning of a fence (a segment write and a manifest update) are exercised."""


def segment_bytes(sqn: int, epoch: int) -> bytes:
    entry = JournalEntry(sqn, Kind.OBJECT, b"key-%d" % sqn, b"value", (), None, 1_700_000_000_000)
    return build_journal([entry], writer_epoch=epoch)


def record_progress(segment_id: int) -> Callable[[VersionedManifest], Manifest]:
    """The manifest change a writer makes after a segment: note it in ``next_segment``."""

    def change(versioned: VersionedManifest) -> Manifest:
        journal = versioned.manifest.journal
        moved = replace(journal, next_segment=max(journal.next_segment, segment_id + 1))
        return versioned.manifest.with_journal(moved)

    return change


class JournalListingHook:
    """A real store whose second listing of ``journal/`` runs ``action`` right after it: the
    point where a concurrent writer's write lands between a claimant's listing and its fence.
    (A claim's first listing looks for missing segments before the epoch moves; the second is
    the one its fence follows.)"""

    def __init__(self, inner: ObjectStore, action: Callable[[], None], nth: int = 2) -> None:
        self.inner = inner
        self._action: Callable[[], None] | None = action
        self._countdown = nth

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        found = list(self.inner.list(prefix))
        self._listed(prefix)
        return iter(found)

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        page = self.inner.list_page(prefix, token=token, limit=limit)
        self._listed(prefix)  # a scan of the segments lists from a token: one page here
        return page

    def _listed(self, prefix: str) -> None:
        if prefix == "journal/" and self._action is not None:
            self._countdown -= 1
            if self._countdown == 0:
                action, self._action = self._action, None
                action()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    return open_store(store_url)


@pytest.fixture
def database(store: ObjectStore) -> ManifestStore:
    ms = ManifestStore(store)
    ms.create(Manifest())
    return ms


# -- claiming ------------------------------------------------------------------------------------


def test_first_claim_fences_slot_one(database: ManifestStore, store: ObjectStore) -> None:
    claim = claim_writer(database, now=1000.0)
    assert claim.epoch == 1
    assert claim.fence_segment == 1 and claim.next_segment == 2
    assert claim.segments == ()
    info = store.head(segment_key(1))
    assert info.size == EMPTY_JOURNAL_SIZE
    assert info.metadata[EPOCH_METADATA] == "1"
    assert segment_epoch(store, 1) == 1
    writers = [cp for cp in claim.versioned.manifest.checkpoints if cp.kind == KIND_WRITER]
    assert len(writers) == 1
    assert writers[0].metadata["epoch"] == "1"
    assert writers[0].manifest_id == 2 and writers[0].expire_time is None


def test_second_claim_replays_unrolled_segments(
    database: ManifestStore, store: ObjectStore
) -> None:
    first = claim_writer(database)
    for n, segment_id in enumerate(range(first.next_segment, first.next_segment + 3)):
        data = segment_bytes(n + 1, first.epoch)
        write_segment(store, segment_id, data, writer_epoch=first.epoch)
    second = claim_writer(database)
    assert second.epoch == 2
    assert second.fence_segment == 5
    assert [(r.id, r.writer_epoch) for r in second.segments] == [(1, 1), (2, 1), (3, 1), (4, 1)]
    writers = [cp for cp in second.versioned.manifest.checkpoints if cp.kind == KIND_WRITER]
    assert [cp.metadata["epoch"] for cp in writers] == ["2"]
    # The old writer's next segment lands on the fence.
    with pytest.raises(FencedError, match="segment 5 was written by writer epoch 2"):
        write_segment(store, 5, segment_bytes(4, 1), writer_epoch=1)
    with pytest.raises(FencedError):
        database.update(record_progress(5), writer_epoch=1)


def test_claim_starts_after_rolled_segments_and_next_segment(
    database: ManifestStore, store: ObjectStore
) -> None:
    def roll(versioned: VersionedManifest) -> Manifest:
        journal = replace(versioned.manifest.journal, last_rolled_segment=6, next_segment=9)
        return versioned.manifest.with_journal(journal)

    database.update(roll)
    for segment_id in (7, 8):
        write_segment(store, segment_id, segment_bytes(segment_id, 1), writer_epoch=1)
    claim = claim_writer(database)
    assert claim.fence_segment == 9
    assert [r.id for r in claim.segments] == [7, 8]
    assert claim.missing == ()


def test_claim_refuses_segments_missing_below_next_segment(
    database: ManifestStore, store: ObjectStore
) -> None:
    """The manifest says segments 7 and 8 were written; both are gone: damage."""

    def roll(versioned: VersionedManifest) -> Manifest:
        journal = replace(versioned.manifest.journal, last_rolled_segment=6, next_segment=9)
        return versioned.manifest.with_journal(journal)

    database.update(roll)
    before = listing(store)
    with pytest.raises(CorruptionError, match=r"journal/0+7\.jnl") as caught:
        claim_writer(database)
    assert caught.value.object_name.endswith(segment_key(7))
    assert listing(store) == before  # refused before the epoch moved: nothing written
    claim = claim_writer(database, allow_missing_segments=True)
    assert claim.fence_segment == 9 and claim.missing == (7, 8) and claim.segments == ()


def test_claim_refuses_a_segment_missing_below_a_later_one(
    database: ManifestStore, store: ObjectStore
) -> None:
    first = claim_writer(database)  # fence at 1
    for segment_id in range(2, 9):
        write_segment(store, segment_id, segment_bytes(segment_id, 1), writer_epoch=first.epoch)
    store.delete(segment_key(5))
    before = listing(store)
    with capture_logs() as logs, pytest.raises(CorruptionError, match="segment") as caught:
        claim_writer(database)
    assert caught.value.object_name.endswith(segment_key(5))
    assert listing(store) == before
    assert not any(e["event"] == "writer.claimed" for e in logs)
    # Allowed: the fence goes above every segment present, all of which are replayed, so the
    # survivors after the gap are not rejected by the reader rule.
    with capture_logs() as logs:
        claim = claim_writer(database, allow_missing_segments=True)
    assert claim.fence_segment == 9
    assert [r.id for r in claim.segments] == [1, 2, 3, 4, 6, 7, 8]
    assert claim.missing == (5,)
    warning = next(e for e in logs if e["event"] == "journal.segments_missing")
    assert warning["log_level"] == "warning" and warning["missing"] == [segment_key(5)]


def test_a_short_tail_is_not_damage(database: ManifestStore, store: ObjectStore) -> None:
    """A write in flight at a crash never landed: nothing above it, nothing missing."""
    first = claim_writer(database)
    for segment_id in (2, 3):
        write_segment(store, segment_id, segment_bytes(segment_id, 1), writer_epoch=first.epoch)
    claim = claim_writer(database)
    assert claim.fence_segment == 4 and claim.missing == ()
    assert [r.id for r in claim.segments] == [1, 2, 3]


def write_floored(store: ObjectStore, segment_id: int, floor: int, epoch: int = 1) -> None:
    """A data segment of ``epoch`` recording durable floor ``floor`` (issued with the segments
    above ``floor`` still in flight)."""
    write_segment(
        store, segment_id, segment_bytes(segment_id, epoch), writer_epoch=epoch, durable_floor=floor
    )


def test_a_torn_tail_is_fenced_at_its_first_gap_and_not_replayed(
    database: ManifestStore, store: ObjectStore
) -> None:
    """A writer with four segments in flight crashed: 3 never landed, 4 and 5 did, issued while
    2 was the last durable one. None of 4 and 5 was acknowledged: the next claim fences slot 3
    (the reader rule then rejects 4 and 5 for good) and replays 1 and 2 only."""
    first = claim_writer(database, segments_in_flight=4)
    assert first.older_in_flight == 1 and first.sequential_until == first.fence_segment
    write_floored(store, 2, 1)
    write_floored(store, 4, 2)
    write_floored(store, 5, 2)
    with capture_logs() as logs:
        second = claim_writer(database, segments_in_flight=2)
    assert second.fence_segment == 3 and second.missing == ()
    assert [(r.id, r.writer_epoch) for r in second.segments] == [(1, 1), (2, 1)]
    (torn,) = [e for e in logs if e["event"] == "journal.torn_tail"]
    assert torn["never_acknowledged"] == [segment_key(4), segment_key(5)]
    assert store.head(segment_key(3)).metadata[FLOOR_METADATA] == "2"
    # Older writers kept up to 4 writes in flight: theirs may land up to slot 3 + 4 - 1.
    assert second.older_in_flight == 4 and second.sequential_until == 6
    latest = database.latest()
    assert latest is not None and latest.manifest.segments_in_flight == 4
    everything = with_epochs(store, scan_segments(store, 0).refs)
    assert [r.id for r in accepted_segments(everything)] == [1, 2, 3]
    third = claim_writer(database)  # the tail is whole now: nothing torn, nothing missing
    assert third.fence_segment == 6 and [r.id for r in third.segments] == [1, 2, 3]


def test_a_gap_a_later_segment_records_as_durable_is_damage(
    database: ManifestStore, store: ObjectStore
) -> None:
    """Segment 4 was issued once 3 was durable (its floor is 3): 3 missing is damage, refused
    before anything is written; allowed, the claim fences above it and replays the rest."""
    claim_writer(database, segments_in_flight=4)
    write_floored(store, 2, 1)
    write_floored(store, 4, 3)
    write_floored(store, 5, 2)
    before = listing(store)
    with pytest.raises(CorruptionError, match=r"journal/0+3\.jnl"):
        claim_writer(database)
    assert listing(store) == before
    claim = claim_writer(database, allow_missing_segments=True)
    assert claim.missing == (3,) and claim.fence_segment == 6
    assert [r.id for r in claim.segments] == [1, 2, 4, 5]


def test_a_segment_without_a_floor_was_issued_after_every_earlier_one(
    database: ManifestStore, store: ObjectStore
) -> None:
    """Segments written before floors were recorded (and any whose metadata is lost) count as
    written one at a time: a gap below one of them is damage, as it always was."""
    claim_writer(database)
    store.put_if_absent(segment_key(2), segment_bytes(2, 1))
    store.put_if_absent(segment_key(4), segment_bytes(4, 1))
    with pytest.raises(CorruptionError, match=r"journal/0+3\.jnl"):
        claim_writer(database)


def test_judging_a_tail() -> None:
    def ref(segment_id: int, floor: int | None) -> SegmentRef:
        return SegmentRef(segment_id, 100, 1, floor)

    # 3 torn: nothing above records it durable.
    assert torn_tail([ref(1, 0), ref(2, 1), ref(4, 2), ref(5, 2)], [3], 1) == 3
    # 3 is damage (5 records it durable); 6 is torn (7 and 9 were issued before it landed).
    present = [ref(2, 1), ref(4, 2), ref(5, 4), ref(7, 5), ref(9, 5)]
    assert torn_tail(present, [3, 6, 8], 1) == 6
    # A gap below next_segment is damage whatever the floors say.
    assert torn_tail([ref(4, 2)], [3], 4) is None
    # No floor recorded: issued after every lower segment was durable.
    assert torn_tail([ref(4, None)], [3], 1) is None
    assert torn_tail([], [], 1) is None


def test_a_checkpoint_ends_its_window_at_a_torn_tail(
    database: ManifestStore, store: ObjectStore
) -> None:
    claim_writer(database, segments_in_flight=4)
    write_floored(store, 2, 1)
    write_floored(store, 4, 2)
    checkpoint = create_checkpoint(database, lifetime=60.0)
    pinned = database.read(checkpoint.manifest_id)
    assert pinned.journal.next_segment == 3  # 4 is above the torn tail: not covered


def test_a_writer_steps_over_slots_an_older_epoch_took_only_when_told(
    store: ObjectStore,
) -> None:
    tables = TableStore(store)
    write_floored(store, 3, 2, epoch=1)
    write_floored(store, 4, 2, epoch=1)
    with pytest.raises(OlderSlot) as older:
        tables.write_segment(3, segment_bytes(9, 2), writer_epoch=2)
    assert older.value.segment_id == 3 and older.value.epoch == 1
    with capture_logs() as logs:
        landed = tables.write_segment(
            3, segment_bytes(9, 2), writer_epoch=2, durable_floor=2, step_over_older=True
        )
    assert landed == 5
    assert [e["segment"] for e in logs if e["event"] == "journal.slot_stepped_over"] == [3, 4]
    assert store.get(segment_key(5)) == segment_bytes(9, 2)
    assert segment_stamp(store, 5) == SegmentStamp(2, 2)


def test_scan_segments_names_every_gap(store: ObjectStore) -> None:
    for segment_id in (1, 2, 3, 5, 6, 9):
        store.put_if_absent(segment_key(segment_id), segment_bytes(segment_id, 1))
    store.put_if_absent("journal/compacted/0190000000000aaaaaaaaaaaa.jnl", b"x")
    scan = scan_segments(store, 0)
    assert [r.id for r in scan.refs] == [1, 2, 3, 5, 6, 9]
    assert scan.missing == (4, 7, 8) and scan.last == 9
    assert scan_segments(store, 6).missing == (7, 8)
    assert scan_segments(store, 9, next_segment=12).missing == (10, 11)
    assert scan_segments(store, 9, next_segment=10).missing == ()
    assert scan_segments(store, 9).last == 9


def test_fence_slot_taken_by_an_older_writer(database: ManifestStore, store: ObjectStore) -> None:
    """Outcome 2: an older writer fills the slot first; the claimant steps to the next id."""
    old = claim_writer(database)
    racing = JournalListingHook(
        store,
        lambda: write_segment(store, 2, segment_bytes(1, old.epoch), writer_epoch=old.epoch),
    )
    claim = claim_writer(ManifestStore(racing))  # type: ignore[arg-type]
    assert claim.epoch == 2
    assert claim.fence_segment == 3
    assert [(r.id, r.writer_epoch) for r in claim.segments] == [(1, 1), (2, 1)]
    with pytest.raises(FencedError):
        write_segment(store, 3, segment_bytes(2, old.epoch), writer_epoch=old.epoch)


def test_fence_slot_taken_by_the_same_epoch_is_a_bug(
    database: ManifestStore, store: ObjectStore
) -> None:
    """Outcome 3: two writers with one epoch cannot happen; it is reported loudly."""
    claim_writer(database)

    def same_epoch_write() -> None:
        latest = database.latest()
        assert latest is not None
        epoch = latest.manifest.writer_epoch
        write_segment(store, 2, segment_bytes(1, epoch), writer_epoch=epoch)

    racing = JournalListingHook(store, same_epoch_write)
    with pytest.raises(InkpenError, match="two writers hold one epoch") as caught:
        claim_writer(ManifestStore(racing))  # type: ignore[arg-type]
    assert not isinstance(caught.value, FencedError)


def test_fence_slot_taken_by_a_newer_writer(database: ManifestStore, store: ObjectStore) -> None:
    """Outcome 4: a newer writer claimed meanwhile and fenced the slot; the claimant is fenced."""
    claim_writer(database)
    newer: list[int] = []

    racing = JournalListingHook(store, lambda: newer.append(claim_writer(database).epoch))
    with pytest.raises(FencedError, match="newer writer"):
        claim_writer(ManifestStore(racing))  # type: ignore[arg-type]
    assert newer == [3]
    latest = database.latest()
    assert latest is not None and latest.manifest.writer_epoch == 3


def test_claim_fenced_when_manifest_moves_during_fence(
    database: ManifestStore, store: ObjectStore
) -> None:
    """A newer writer bumps the epoch after our bump but before our confirmation."""
    claim_writer(database)

    def bump_epoch() -> None:
        database.update(lambda v: replace(v.manifest, writer_epoch=v.manifest.writer_epoch + 1))

    racing = JournalListingHook(store, bump_epoch)
    with pytest.raises(FencedError, match="manifest moved to writer epoch 3"):
        claim_writer(ManifestStore(racing))  # type: ignore[arg-type]


def test_claim_refuses_destroyed_and_missing_databases(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    with pytest.raises(NotFoundError, match="no inkpen database"):
        claim_writer(ms)
    assert listing(store) == []
    ms.create(Manifest(destroyed_at=1.0))
    before = listing(store)
    with pytest.raises(NotFoundError, match="was destroyed"):
        claim_writer(ms)
    assert listing(store) == before


# -- writing segments ----------------------------------------------------------------------------


def test_write_segment_outcomes(database: ManifestStore, store: ObjectStore) -> None:
    claim = claim_writer(database)
    nxt = claim.next_segment
    write_segment(store, nxt, segment_bytes(1, claim.epoch), writer_epoch=claim.epoch)
    assert segment_epoch(store, nxt) == claim.epoch
    assert store.get(segment_key(nxt)) == segment_bytes(1, claim.epoch)
    with pytest.raises(InkpenError, match="used one segment id twice"):
        write_segment(store, nxt, segment_bytes(2, claim.epoch), writer_epoch=claim.epoch)
    with pytest.raises(InkpenError, match="older than this writer's epoch"):
        write_segment(store, nxt, segment_bytes(2, 9), writer_epoch=9)
    write_segment(store, nxt + 1, segment_bytes(2, 9), writer_epoch=9)
    with pytest.raises(FencedError, match=f"segment {nxt + 1} was written by writer epoch 9"):
        write_segment(store, nxt + 1, segment_bytes(2, claim.epoch), writer_epoch=claim.epoch)
    assert store.get(segment_key(nxt + 1)) == segment_bytes(2, 9)
    with pytest.raises(UsageError, match="writer_epoch"):
        write_segment(store, nxt + 2, b"x", writer_epoch=0)
    assert segment_epoch(store, nxt + 2) is None


def test_table_store_segment_write_outcomes(database: ManifestStore, store: ObjectStore) -> None:
    """The writer's segment write (``TableStore.write_segment``): a write retried after an unknown
    outcome that finds its own bytes has landed; any other segment in the slot is judged by the
    reader rule: a newer epoch fences, an older one or other bytes of its own epoch stop it."""
    claim = claim_writer(database)
    tables = TableStore(store)
    nxt, epoch = claim.next_segment, claim.epoch
    mine = segment_bytes(1, epoch)
    tables.write_segment(nxt, mine, writer_epoch=epoch)
    assert store.get(segment_key(nxt)) == mine
    tables.write_segment(nxt, mine, writer_epoch=epoch, retried=True)  # an earlier try landed
    with pytest.raises(InkpenError, match="used one segment id twice"):
        tables.write_segment(nxt, mine, writer_epoch=epoch)
    with pytest.raises(InkpenError, match="holds other bytes of writer epoch") as lost:
        tables.write_segment(nxt, segment_bytes(2, epoch), writer_epoch=epoch, retried=True)
    assert not isinstance(lost.value, StoreError)
    store.put_if_absent(segment_key(nxt + 1), segment_bytes(2, epoch + 1))  # a newer writer's
    for retried in (False, True):
        with pytest.raises(FencedError, match=f"written by writer epoch {epoch + 1}"):
            tables.write_segment(
                nxt + 1, segment_bytes(2, epoch), writer_epoch=epoch, retried=retried
            )
        with pytest.raises(InkpenError, match="older than this writer's epoch") as older:
            tables.write_segment(
                nxt, segment_bytes(2, epoch + 1), writer_epoch=epoch + 1, retried=retried
            )
        assert not isinstance(older.value, StoreError)
    with pytest.raises(UsageError, match="attempts"):
        tables.write_segment(nxt + 2, mine, writer_epoch=epoch, attempts=0)
    assert segment_epoch(store, nxt + 2) is None


def test_table_store_segment_write_of_unknown_outcome(store: ObjectStore) -> None:
    """A refused first round is definite; creates that land but lose their answer while the
    slot cannot be read leave the outcome unknown (indefinite, never "did not happen"); the
    same write retried once the store answers finds its own bytes and returns."""
    faulty = FaultyStore(store, FaultPlan(seed=1, before={"put_if_absent": 1.0}))
    tables = TableStore(faulty)
    data = segment_bytes(1, 3)
    with pytest.raises(StoreError) as refused:
        tables.write_segment(2, data, writer_epoch=3)
    assert refused.value.definite
    assert segment_epoch(store, 2) is None
    faulty.plan = FaultPlan(
        seed=1,
        after={"put_if_absent": 1.0},
        before=dict.fromkeys(("get", "get_range", "head"), 1.0),
    )
    with pytest.raises(StoreError, match="stayed unknown after 1 attempts") as unknown:
        tables.write_segment(2, data, writer_epoch=3, attempts=1)
    assert not unknown.value.definite
    assert store.get(segment_key(2)) == data  # it had landed
    faulty.plan = FaultPlan(seed=1)
    tables.write_segment(2, data, writer_epoch=3, attempts=1, retried=True)


class LostAnswer:
    """A store whose next segment create is lost before it lands, while a newer writer's
    segment of ``epoch`` takes the slot: what a read back finds after the lost answer."""

    def __init__(self, inner: ObjectStore, epoch: int) -> None:
        self.inner = inner
        self.epoch = epoch

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def put_if_absent(self, key: str, data: bytes, **kwargs: object) -> None:
        self.inner.put_if_absent(key, segment_bytes(9, self.epoch))
        raise StoreError(f"the answer to creating {key} was lost", definite=False, key=key)


class LetsThrough:
    """A store that lets an ``OSError`` through from a create, as a store with a bug might."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def put_if_absent(self, key: str, data: bytes, **kwargs: object) -> None:
        raise OSError("the disk went away")


def test_table_store_segment_write_read_back_applies_the_rule(store: ObjectStore) -> None:
    """After a lost answer the slot is read back: a newer writer's segment there is a fence
    (never a loss of this writer's bytes), for a fresh write and a retried one alike."""
    for retried in (False, True):
        tables = TableStore(LostAnswer(store, epoch=5))  # type: ignore[arg-type]
        segment_id = 10 + retried
        with pytest.raises(FencedError, match="written by writer epoch 5"):
            tables.write_segment(segment_id, segment_bytes(1, 4), writer_epoch=4, retried=retried)


def test_table_store_segment_write_maps_what_a_store_lets_through(store: ObjectStore) -> None:
    """Anything but an inkpen error from the store may have gone through: it is an indefinite
    StoreError, and logged."""
    tables = TableStore(LetsThrough(store))  # type: ignore[arg-type]
    with capture_logs() as events, pytest.raises(StoreError, match="OSError") as failed:
        tables.write_segment(1, segment_bytes(1, 1), writer_epoch=1)
    assert not failed.value.definite
    assert [e["event"] for e in events if e["log_level"] == "error"] == [
        "journal.segment_write_raised"
    ]


def test_a_segment_given_as_pieces_is_written_and_read_back_as_their_join(
    store: ObjectStore,
) -> None:
    """A segment's pieces (large values' records, not joined): a local directory writes them
    as they are, any other store (and any wrapper: its ``put_if_absent`` still runs) gets them
    joined; a retried write compares the slot with their join."""
    whole = segment_bytes(1, 3)
    pieces = [whole[:60], whole[60:61], b"", whole[61:]]
    tables = TableStore(store)
    tables.write_segment(5, pieces, writer_epoch=3)
    assert store.get(segment_key(5)) == whole
    tables.write_segment(5, pieces, writer_epoch=3, retried=True)  # an earlier try landed
    with pytest.raises(InkpenError, match="holds other bytes of writer epoch"):
        tables.write_segment(5, [segment_bytes(2, 3)], writer_epoch=3, retried=True)
    faulty = FaultyStore(store, FaultPlan(seed=1, before={"put_if_absent": 1.0}))
    with pytest.raises(StoreError) as refused:  # the wrapper's put_if_absent ran
        TableStore(faulty).write_segment(6, pieces, writer_epoch=3)
    assert refused.value.definite and segment_epoch(store, 6) is None


def test_segment_epoch_falls_back_to_the_header(store: ObjectStore) -> None:
    store.put_if_absent(segment_key(4), segment_bytes(1, 7))  # no metadata
    assert segment_epoch(store, 4) == 7
    assert segment_epoch(store, 5) is None


def test_list_segments_stops_at_the_first_gap(store: ObjectStore) -> None:
    for segment_id in (1, 2, 3, 5, 6):
        store.put_if_absent(segment_key(segment_id), segment_bytes(segment_id, 1))
    store.put_if_absent("journal/compacted/0190000000000aaaaaaaaaaaa.jnl", b"x")
    assert [r.id for r in list_segments(store, 0)] == [1, 2, 3]
    assert [r.id for r in list_segments(store, 4)] == [5, 6]
    assert list_segments(store, 3) == []
    assert list_segments(store, 6) == []
    with pytest.raises(UsageError):
        list_segments(store, -1)


# -- the reader rule -----------------------------------------------------------------------------


def refs(*epochs: int) -> list[SegmentRef]:
    return [SegmentRef(i + 1, 100, e) for i, e in enumerate(epochs)]


def test_reader_rule_on_three_writers() -> None:
    # Writers 1, 2 and 3 race; slot 4 went to writer 1 after writer 3 fenced slot 3.
    accepted = accepted_segments(refs(1, 1, 3, 1, 2, 3, 3))
    assert [(r.id, r.writer_epoch) for r in accepted] == [(1, 1), (2, 1), (3, 3), (6, 3), (7, 3)]


def test_reader_rule_keeps_everything_in_order() -> None:
    assert accepted_segments(refs(1, 1, 2, 2, 5)) == refs(1, 1, 2, 2, 5)


def test_reader_rule_needs_epochs_in_id_order() -> None:
    with pytest.raises(UsageError, match="no epoch"):
        accepted_segments([SegmentRef(1, 10)])
    with pytest.raises(UsageError, match="increasing id order"):
        accepted_segments([SegmentRef(2, 10, 1), SegmentRef(1, 10, 1)])


def test_with_epochs_reads_metadata(store: ObjectStore) -> None:
    for segment_id, epoch in ((1, 1), (2, 3), (3, 2)):
        store.put_if_absent(
            segment_key(segment_id),
            segment_bytes(segment_id, epoch),
            metadata={EPOCH_METADATA: str(epoch)},
        )
    filled = with_epochs(store, list_segments(store, 0))
    assert [(r.id, r.writer_epoch) for r in filled] == [(1, 1), (2, 3), (3, 2)]
    assert [r.id for r in accepted_segments(filled)] == [1, 2]


# -- racing writers ------------------------------------------------------------------------------


@dataclass
class WriterLog:
    """What one racing writer reported, line by line."""

    lines: list[str] = field(default_factory=list)

    def words(self, tag: str) -> list[list[str]]:
        return [line.split()[1:] for line in self.lines if line.split()[:1] == [tag]]

    @property
    def epoch(self) -> int | None:
        claimed = self.words("CLAIMED")
        return int(claimed[0][0]) if claimed else None

    @property
    def fenced(self) -> bool:
        return bool(self.words("FENCED"))

    @property
    def written(self) -> list[int]:
        return [int(w[1]) for w in self.words("WROTE")]

    @property
    def next_segment(self) -> int | None:
        nxt = self.words("NEXT")
        return int(nxt[-1][0]) if nxt else None


def writer_loop(
    url: str,
    *,
    wait_for_go: Callable[[], object],
    stop_requested: Callable[[], bool],
    say: Callable[[str], None],
) -> None:
    """Claim the database, then write segments (and, every few, a manifest update) until fenced
    or stopped, reporting each step through ``say``."""
    store = open_store(url)
    ms = ManifestStore(store)
    say("READY")
    wait_for_go()
    try:
        claim = claim_writer(ms)
    except FencedError as exc:
        say(f"FENCED claim {exc}")
        return
    say(f"CLAIMED {claim.epoch} {claim.fence_segment}")
    segment_id = claim.next_segment
    sqn = 1
    while not stop_requested():
        say(f"NEXT {segment_id}")
        try:
            data = segment_bytes(sqn, claim.epoch)
            write_segment(store, segment_id, data, writer_epoch=claim.epoch)
        except FencedError as exc:
            say(f"FENCED segment {exc}")
            return
        say(f"WROTE {claim.epoch} {segment_id}")
        segment_id += 1
        sqn += 1
        say(f"NEXT {segment_id}")
        if sqn % SEGMENTS_PER_UPDATE:
            continue
        try:
            ms.update(record_progress(segment_id - 1), writer_epoch=claim.epoch)
        except FencedError as exc:
            say(f"FENCED manifest {exc}")
            return
    say("STOPPED")


def check_race(store: ObjectStore, logs: list[WriterLog]) -> None:
    """After a race: one survivor with the newest epoch; the rest fenced, and fenced for good."""
    ms = ManifestStore(store)
    survivors = [log for log in logs if not log.fenced]
    assert len(survivors) == 1, [log.lines[-3:] for log in logs]
    newest = survivors[0]
    latest = ms.latest()
    assert latest is not None
    assert newest.epoch == latest.manifest.writer_epoch
    assert all(log.epoch is None or log.epoch < newest.epoch for log in logs if log is not newest)

    # Every older writer stays fenced: its next segment write and any manifest update fail.
    for log in logs:
        if log is newest or log.epoch is None:
            continue
        assert log.next_segment is not None
        with pytest.raises(FencedError):
            write_segment(
                store, log.next_segment, segment_bytes(1, log.epoch), writer_epoch=log.epoch
            )
        with pytest.raises(FencedError):
            ms.update(record_progress(1), writer_epoch=log.epoch)

    # The reader rule accepts every acknowledged segment and nothing an older epoch wrote after
    # the newest writer's fence.
    all_segments = with_epochs(store, list_segments(store, 0))
    accepted = accepted_segments(all_segments)
    accepted_ids = {r.id for r in accepted}
    for log in logs:
        assert set(log.written) <= accepted_ids
    fence = int(newest.words("CLAIMED")[0][1])
    assert all(r.writer_epoch == newest.epoch for r in accepted if r.id >= fence)
    epochs = [r.writer_epoch for r in accepted]
    assert epochs == sorted(epochs)  # type: ignore[type-var]

    # The survivor can still write.
    survivor_epoch = newest.epoch
    assert survivor_epoch is not None
    nxt = max(r.id for r in all_segments) + 1
    write_segment(store, nxt, segment_bytes(1, survivor_epoch), writer_epoch=survivor_epoch)
    ms.update(record_progress(nxt), writer_epoch=survivor_epoch)


SURVIVOR_SEGMENTS = 5


def race_settled(logs: list[WriterLog]) -> bool:
    """All writers but one are fenced, and the one left has written a few segments since."""
    running = [log for log in logs if not log.fenced]
    return len(running) == 1 and len(running[0].written) >= SURVIVOR_SEGMENTS


@pytest.mark.parametrize("writers", [2, 3])
def test_racing_writers_in_threads(store_url: str, database: ManifestStore, writers: int) -> None:
    go = threading.Barrier(writers)
    stop = threading.Event()
    logs = [WriterLog() for _ in range(writers)]
    lock = threading.Lock()

    def run(log: WriterLog) -> None:
        def say(line: str) -> None:
            with lock:
                log.lines.append(line)

        writer_loop(store_url, wait_for_go=go.wait, stop_requested=stop.is_set, say=say)

    threads = [threading.Thread(target=run, args=(log,)) for log in logs]
    for t in threads:
        t.start()

    def settled() -> bool:
        with lock:
            return race_settled(logs)

    wait_until(settled, "all but one writer to be fenced", DEADLINE)
    stop.set()
    for t in threads:
        t.join(DEADLINE)
    check_race(database.store, logs)


PROCESS_SCRIPT = """
import logging, os, sys, time
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
sys.path.insert(0, sys.argv[1])
from test_manifest_fencing import writer_loop
url, go_file, stop_file = sys.argv[2:5]

def wait_for_go():
    end = time.monotonic() + 120
    while not os.path.exists(go_file):
        if time.monotonic() > end:
            raise SystemExit("no go signal")
        time.sleep(0.005)

def say(line):
    print(line, flush=True)

writer_loop(url, wait_for_go=wait_for_go, stop_requested=lambda: os.path.exists(stop_file), say=say)
"""


@pytest.mark.parametrize("writers", [2, 3])
def test_racing_writers_in_processes(
    store_url: str, database: ManifestStore, writers: int, tmp_path: Path
) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("a memory store is private to one process")
    go_file = tmp_path / "go"
    stop_file = tmp_path / "stop"
    tests_dir = str(Path(__file__).parent)
    logs = [WriterLog() for _ in range(writers)]
    lock = threading.Lock()
    # stderr goes to files: only the pump threads read the stdout pipes (a second reader, such
    # as communicate(), would take part of a line and garble what the pump sees).
    errors = [tmp_path / f"writer-{n}.err" for n in range(writers)]
    procs = []
    for path in errors:
        with path.open("w") as err:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        PROCESS_SCRIPT,
                        tests_dir,
                        store_url,
                        str(go_file),
                        str(stop_file),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    env=dict(os.environ),
                )
            )

    def pump(proc: subprocess.Popen[str], log: WriterLog) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with lock:
                log.lines.append(line.strip())

    readers = [threading.Thread(target=pump, args=pair) for pair in zip(procs, logs, strict=True)]
    for r in readers:
        r.start()
    try:

        def count(tag: str) -> int:
            with lock:
                return sum(any(line.startswith(tag) for line in log.lines) for log in logs)

        wait_until(lambda: count("READY") == writers, "every writer process to start", DEADLINE)
        go_file.touch()

        def settled() -> bool:
            with lock:
                return race_settled(logs)

        wait_until(settled, "all but one writer to be fenced", DEADLINE)
        stop_file.touch()
        for proc, path in zip(procs, errors, strict=True):
            proc.wait(timeout=DEADLINE)
            assert proc.returncode == 0, path.read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for r in readers:
        r.join()
    check_race(database.store, logs)
