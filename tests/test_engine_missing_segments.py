"""A journal segment missing below a later one is damage: opening and reading refuse it, naming
the segment, unless the operator opens what is left with ``allow_missing_segments``."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

import inkpen
from inkpen.manifest.paths import parse_segment_key
from inkpen.objectstore import ObjectStore, open_store
from support.cli import ok
from support.engine import TINY, contents
from support.logs import capture_logs
from support.segment_gate import SegmentGate
from support.stores import listing
from support.waiting import wait_until

UNROLLED = {**TINY, "roll_segments": 1000, "roll_bytes": 64 * 1024 * 1024, "roll_on_close": False}
"""Every put stays in its own unrolled segment."""


def segments(store: ObjectStore) -> dict[int, str]:
    found = {}
    for info in store.list("journal/"):
        segment_id = parse_segment_key(info.key)
        if segment_id is not None:
            found[segment_id] = info.key
    return found


def crash_with_unrolled_segments(url: str, in_flight: int = 1) -> tuple[str, dict[bytes, bytes]]:
    """Six acknowledged puts in six segments, the writer gone without rolling them. Answers
    the key of the segment holding the newer value of ``k`` (an older one is below it) and what
    is left once that segment is lost. ``in_flight``: the writer's ``segments_in_flight`` (each
    put is acknowledged before the next, so every later segment records the lost one durable)."""
    book = inkpen.open(url, **UNROLLED, segments_in_flight=in_flight)
    store = open_store(url)
    book.put("b", "a1", b"1")
    book.put("b", "k", b"old")
    book.put("b", "a2", b"2")
    before = set(segments(store))
    book.put("b", "k", b"new")
    (newer,) = set(segments(store)) - before
    book.put("b", "a3", b"3")
    book.put("b", "a4", b"4")
    book.abandon()
    assert max(segments(store)) > newer  # the lost segment is below the newest
    left = {b"a1": b"1", b"k": b"old", b"a2": b"2", b"a3": b"3", b"a4": b"4"}
    return segments(store)[newer], left


@pytest.mark.parametrize("in_flight", [1, 4])
def test_a_missing_segment_is_refused_and_can_be_stepped_over(
    store_url: str, in_flight: int
) -> None:
    lost, left = crash_with_unrolled_segments(store_url, in_flight)
    store = open_store(store_url)
    store.delete(lost)
    before = listing(store)

    with pytest.raises(inkpen.CorruptionError, match=lost) as opening:
        inkpen.open(store_url, **UNROLLED)
    assert opening.value.object_name.endswith(lost)
    with pytest.raises(inkpen.CorruptionError, match=lost):
        inkpen.open_reader(store_url)
    assert listing(store) == before  # refused before anything was written

    with capture_logs() as logs, inkpen.open_reader(store_url, allow_missing_segments=True) as r:
        assert contents(r, "b") == left  # what is left, the older value of k included
    assert any(e["event"] == "journal.segments_missing" and e["missing"] == [lost] for e in logs)

    with capture_logs() as logs, inkpen.open(store_url, allow_missing_segments=True) as book:
        assert contents(book, "b") == left
        book.put("b", "after", b"5")
    assert any(e["event"] == "journal.segments_missing" for e in logs)
    assert any(e["event"] == "journal.missing_segments_rolled" for e in logs)

    # The writer rolled the survivors past the gap: plain opens work again and lose nothing.
    expected = {**left, b"after": b"5"}
    with inkpen.open_reader(store_url) as reader:
        assert contents(reader, "b") == expected
    with inkpen.open(store_url, **UNROLLED) as book:
        assert contents(book, "b") == expected


def test_a_reader_at_a_checkpoint_refuses_a_missing_segment(store_url: str) -> None:
    book = inkpen.open(store_url, **UNROLLED)
    store = open_store(store_url)
    for i in range(4):
        book.put("b", f"k{i}", b"%d" % i)
    checkpoint = book.checkpoint(None)
    book.abandon()
    ids = sorted(segments(store))
    lost = segments(store)[ids[-2]]
    store.delete(lost)
    with pytest.raises(inkpen.CorruptionError, match=lost):
        inkpen.open_reader(store_url, checkpoint=checkpoint)
    with inkpen.open_reader(store_url, checkpoint=checkpoint, allow_missing_segments=True) as r:
        assert contents(r, "b") == {b"k0": b"0", b"k1": b"1", b"k3": b"3"}


def test_missing_segments_option_must_be_a_bool(store_url: str) -> None:
    for bad in (1, "yes", None):
        with pytest.raises(inkpen.UsageError, match="allow_missing_segments"):
            inkpen.open(store_url, allow_missing_segments=bad)
    assert listing(open_store(store_url)) == []


def test_a_lost_write_the_ledger_recorded_is_never_read_as_data(store_url: str) -> None:
    """The ledger persisted the lost write before the crash: with the option, reading that key
    raises CorruptionError (it never answers with the older value or any other bytes). Values in
    the journal only: a small value the ledger keeps would still read, from the ledger."""
    book = inkpen.open(store_url, **UNROLLED, inline_value_bytes=0)
    store = open_store(store_url)
    book.put("b", "k", b"old")
    before = set(segments(store))
    book.put("b", "k", b"new")
    (lost,) = set(segments(store)) - before
    book.put("b", "other", b"kept")
    book.flush()  # the ledger now names the lost write's SQN
    book.abandon()
    store.delete(segments(store)[lost])
    with inkpen.open(
        store_url, allow_missing_segments=True, **UNROLLED, inline_value_bytes=0
    ) as book:
        assert book.get("b", "other") == b"kept"
        with pytest.raises(inkpen.CorruptionError, match="no journal"):
            book.get("b", "k")


def test_the_writes_after_a_lost_one_replay_as_their_journal_entries_hold_them(
    store_url: str,
) -> None:
    """A delete's journal entry removes the index entries its object had when it was written.
    When the segment of a put that removed one of them is lost, the entry the put removed comes
    back (the delete never named it), and the key put again answers for it. A put with a ttl
    likewise shortens only the entries its object had when it was written: one a lost put had
    removed comes back without an expiry."""
    book = inkpen.open(store_url, **UNROLLED)
    store = open_store(store_url)
    book.put("b", "k", b"1", indexes=[("add", "f_bin", "a"), ("add", "f_bin", "c")])
    before = set(segments(store))
    book.put("b", "k", b"2", indexes=[("remove", "f_bin", "a")])  # lost below
    (lost,) = set(segments(store)) - before
    book.delete("b", "k")  # removes (c, k): the only entry k has now
    book.put("b", "k", b"3", indexes=[("add", "f_bin", "d")])
    book.put("b", "t", b"4", indexes=[("add", "f_bin", "e")])
    before = set(segments(store))
    book.put("b", "t", b"5", indexes=[("remove", "f_bin", "e")])  # lost too
    (lost_too,) = set(segments(store)) - before
    book.put("b", "t", b"6", ttl=3600)  # names nothing, and t has no entry to shorten now
    book.put("b", "newest", b"7")
    assert list(book.index_query("b", "f_bin", "", "z", return_terms=True)) == [(b"d", b"k")]
    book.abandon()
    store.delete(segments(store)[lost])
    store.delete(segments(store)[lost_too])
    with inkpen.open(store_url, allow_missing_segments=True, **UNROLLED) as book:
        assert book.get("b", "k") == b"3"
        assert list(book.index_query("b", "f_bin", "", "z", return_terms=True)) == [
            (b"a", b"k"),
            (b"d", b"k"),
            (b"e", b"t"),
        ]


def test_info_names_a_missing_segment(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    lost, _ = crash_with_unrolled_segments(url)
    store = open_store(url)
    try:
        store.delete(lost)
    finally:
        store.close()
    ran = ok("info", url, "--json")
    journal = json.loads(ran.stdout)["journal"]
    assert journal["missing_segments"] == [parse_segment_key(lost)]
    assert re.search(rf"MISSING\s+1 segment\(s\): {parse_segment_key(lost)} ", ok("info", url).out)


def crash_with_a_torn_tail(url: str) -> tuple[int, dict[bytes, bytes]]:
    """A writer with four segments in flight: slot s is refused for good while s+1 and s+2
    land, then the writer is gone. Answers s and what was acknowledged."""
    gate = SegmentGate(open_store(url))
    book = inkpen.open(gate, **UNROLLED, segments_in_flight=4)
    book.put("b", "before", b"0")
    s = book.stats()["next_segment"]
    gate.hold(s, s + 1, s + 2)
    errors: list[inkpen.StoreError] = []

    def put(key: str) -> None:
        try:
            book.put("b", key, b"torn")
        except inkpen.StoreError as exc:
            errors.append(exc)

    threads = []
    for i, key in enumerate(("t0", "t1", "t2")):
        threads.append(threading.Thread(target=put, args=(key,)))
        threads[-1].start()
        gate.wait_arrived(s + i)
    gate.release(s + 1)
    gate.release(s + 2)
    wait_until(lambda: book.stats()["segments_waiting"] == 2, "s+1 and s+2 to land")
    gate.refusing.add(s)
    gate.release(s, "refuse")
    for thread in threads:
        thread.join(60)
    assert len(errors) == 3 and all(not e.definite for e in errors), errors
    book.abandon()
    left = set(segments(open_store(url)))
    assert s not in left and {s + 1, s + 2} <= left
    return s, {b"before": b"0"}


def test_a_torn_tail_is_not_damage(tmp_path: Path) -> None:
    """Segments in flight at a crash, the first never landed: readers, verify and info take the
    tail as cut there, the next writer fences the gap and never replays what lies above it,
    stepping over those slots."""
    url = str(tmp_path / "db")
    torn, acked = crash_with_a_torn_tail(url)
    with inkpen.open_reader(url) as reader:
        assert contents(reader, "b") == acked
    assert ok("verify", url).lines[-1].startswith("result: all ")
    assert json.loads(ok("info", url, "--json").stdout)["journal"]["missing_segments"] == []
    with capture_logs() as logs, inkpen.open(url, **UNROLLED, segments_in_flight=4) as book:
        assert contents(book, "b") == acked
        book.put("b", "after", b"1")
    (torn_tail,) = [e for e in logs if e["event"] == "journal.torn_tail"]
    assert torn_tail["never_acknowledged"] == [
        info for info in (f"journal/{i:020d}.jnl" for i in (torn + 1, torn + 2))
    ]
    stepped = [e["segment"] for e in logs if e["event"] == "journal.slot_stepped_over"]
    assert stepped == [torn + 1, torn + 2]
    expected = {**acked, b"after": b"1"}
    with inkpen.open(url, **UNROLLED) as book:
        assert contents(book, "b") == expected
    with inkpen.open_reader(url) as reader:
        assert contents(reader, "b") == expected
    assert ok("verify", url).lines[-1].startswith("result: all ")
