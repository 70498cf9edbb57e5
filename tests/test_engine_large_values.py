"""Large values are written once: a segment of at least ``roll_link_bytes`` is rolled by linking
the segment object as a journal file (a hard link, or a server-side copy on S3), not rewritten.

The store is wrapped in a :class:`~inkpen.objectstore.CountingStore`, so the bytes the writer
sends are counted exactly: a roll that rewrote the large value would send it a second time.
"""

from __future__ import annotations

import random

import inkpen
from inkpen.manifest.paths import parse_segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, ObjectStore

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
