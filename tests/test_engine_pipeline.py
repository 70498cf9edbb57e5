"""Several journal segment writes in flight: acknowledged in SQN order, whatever order they land
in; a failure below segments that landed; conditions checked against writes still in flight;
close waiting for them; a fenced writer's writes landing above the newer writer's fence.

Segment writes are held and released one slot at a time (:class:`support.segment_gate.SegmentGate`),
so each test decides exactly which write lands when."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import inkpen
from inkpen.objectstore import open_store
from support.logs import capture_logs
from support.segment_gate import SegmentGate
from support.waiting import wait_until

IN_FLIGHT = 4
DEADLINE = 60.0


class Put:
    """One call on its own thread; keeps what it raised (None once it returned)."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.error: BaseException | None = None
        self.returned = False
        self._call = call
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._call()
            self.returned = True
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the call never ended"

    @property
    def waiting(self) -> bool:
        return self.thread.is_alive()


def open_gated(store_url: str, **options: Any) -> tuple[inkpen.Bookie, SegmentGate]:
    gate = SegmentGate(open_store(store_url))
    book = inkpen.open(gate, segments_in_flight=IN_FLIGHT, **options)
    return book, gate


def put_into(book: inkpen.Bookie, gate: SegmentGate, slot: int, key: str, value: bytes) -> Put:
    """A put whose segment is ``slot``, held there until the test releases it."""
    put = Put(lambda: book.put("b", key, value))
    gate.wait_arrived(slot)
    return put


def waiting_segments(book: inkpen.Bookie, count: int) -> None:
    wait_until(
        lambda: book.stats()["segments_waiting"] == count,
        f"{count} segment(s) written and waiting for an earlier one",
        DEADLINE,
    )


def test_puts_are_acknowledged_in_sqn_order_whatever_order_their_segments_land(
    store_url: str,
) -> None:
    book, gate = open_gated(store_url)
    s = book.stats()["next_segment"]
    gate.hold(s, s + 1, s + 2)
    a = put_into(book, gate, s, "a", b"1")
    b = put_into(book, gate, s + 1, "b", b"2")
    c = put_into(book, gate, s + 2, "c", b"3")
    assert book.stats()["segments_in_flight"] == 3
    gate.release(s + 2)
    waiting_segments(book, 1)  # c landed first: it waits for a and b
    assert a.waiting and b.waiting and c.waiting
    assert book.get("b", "c") is None
    gate.release(s + 1)
    waiting_segments(book, 2)
    assert a.waiting and b.waiting and c.waiting
    assert book.get("b", "b") is None and book.get("b", "c") is None
    gate.release(s)
    for put in (a, b, c):
        put.join()
        assert put.error is None
    assert [book.get("b", k) for k in "abc"] == [b"1", b"2", b"3"]
    assert [book.head("b", k).sqn for k in "abc"] == sorted(  # type: ignore[union-attr]
        book.head("b", k).sqn  # type: ignore[union-attr]
        for k in "abc"
    )
    stats = book.stats()
    assert stats["segments_in_flight"] == 0 and stats["segments_waiting"] == 0
    book.close()
    with inkpen.open(store_url) as again:
        assert [again.get("b", k) for k in "abc"] == [b"1", b"2", b"3"]


def test_a_refused_segment_below_a_landed_one_is_written_again(store_url: str) -> None:
    """Segment s+1 landed, built on s's SQNs; s is refused: s is written again until it lands,
    and both batches' callers hear that the outcome is unknown (the writes then appear)."""
    book, gate = open_gated(store_url)
    s = book.stats()["next_segment"]
    gate.hold(s, s + 1)
    a = put_into(book, gate, s, "a", b"1")
    b = put_into(book, gate, s + 1, "b", b"2")
    gate.release(s + 1)
    waiting_segments(book, 1)
    gate.release(s, "refuse")
    for put in (a, b):
        put.join()
        assert isinstance(put.error, inkpen.StoreError), put.error
        assert put.error.definite is False
        assert "may still land" in str(put.error)
    wait_until(lambda: book.get("b", "a") == b"1", "segment s to be written again", DEADLINE)
    assert book.get("b", "b") == b"2"
    stats = book.stats()
    assert stats["settled_segments"] == 2 and stats["unsettled_segment"] is None
    book.put("b", "d", b"4")
    sqns = [book.head("b", k).sqn for k in ("a", "b", "d")]  # type: ignore[union-attr]
    assert sqns == sorted(sqns)
    book.close()
    with inkpen.open(store_url) as again:
        assert [again.get("b", k) for k in ("a", "b", "d")] == [b"1", b"2", b"4"]


def test_segments_refused_together_give_their_sqns_and_slots_back(store_url: str) -> None:
    book, gate = open_gated(store_url)
    s = book.stats()["next_segment"]
    sqn = book.stats()["sqn"]
    gate.hold(s, s + 1)
    a = put_into(book, gate, s, "a", b"1")
    b = put_into(book, gate, s + 1, "b", b"2")
    gate.release(s, "refuse")
    gate.release(s + 1, "refuse")
    for put in (a, b):
        put.join()
        assert isinstance(put.error, inkpen.StoreError), put.error
        assert put.error.definite is True
        assert "did not happen" in str(put.error)
    stats = book.stats()
    assert stats["sqn"] == sqn and stats["next_segment"] == s
    assert stats["unsettled_segment"] is None
    book.put("b", "c", b"3")
    assert book.head("b", "c").sqn == sqn + 1  # type: ignore[union-attr]
    assert s in gate.written
    assert book.get("b", "a") is None and book.get("b", "b") is None
    book.close()
    with inkpen.open(store_url) as again:
        assert [again.get("b", k) for k in "abc"] == [None, None, b"3"]


def test_an_unknown_outcome_below_a_landed_segment_is_settled(store_url: str) -> None:
    """s lands but its answer is lost and reads of the slot fail; s+1 lands. Both callers hear
    the outcome is unknown, later puts are refused while it is, and once the slot can be read the
    Bookie settles both (s had landed) and takes writes again."""
    book, gate = open_gated(store_url)
    s = book.stats()["next_segment"]
    gate.hold(s, s + 1)
    a = put_into(book, gate, s, "a", b"1")
    b = put_into(book, gate, s + 1, "b", b"2")
    gate.blind = True
    gate.release(s + 1)
    gate.release(s, "lose")
    for put in (a, b):
        put.join()
        assert isinstance(put.error, inkpen.StoreError), put.error
        assert put.error.definite is False
    assert book.stats()["unsettled_segment"] == s
    with pytest.raises(inkpen.StoreError, match="still unknown") as held:
        book.put("b", "c", b"3")
    assert held.value.definite is True
    gate.blind = False
    book.put("b", "d", b"4")  # settles s and s+1 first
    assert [book.get("b", k) for k in "abcd"] == [b"1", b"2", None, b"4"]
    assert book.stats()["settled_segments"] == 2
    book.abandon()
    with inkpen.open(store_url) as again:
        assert [again.get("b", k) for k in "abcd"] == [b"1", b"2", None, b"4"]


def test_conditions_and_merges_see_the_writes_still_in_flight(store_url: str) -> None:
    def add(key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
        return str(int(existing or b"0") + sum(int(op) for op in operands)).encode()

    gate = SegmentGate(open_store(store_url))
    book = inkpen.open(gate, segments_in_flight=IN_FLIGHT, merge_operators={"add": add})
    s = book.stats()["next_segment"]
    gate.hold(s, s + 1, s + 2)
    first = Put(lambda: book.put("b", "k", b"first", if_sqn=0))
    gate.wait_arrived(s)
    with pytest.raises(inkpen.ConflictError):  # decided at once, against the write in flight
        book.put("b", "k", b"second", if_sqn=0)
    one = Put(lambda: book.merge("b", "n", b"1", operator="add"))
    gate.wait_arrived(s + 1)
    two = Put(lambda: book.merge("b", "n", b"2", operator="add"))
    gate.wait_arrived(s + 2)
    for slot in (s + 2, s + 1, s):
        gate.release(slot)
    for put in (first, one, two):
        put.join()
        assert put.error is None
    assert book.get("b", "k") == b"first"
    assert book.get("b", "n") == b"3"
    book.close()


def test_close_waits_for_the_segments_in_flight(store_url: str) -> None:
    book, gate = open_gated(store_url)
    s = book.stats()["next_segment"]
    gate.hold(s)
    a = put_into(book, gate, s, "a", b"1")
    closing = Put(book.close)
    assert closing.waiting and a.waiting
    gate.release(s)
    closing.join()
    a.join()
    assert closing.error is None and a.error is None
    with inkpen.open(store_url) as again:
        assert again.get("b", "a") == b"1"


def test_a_fenced_writer_whose_writes_land_above_the_fence_loses_them_all(
    store_url: str,
) -> None:
    """The first writer has three segments in flight when a second opens and fences the first
    of their slots; the other two land above that fence. The first writer's puts all fail with
    FencedError; the second steps over the two slots and nothing of the first's writes in flight
    is ever read, then or after a reopen."""
    first, gate = open_gated(store_url)
    first.put("b", "before", b"0")
    s = first.stats()["next_segment"]
    gate.hold(s, s + 1, s + 2)
    puts = [put_into(first, gate, s + i, f"z{i}", b"zombie") for i in range(3)]
    second = inkpen.open(store_url, segments_in_flight=IN_FLIGHT)
    try:
        gate.release(s + 1)
        gate.release(s + 2)
        gate.wait_done(s + 1)
        gate.wait_done(s + 2)
        gate.release(s)
        for put in puts:
            put.join()
            assert isinstance(put.error, inkpen.FencedError), put.error
        with capture_logs() as logs:
            second.put("b", "after", b"1")
        stepped = [e["segment"] for e in logs if e["event"] == "journal.slot_stepped_over"]
        assert stepped == [s + 1, s + 2]
        assert second.get("b", "before") == b"0"
        assert second.get("b", "after") == b"1"
        assert [second.get("b", f"z{i}") for i in range(3)] == [None, None, None]
    finally:
        first.close()
        second.close()
    with inkpen.open(store_url, segments_in_flight=IN_FLIGHT) as third:
        assert third.get("b", "before") == b"0" and third.get("b", "after") == b"1"
        assert [third.get("b", f"z{i}") for i in range(3)] == [None, None, None]
        third.put("b", "third", b"3")
    with inkpen.open_reader(store_url) as reader:
        assert reader.get("b", "third") == b"3"
        assert [reader.get("b", f"z{i}") for i in range(3)] == [None, None, None]


def test_segments_in_flight_must_be_a_small_int(store_url: str) -> None:
    for bad in (0, 33, 1.5, True, "4"):
        with pytest.raises(inkpen.UsageError, match="segments_in_flight"):
            inkpen.open(store_url, segments_in_flight=bad)
    assert list(open_store(store_url).list("")) == []
