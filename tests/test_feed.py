"""The change feed: Bookie.changes / Reader.changes against a model of every write, in SQN order;
gaps that journal compaction leaves, and feed cursors that prevent them."""

from __future__ import annotations

import random

import pytest

import inkpen
from support.engine import TINY

Logged = list[tuple[str, str, str, bytes | None]]


def write_some(book: inkpen.Bookie, n: int, seed: int = 7) -> Logged:
    """Random puts and deletes over a few buckets; answers the model log (bucket, key, kind,
    value)."""
    rng = random.Random(seed)
    log: Logged = []
    for i in range(n):
        bucket = rng.choice(["a", "b", "c"])
        key = f"k{rng.randrange(20):02d}"
        if rng.random() < 0.2:
            book.delete(bucket, key)
            log.append((bucket, key, "delete", None))
        else:
            value = f"v{i}".encode() * rng.randrange(1, 40)
            book.put(bucket, key, value, indexes=[("add", "f", f"t{i}")])
            log.append((bucket, key, "put", value))
    return log


def as_model(changes: list[inkpen.Change]) -> Logged:
    return [(c.bucket.decode(), c.key.decode(), c.kind, c.value) for c in changes]


def test_feed_gives_every_change_in_sqn_order(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        log = write_some(book, 120)
        changes = list(book.changes())
        assert as_model(changes) == log
        sqns = [c.sqn for c in changes]
        assert sqns == list(range(sqns[0], sqns[0] + len(sqns)))
        assert all(isinstance(c, inkpen.Change) for c in changes)
        put = next(c for c in changes if c.kind == "put")
        assert put.indexes == (("add", b"f", f"t{sqns.index(put.sqn)}".encode()),)
        assert put.last_modified > 0
        with pytest.raises(AttributeError):
            put.sqn = 5  # type: ignore[misc]
        # since: exactly the changes above it
        middle = sqns[50]
        assert as_model(list(book.changes(middle))) == log[51:]
        assert list(book.changes(sqns[-1])) == []
        # bucket filter: that bucket's changes, still in order
        assert as_model(list(book.changes(bucket="b"))) == [e for e in log if e[0] == "b"]
        assert as_model(list(book.changes(middle, bucket=b"c"))) == [
            e for e in log[51:] if e[0] == "c"
        ]
    # after close everything is rolled into journal files; a Reader sees the same feed
    with inkpen.open_reader(store_url) as reader:
        assert as_model(list(reader.changes())) == log
        assert as_model(list(reader.changes(middle, bucket="a"))) == [
            e for e in log[51:] if e[0] == "a"
        ]


def test_concurrent_puts_share_segments_and_keep_sqn_order(store_url: str) -> None:
    import threading

    with inkpen.open(store_url, **TINY) as book:

        def writer(t: int) -> None:
            for i in range(30):
                book.put("t", f"{t}-{i}", f"{t}:{i}".encode())

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        changes = list(book.changes())
    assert [c.sqn for c in changes] == list(range(1, 121))
    assert {(c.key, c.value) for c in changes} == {
        (f"{t}-{i}".encode(), f"{t}:{i}".encode()) for t in range(4) for i in range(30)
    }
    for t in range(4):  # each thread's own puts in its order
        mine = [c.key for c in changes if c.key.startswith(f"{t}-".encode())]
        assert mine == [f"{t}-{i}".encode() for i in range(30)]


def test_bad_arguments_are_usage_errors(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for since in (-1, "3", 1.5, True):
            with pytest.raises(inkpen.UsageError):
                book.changes(since)  # type: ignore[arg-type]
        with pytest.raises(inkpen.UsageError):
            book.changes(gaps="ignore")  # type: ignore[arg-type]
        with pytest.raises(inkpen.UsageError):
            book.changes(bucket=5)  # type: ignore[arg-type]


def overwrite_and_compact(book: inkpen.Bookie) -> None:
    for round_ in range(4):
        for i in range(60):
            book.put("r", f"k{i:02d}", f"{round_}".encode() * 50)
    book.flush()
    book.compact_ledger()
    for _ in range(20):
        if not book.compact_journal().compacted:
            break


@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_compaction_gap_raises_unless_skipped(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        overwrite_and_compact(book)
        with pytest.raises(inkpen.FeedGapError) as caught:
            list(book.changes())
        assert caught.value.sqn == 1  # round 0 was replaced, so compaction dropped SQN 1
        assert "SQN 1" in str(caught.value)
        survivors = list(book.changes(gaps="skip"))
        # exactly the current values survive, in SQN order
        assert [c.sqn for c in survivors] == sorted(c.sqn for c in survivors)
        latest = {c.key: c.value for c in survivors}
        assert latest == {f"k{i:02d}".encode(): b"3" * 50 for i in range(60)}
        # from the last round on there is no gap
        assert len(list(book.changes(180))) == 60
