"""Reads read what they need: a cold get of a small value and a key-order scan, counted in bytes
read from the store (a :class:`CountingStore` under the Bookie), with every value checked against
what was written."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

import inkpen
from inkpen.formats.journal import INDEX_BLOCK
from inkpen.objectstore import CountingStore, ObjectStore, open_store

OBJECTS = 6000
VALUE_BYTES = 100
WRITERS = 32
COLD_GET_LIMIT = 16 * 1024


def load(url: str, **options: object) -> dict[bytes, bytes]:
    """OBJECTS puts of VALUE_BYTES-byte values from WRITERS threads, shuffled keys; the model."""
    keys = [b"key%08d" % i for i in range(OBJECTS)]
    random.Random(5).shuffle(keys)
    model = {key: random.Random(key).randbytes(VALUE_BYTES) for key in keys}
    errors: list[BaseException] = []
    with inkpen.open(url, flush_policy="idle", **options) as book:

        def write(share: list[bytes]) -> None:
            try:
                for key in share:
                    book.put("b", key, model[key])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(keys[i::WRITERS],)) for i in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Merged now: the next writer has no merge of its own reading beside the reads measured.
        book.flush()
        book.compact_ledger()
    assert not errors
    return model


def stored_bytes(store: ObjectStore, prefix: str) -> int:
    return sum(info.size for info in store.list(prefix))


@pytest.fixture
def local_url(make_store_url: Callable[[str], str]) -> str:
    return make_store_url("local")


def test_a_cold_get_of_a_small_value_reads_at_most_16_kib(local_url: str) -> None:
    model = load(local_url)
    store = CountingStore(open_store(local_url))
    try:
        # Small values live in the ledger (its blocks are what a cold get reads): enough of it
        # that the gets cannot all find their blocks cached by the open.
        assert stored_bytes(store, "ledger/") > 3 * 256 * 1024
        with inkpen.open(store) as book:
            # Merges the load left due and the GC pass the open started read through the same
            # counting store: let them finish (a GC pass asked for now runs after the open's),
            # so that what is counted around each get is the get's.
            book.compact_ledger()
            book.run_gc()
            sample = random.Random(6).sample(sorted(model), 300)
            per_get = []
            for key in sample:
                before = store.snapshot()["bytes_read"]
                assert book.get("b", key) == model[key]
                per_get.append(store.snapshot()["bytes_read"] - before)
    finally:
        store.close()
    assert max(per_get) <= COLD_GET_LIMIT, sorted(per_get)[-5:]
    assert sum(per_get) > 0  # the gets did read from the store: they were cold


def test_a_cold_get_of_a_journal_value_makes_one_read_of_one_block(local_url: str) -> None:
    """Values kept out of the ledger (``inline_value_bytes=0``): once the ledger block naming the
    value's SQN is cached (a head read it), the get reads the journal once, one block of about
    4 KiB (the SQN block index was read when the file was opened)."""
    options = {"inline_value_bytes": 0, "journal_cache_bytes": 0}  # every get is cold
    model = load(local_url, **options)
    store = CountingStore(open_store(local_url))
    try:
        with inkpen.open(store, **options) as book:
            book.compact_ledger()
            book.run_gc()
            for key in random.Random(7).sample(sorted(model), 200):
                assert book.head("b", key) is not None  # its ledger block, now cached
                before = store.snapshot()
                assert book.get("b", key) == model[key]
                after = store.snapshot()
                assert after["gets"] - before["gets"] == 1
                assert 0 < after["bytes_read"] - before["bytes_read"] <= INDEX_BLOCK
    finally:
        store.close()


def test_a_get_of_a_large_value_reads_its_record_once_in_parts(local_url: str) -> None:
    """A record of ``PARTS_FROM`` bytes or more is read in parts on a local directory: its head,
    its body straight into the bytes the get answers, its CRC; three ranges of one request,
    past the journal cache, which read the record's bytes once."""
    values = {
        b"medium": random.Random(1).randbytes(300 * 1024),
        b"large": random.Random(2).randbytes(5 << 20),
        b"small": b"s" * 100,
    }
    with inkpen.open(local_url) as book:
        for key, value in values.items():
            book.put("b", key, value)
        book.flush()  # memory to L0, then merged: the next writer has nothing to merge
        book.compact_ledger()
    store = CountingStore(open_store(local_url))
    try:
        with inkpen.open(store) as book:
            book.run_gc()  # the GC pass the open started reads through the same store
            for _ in range(2):  # the second get reads as much: nothing large is cached
                for key in (b"medium", b"large"):
                    assert book.head("b", key) is not None  # its ledger block, now cached
                    before = store.snapshot()
                    assert book.get("b", key) == values[key]
                    after = store.snapshot()
                    assert after["gets"] - before["gets"] == 3
                    read = after["bytes_read"] - before["bytes_read"]
                    assert len(values[key]) + 4 < read <= len(values[key]) + 100  # the record
    finally:
        store.close()


def scan_after_load(
    url: str, options: dict[str, int], part: tuple[bytes, bytes] = (b"", b"")
) -> tuple[dict[bytes, bytes], list[tuple[bytes, bytes]], list[tuple[bytes, bytes]], int, int]:
    """Load, reopen over a counting store and scan: (the model, the whole scan, the scan of
    ``part`` (start, end; none when empty), the bytes the whole scan read, the bytes of the
    journal and the ledger on the store)."""
    model = load(url, **options)
    store = CountingStore(open_store(url))
    try:
        stored = stored_bytes(store, "journal/") + stored_bytes(store, "ledger/")
        with inkpen.open(store, **options) as book:
            before = store.snapshot()["bytes_read"]
            with book.objects("b") as rows:
                got = [(key, value) for _, key, value in rows]
            scanned = store.snapshot()["bytes_read"] - before
            parted: list[tuple[bytes, bytes]] = []
            if part[0]:
                with book.objects("b", start=part[0], end=part[1]) as rows:
                    parted = [(key, value) for _, key, value in rows]
    finally:
        store.close()
    return model, got, parted, scanned, stored


def test_a_key_order_scan_reads_each_journal_byte_at_most_once(local_url: str) -> None:
    options = {"journal_cache_bytes": 512 * 1024, "journal_chunk_bytes": 256 * 1024}
    model, got, part, scanned, stored = scan_after_load(
        local_url, options, (b"key00001000", b"key00001999")
    )
    assert got == sorted(model.items())
    assert part == [
        (key, model[key]) for key in sorted(model) if b"key00001000" <= key <= b"key00001999"
    ]
    assert scanned <= stored, (scanned, stored)


def test_a_scan_in_small_windows_batches_and_budgets_answers_every_value(
    local_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan's planning at its edges: windows of a few hundred rows, batches of a few
    reads, a keep budget that runs out early, through an index cache of a few pages."""
    from inkpen.actors.read import path

    monkeypatch.setattr(path, "SCAN_WINDOW", 700)
    monkeypatch.setattr(path, "SCAN_BATCH", 2048)
    monkeypatch.setattr(path, "SCAN_KEEP_BYTES", 64 * 1024)
    monkeypatch.setattr(path, "SCAN_GAP", 1024)
    options = {"journal_cache_bytes": 256 * 1024, "journal_index_cache_bytes": 8 * 1024}
    model, got, _, scanned, stored = scan_after_load(local_url, options)
    assert got == sorted(model.items())
    # Slot pages are read per window now (the index cache holds 8 of them), records once.
    assert scanned <= 2 * stored, (scanned, stored)
