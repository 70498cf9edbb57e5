"""Large values are written once: a segment of at least ``roll_link_bytes`` is rolled by linking
the segment object as a journal file (a hard link, or a server-side copy on S3), not rewritten.

The store is wrapped in a :class:`~inkpen.objectstore.CountingStore`, so the bytes the writer
sends are counted exactly: a roll that rewrote the large value would send it a second time.
"""

from __future__ import annotations

import random
import threading

import pytest

import inkpen
from inkpen.actors.journal.intake import batch_limit
from inkpen.formats.journal import PREPARE_FROM, decode_journal
from inkpen.formats.keys import object_key
from inkpen.manifest.paths import parse_segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, ObjectStore
from support.engine import FakeClock

LARGE = 300 * 1024


def _journal_files(store: ObjectStore) -> list[str]:
    return [i.key for i in store.list("journal/compacted/")]


def test_a_large_value_is_written_once_and_reads_back(store: ObjectStore) -> None:
    counting = CountingStore(store)
    big = random.Random(7).randbytes(LARGE)
    model: dict[bytes, bytes] = {}
    with inkpen.open(counting, flush_policy="idle", gc_min_age=0.0) as book:
        for i in range(20):
            small = b"small-%d" % i
            book.put("b", b"s%02d" % i, small)
            model[b"s%02d" % i] = small
        book.put("b", b"big", big)
        model[b"big"] = big
        book.put("b", b"after", b"tail")
        model[b"after"] = b"tail"
    written = counting.snapshot()
    # The value crossed to the store once (its segment); the roll linked it.
    assert LARGE <= written["bytes_written"] < 2 * LARGE
    assert written["copies"] >= 1
    files = _journal_files(store)
    assert len(files) >= 2  # the small segments before it, the linked one (and the tail)
    latest = ManifestStore(store).latest()
    assert latest is not None
    names = {f.name for f in latest.manifest.journal.files}
    assert set(files) >= names
    assert latest.manifest.journal.last_rolled_segment > 0
    with inkpen.open(store, gc_min_age=0.0) as book:
        # GC removes the rolled segments; the linked journal file keeps the value.
        book.run_gc()
        assert not [
            i.key
            for i in store.list("journal/")
            if (sid := parse_segment_key(i.key)) is not None
            and sid <= latest.manifest.journal.last_rolled_segment
            and i.size > 60
        ]
        for key, value in model.items():
            assert book.get("b", key) == value
        book.compact_journal()
        for key, value in model.items():
            assert book.get("b", key) == value
    with inkpen.open(store) as book, book.objects("b") as rows:
        assert {k: v for _, k, v in rows} == model


def test_large_values_encoded_in_the_callers_thread_read_back_with_their_indexes(
    store: ObjectStore,
) -> None:
    """Values of ``PREPARE_FROM`` bytes or more are encoded in the caller's thread; what the
    writer does to a change before writing it (the index entries a ttl put reaches, a failed
    condition, a batch) still holds, and every value, index entry and expiry reads back, live
    and after a reopen (from the journal files the segments rolled into)."""
    rng = random.Random(11)
    one = rng.randbytes(LARGE)  # a segment of its own, linked: its bytes are the journal's
    two = b"compressible " * (PREPARE_FROM // 8)
    three = rng.randbytes(3 << 20)
    clock = FakeClock()
    with inkpen.open(store, flush_policy="idle", clock=clock) as book:
        book.put("b", "one", one, indexes=[("add", "size_bin", "small")])
        book.put("b", "two", two, indexes=[("add", "size_bin", "medium")], ttl=3600)
        # This ttl put reaches the index entry "one" has: the writer adds it to the change,
        # which is then encoded again (the record made in this thread does not serve it).
        book.put("b", "one", one, ttl=7200)
        with pytest.raises(inkpen.ConflictError):
            book.put("b", "two", three, if_sqn=0)
        batch = inkpen.Batch()
        batch.put("b", "three", three, indexes=[("add", "size_bin", "large")])
        batch.put("b", "four", two)
        book.write(batch)
        book.delete("b", "four")
        live = {key: book.get("b", key) for key in ("one", "two", "three", "four")}
        heads = {key: book.head("b", key) for key in ("one", "two", "three")}
    assert live == {"one": one, "two": two, "three": three, "four": None}
    # The journal holds the change as the writer made it: the ttl put carries the spec it
    # reached (replay, journal compaction and copies rebuild index entries from it).
    entries = [
        entry
        for name in _journal_files(store)
        for entry in decode_journal(store.get(name), name)[1]
        if entry.ledger_key == object_key(b"b", b"one") and entry.expiry_ms is not None
    ]
    assert [(e.value, [spec[1:] for spec in e.index_specs]) for e in entries] == [
        (one, [(b"size_bin", b"small")])
    ]
    with inkpen.open(store, clock=clock) as book:
        assert {key: book.get("b", key) for key in live} == live
        assert {key: book.head("b", key) for key in heads} == heads
        assert list(book.index_query("b", "size_bin", "a", "z")) == [b"three", b"two", b"one"]
        clock.advance(3601)  # "two" and its index entry expire
        assert list(book.index_query("b", "size_bin", "a", "z")) == [b"three", b"one"]
        clock.advance(3600)  # so do "one" and the entry its ttl put reached
        assert list(book.index_query("b", "size_bin", "a", "z")) == [b"three"]
        assert [book.get("b", key) for key in ("one", "two", "three")] == [None, None, three]


def test_large_values_share_a_segment_up_to_the_stores_batch_bytes(
    store_url: str, store_kind: str
) -> None:
    """Group commit by bytes: by default a batch is written once it holds 32 MiB on a local
    directory or in memory (one write and one fsync for many large values) and 4 MiB on an
    object store (a segment is one request). With a flush interval far longer than the test,
    only a full batch is written: 32 puts of 1 MiB make one segment or eight."""
    value = random.Random(5).randbytes(1 << 20)
    with inkpen.open(store_url, flush_policy="interval", flush_interval=60.0) as book:
        book.put("b", "first", b"x")  # written at once: no write began in the last interval
        before = book.stats()["segments_written"]
        threads = [
            threading.Thread(target=book.put, args=("b", f"k{i:02}", value)) for i in range(32)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        if any(thread.is_alive() for thread in threads):
            book.flush()  # release them, then fail below
        written = book.stats()["segments_written"] - before
        assert [book.get("b", f"k{i:02}") for i in range(32)] == [value] * 32
    assert written == (8 if store_kind == "s3" else 1)
    assert batch_limit(None, local=True) == 32 << 20
    assert batch_limit(None, local=False) == 4 << 20
    assert batch_limit(5000, local=True) == batch_limit(5000, local=False) == 5000
