"""The Bookie's API on every store: writes, reads, TTL, indexes, folds, reopen, many threads."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest

import inkpen
from support.engine import TINY, FakeClock, contents


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def book(store_url: str, clock: FakeClock) -> Iterator[inkpen.Bookie]:
    with inkpen.open(store_url, clock=clock, **TINY) as opened:
        yield opened


def test_put_get_head_overwrite_delete(book: inkpen.Bookie) -> None:
    assert book.get("users", "alice") is None
    assert book.head("users", "alice") is None
    book.put("users", "alice", b"v1")
    first = book.head("users", "alice")
    assert book.get("users", "alice") == b"v1"
    assert first is not None and first.size == 2
    book.put("users", "alice", b"version two")
    second = book.head("users", "alice")
    assert book.get("users", "alice") == b"version two"
    assert second is not None and second.sqn > first.sqn and second.size == 11
    assert second.content_hash != first.content_hash
    book.delete("users", "alice")
    assert book.get("users", "alice") is None
    assert book.head("users", "alice") is None
    book.put("users", "alice", b"back")
    assert book.get("users", "alice") == b"back"


def test_str_and_bytes_name_the_same_object(book: inkpen.Bookie) -> None:
    book.put("b", "k", b"1")
    assert book.get(b"b", b"k") == b"1"
    book.put(b"b", "\u00e9", b"2")
    assert book.get("b", "\u00e9".encode()) == b"2"


def test_empty_value_and_large_value(book: inkpen.Bookie) -> None:
    big = random.Random(7).randbytes(3 * 1024 * 1024)
    book.put("b", "empty", b"")
    book.put("b", "big", big)
    assert book.get("b", "empty") == b""
    assert book.get("b", "big") == big


def test_ttl_expiry_follows_the_clock(book: inkpen.Bookie, clock: FakeClock) -> None:
    book.put("sessions", "s1", b"token", ttl=60, indexes=[("add", "user_bin", "alice")])
    book.put("sessions", "s2", b"forever")
    head = book.head("sessions", "s1")
    assert head is not None and head.expires_at == pytest.approx(clock() + 60)
    clock.advance(59)
    assert book.get("sessions", "s1") == b"token"
    assert list(book.index_query("sessions", "user_bin", "a", "z")) == [b"s1"]
    clock.advance(2)
    assert book.get("sessions", "s1") is None
    assert book.head("sessions", "s1") is None
    assert list(book.keys("sessions")) == [b"s2"]
    assert list(book.index_query("sessions", "user_bin", "a", "z")) == []


def test_index_specs_are_stored_and_queried(book: inkpen.Bookie) -> None:
    book.put("users", "alice", b"a", indexes=[("add", "email_bin", "alice@example.com")])
    book.put("users", "bob", b"b", indexes=[("add", "email_bin", "bob@example.com")])
    book.put("users", "carol", b"c", indexes=[("add", "email_bin", "carol@example.org")])
    assert list(book.index_query("users", "email_bin", "a", "c")) == [b"alice", b"bob"]
    assert list(book.index_query("users", "email_bin", "a", "z", regex=r"\.org$")) == [b"carol"]
    assert list(book.index_query("users", "email_bin", "b", "bz", return_terms=True)) == [
        (b"bob@example.com", b"bob")
    ]
    book.put(
        "users",
        "bob",
        b"b2",
        indexes=[
            ("remove", "email_bin", "bob@example.com"),
            ("add", "email_bin", "rob@example.com"),
        ],
    )
    assert list(book.index_query("users", "email_bin", "a", "z")) == [b"alice", b"carol", b"bob"]
    book.delete("users", "alice", indexes=[("remove", "email_bin", "alice@example.com")])
    assert list(book.index_query("users", "email_bin", "a", "z", return_terms=True)) == [
        (b"carol@example.org", b"carol"),
        (b"rob@example.com", b"bob"),
    ]


def test_folds_see_merged_state_across_flushes(book: inkpen.Bookie) -> None:
    model: dict[bytes, bytes] = {}
    rng = random.Random(1)
    for i in range(300):
        key = f"k{rng.randrange(120):03d}".encode()
        if rng.random() < 0.2:
            book.delete("b", key)
            model.pop(key, None)
        else:
            value = f"v{i}".encode()
            book.put("b", key, value)
            model[key] = value
    book.put("other", "x", b"y")
    stats = book.stats()
    assert stats["l0_writes"] > 0 and stats["journal_files"] > 0
    assert contents(book, "b") == model
    assert list(book.keys("b")) == sorted(model)
    assert list(book.keys("b", "k010", "k019")) == sorted(
        k for k in model if b"k010" <= k <= b"k019"
    )
    heads = {key: head.size for _, key, head in book.heads("b")}
    assert heads == {k: len(v) for k, v in model.items()}
    in_sqn_order = [(k, v) for _, k, v in book.objects("b", order="sqn")]
    assert dict(in_sqn_order) == model
    assert list(book.buckets()) == [b"b", b"other"]
    assert not book.is_empty()


def test_reopen_keeps_everything(store_url: str, clock: FakeClock) -> None:
    model = {}
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        for i in range(150):
            key = f"k{i % 70}"
            book.put("b", key, f"v{i}".encode(), indexes=[("add", "n_int", f"{i:05d}")])
            model[key.encode()] = f"v{i}".encode()
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        assert contents(book, "b") == model
        assert book.get("b", "k5") == model[b"k5"]
        assert len(list(book.index_query("b", "n_int", "00000", "99999"))) == 150
        assert book.stats()["writer_epoch"] == 2


def test_many_threads_write_and_read_at_once(store_url: str) -> None:
    errors: list[BaseException] = []
    threads = 16
    per_thread = 40
    with inkpen.open(store_url, **TINY) as book:

        def work(index: int) -> None:
            try:
                for n in range(per_thread):
                    key = f"t{index}-{n}"
                    book.put("mt", key, key.encode())
                    assert book.get("mt", key) == key.encode()
                    if n:
                        previous = f"t{index}-{n - 1}"
                        assert book.get("mt", previous) == previous.encode()
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, errors[0]
        assert sum(1 for _ in book.keys("mt")) == threads * per_thread
        stats = book.stats()
        assert stats["segments_written"] < threads * per_thread


def test_snapshot_sees_its_own_moment(book: inkpen.Bookie) -> None:
    for i in range(50):
        book.put("b", f"k{i:02d}", b"old")
    with book.snapshot() as snap:
        for i in range(50):
            book.put("b", f"k{i:02d}", b"new")
        book.delete("b", "k00")
        book.put("b", "extra", b"new")
        assert snap.get("b", "k00") == b"old"
        assert contents(snap, "b") == {f"k{i:02d}".encode(): b"old" for i in range(50)}
    assert book.get("b", "k01") == b"new" and book.get("b", "k00") is None
    with pytest.raises(inkpen.UsageError):
        snap.get("b", "k01")
