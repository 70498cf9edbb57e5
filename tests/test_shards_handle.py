"""The ShardedBookie against a dict model: a Hypothesis state machine over a 3-shard data set
(puts, deletes, gets, get_many, folds in key order, single-shard batches and the refusal of
cross-shard ones, reopens), owned-shard refusals, many threads writing through one handle, and a
round trip on every kind of store (memory, local directory, SeaweedFS)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import inkpen
from inkpen import shards
from inkpen.errors import NotFoundError, UsageError
from inkpen.objectstore.memory import drop_space
from support.profiles import machine_settings
from support.waiting import wait_until

SHARDS = 3
BUCKETS = ("b0", "b1")
KEYS = tuple(f"k{i}" for i in range(12))
TERMS = ("a", "b", "c")
FIELD = "t_bin"

Model = dict[tuple[bytes, bytes], tuple[bytes, bytes]]
"""(bucket, key) -> (value, index term)."""


def _enc(text: str) -> bytes:
    return text.encode()


class ShardedMachine(RuleBasedStateMachine):
    """One data set of 3 shards on the memory store, driven through one ShardedBookie."""

    def __init__(self) -> None:
        super().__init__()
        self.space = f"shards-{uuid.uuid4().hex}"
        self.url = f"memory://{self.space}"
        self.model: Model = {}
        self.book: shards.ShardedBookie | None = None

    @initialize()
    def create(self) -> None:
        shards.create(self.url, shards=SHARDS)
        self.book = shards.open(self.url)

    def teardown(self) -> None:
        if self.book is not None:
            self.book.close()
        drop_space(self.space)

    @property
    def handle(self) -> shards.ShardedBookie:
        assert self.book is not None
        return self.book

    # -- writes -------------------------------------------------------------------------------

    @rule(
        bucket=st.sampled_from(BUCKETS),
        key=st.sampled_from(KEYS),
        value=st.binary(max_size=20),
        term=st.sampled_from(TERMS),
    )
    def put(self, bucket: str, key: str, value: bytes, term: str) -> None:
        old = self.model.get((_enc(bucket), _enc(key)))
        specs = [("add", FIELD, term)]
        if old is not None and old[1] != _enc(term):
            specs.append(("remove", FIELD, old[1].decode()))
        self.handle.put(bucket, key, value, indexes=specs)
        self.model[(_enc(bucket), _enc(key))] = (value, _enc(term))

    @rule(bucket=st.sampled_from(BUCKETS), key=st.sampled_from(KEYS))
    def delete(self, bucket: str, key: str) -> None:
        self.handle.delete(bucket, key)
        self.model.pop((_enc(bucket), _enc(key)), None)

    @rule(
        changes=st.lists(
            st.tuples(st.sampled_from(BUCKETS), st.sampled_from(KEYS), st.binary(max_size=8)),
            min_size=1,
            max_size=6,
        )
    )
    def batch(self, changes: list[tuple[str, str, bytes]]) -> None:
        batch = inkpen.Batch()
        for bucket, key, value in changes:
            if value == b"":
                batch.delete(bucket, key, indexes=[])
            else:
                batch.put(bucket, key, value)
        targets = {shards.shard_of(b, k, SHARDS) for b, k, _ in changes}
        if len(targets) > 1:
            with pytest.raises(UsageError, match=f"route to {len(targets)} shards"):
                self.handle.write(batch)
            return  # refused: nothing written
        self.handle.write(batch)
        for bucket, key, value in changes:
            lk = (_enc(bucket), _enc(key))
            if value == b"":
                self.model.pop(lk, None)
            else:  # a batch put without indexes keeps the object's earlier terms
                old = self.model.get(lk)
                self.model[lk] = (value, old[1] if old else b"")

    @rule(bucket=st.sampled_from(BUCKETS))
    def single_shard_batch(self, bucket: str) -> None:
        """A batch built from keys that share a shard always goes through."""
        target = shards.shard_of(bucket, KEYS[0], SHARDS)
        chosen = [k for k in KEYS if shards.shard_of(bucket, k, SHARDS) == target][:3]
        batch = inkpen.Batch()
        for key in chosen:
            batch.put(bucket, key, b"batch-" + key.encode())
        self.handle.write(batch)
        for key in chosen:
            lk = (_enc(bucket), _enc(key))
            old = self.model.get(lk)
            self.model[lk] = (b"batch-" + key.encode(), old[1] if old else b"")

    @precondition(lambda self: self.book is not None)
    @rule(flush=st.booleans())
    def reopen(self, flush: bool) -> None:
        if flush:
            self.handle.flush()
        self.handle.close()
        with pytest.raises(UsageError, match="closed"):
            self.handle.get("b0", "k0")
        self.book = shards.open(self.url)

    # -- reads --------------------------------------------------------------------------------

    @rule(bucket=st.sampled_from(BUCKETS), key=st.sampled_from(KEYS))
    def get(self, bucket: str, key: str) -> None:
        found = self.model.get((_enc(bucket), _enc(key)))
        assert self.handle.get(bucket, key) == (found[0] if found else None)
        head = self.handle.head(bucket, key)
        assert (head is None) == (found is None)

    @rule(bucket=st.sampled_from(BUCKETS), keys=st.lists(st.sampled_from(KEYS), max_size=10))
    def get_many(self, bucket: str, keys: list[str]) -> None:
        expected = [
            found[0] if (found := self.model.get((_enc(bucket), _enc(k)))) else None for k in keys
        ]
        assert self.handle.get_many(bucket, keys) == expected

    @rule(
        bucket=st.sampled_from(BUCKETS),
        start=st.one_of(st.none(), st.sampled_from(KEYS)),
        reverse=st.booleans(),
    )
    def fold_keys(self, bucket: str, start: str | None, reverse: bool) -> None:
        expected = sorted(
            (k for b, k in self.model if b == _enc(bucket) and (start is None or k >= _enc(start))),
            reverse=reverse,
        )
        with self.handle.keys(bucket, start, reverse=reverse) as found:
            assert list(found) == expected

    @rule(reverse=st.booleans())
    def fold_objects(self, reverse: bool) -> None:
        expected = sorted(((b, k, v) for (b, k), (v, _t) in self.model.items()), reverse=reverse)
        with self.handle.objects(reverse=reverse) as found:
            assert list(found) == expected
        heads = [(b, k) for b, k, _h in self.handle.heads(reverse=reverse)]
        assert heads == [(b, k) for b, k, _v in expected]

    @rule(
        bucket=st.sampled_from(BUCKETS),
        lo=st.sampled_from(TERMS),
        hi=st.sampled_from(TERMS),
        return_terms=st.booleans(),
    )
    def index_query(self, bucket: str, lo: str, hi: str, return_terms: bool) -> None:
        lo, hi = min(lo, hi), max(lo, hi)
        pairs = sorted(
            (t, k)
            for (b, k), (_v, t) in self.model.items()
            if b == _enc(bucket) and _enc(lo) <= t <= _enc(hi)
        )
        found = list(self.handle.index_query(bucket, FIELD, lo, hi, return_terms=return_terms))
        assert found == (pairs if return_terms else [k for _t, k in pairs])

    @rule()
    def buckets_and_emptiness(self) -> None:
        assert list(self.handle.buckets()) == sorted({b for b, _k in self.model})
        assert self.handle.is_empty() == (not self.model)

    @invariant()
    def every_shard_holds_only_its_keys(self) -> None:
        if self.book is None:
            return
        for index in range(SHARDS):
            for bucket, key, _v in self.handle.shard(index).objects():
                assert shards.shard_of(bucket, key, SHARDS) == index


def test_sharded_bookie_agrees_with_a_dict() -> None:
    run_state_machine_as_test(ShardedMachine, settings=machine_settings("shards"))


# -- owned shards ---------------------------------------------------------------------------------


def _key_in(shard: int, count: int, bucket: str = "b") -> str:
    return next(k for i in range(1000) if shards.shard_of(bucket, (k := f"k{i}"), count) == shard)


def test_writes_to_shards_not_owned_are_refused_and_reads_follow_their_writer(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("local")
    shards.create(url, shards=3)
    mine, theirs = _key_in(0, 3), _key_in(2, 3)
    with shards.open(url, shards=[0, 1]) as first, shards.open(url, shards={2}) as second:
        assert first.owned_shards == frozenset({0, 1})
        first.put("b", mine, b"mine")
        second.put("b", theirs, b"theirs")
        with pytest.raises(UsageError, match="routes to shard 2, which this handle does not"):
            first.put("b", theirs, b"x")
        with pytest.raises(UsageError, match="routes to shard 2"):
            first.delete("b", theirs)
        batch = inkpen.Batch().put("b", theirs, b"x")
        with pytest.raises(UsageError, match="routes to shard 2"):
            first.write(batch)
        # Shard 2 is read through a following Reader: it sees the other writer's write.
        first.refresh()
        assert first.get("b", theirs) == b"theirs"
        second.put("b", theirs, b"newer")
        first.refresh()
        wait_until(lambda: first.get("b", theirs) == b"newer", "the Reader to follow shard 2")
        assert second.get("b", mine) == b"mine"
        assert list(first.keys("b")) == sorted([mine.encode(), theirs.encode()])
    with shards.open(url) as every:
        assert every.get("b", theirs) == b"newer"
        assert every.get("b", mine) == b"mine"


@pytest.mark.parametrize(
    ("owned", "message"),
    [
        ([3], "shards names 3"),
        ([-1], "shards names -1"),
        (["0"], "shards names '0'"),
        ([True], "shards names True"),
        ("01", "an iterable of shard numbers"),
        (7, "an iterable of shard numbers"),
    ],
)
def test_bad_owned_shards_are_usage_errors(
    make_store_url: Callable[[str], str], owned: object, message: str
) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=3)
    with pytest.raises(UsageError, match=message):
        shards.open(url, shards=owned)  # type: ignore[arg-type]


def test_open_refuses_what_is_not_a_data_set(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("memory")
    with pytest.raises(NotFoundError, match=r"create one with inkpen\.shards\.create"):
        shards.open(url)
    with inkpen.open(url) as book:
        book.put("b", "k", b"v")
    with pytest.raises(NotFoundError, match="holds a plain inkpen database"):
        shards.open(url)


def test_bad_calls_are_usage_errors_and_change_nothing(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=3)
    with shards.open(url) as book:
        with pytest.raises(UsageError, match="bucket must not be empty"):
            book.put("", "k", b"v")
        with pytest.raises(UsageError, match="key must be str or bytes"):
            book.get("b", 5)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="not one key"):
            book.get_many("b", "k")
        with pytest.raises(UsageError, match="key order only"):
            book.objects(order="sqn")
        with pytest.raises(UsageError, match="a shard number of this data set"):
            book.changes(shard=3)
        with pytest.raises(UsageError, match=r"takes an inkpen\.Batch"):
            book.write([("b", "k")])  # type: ignore[arg-type]
        assert book.is_empty()
        book.write(inkpen.Batch())  # an empty batch is a no-op


def test_heads_take_the_bookies_filters(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=3)
    keys = sorted(f"k{i:02d}".encode() for i in range(20))
    with shards.open(url) as book:
        for key in keys:
            book.put("b", key, key)
        assert [k for _b, k, _h in book.heads("b", max_objects=7)] == keys[:7]
        assert [k for _b, k, _h in book.heads("b", max_objects=7, reverse=True)] == keys[::-1][:7]
        tree = book.shard(0).tictac_tree("b")
        some = next(iter(tree.compare(inkpen.TicTacTree())))  # a segment shard 0 has keys in
        in_segment = [k for _b, k, _h in book.heads("b", segments=[some])]
        expected = sorted(
            k for i in range(3) for _b, k, _h in book.shard(i).heads("b", segments=[some])
        )
        assert in_segment == expected
        assert in_segment and set(in_segment) < set(keys)
        with pytest.raises(UsageError, match="max_objects"):
            book.heads("b", max_objects=-1)


def test_changes_are_per_shard(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=2)
    keys = [f"k{i}" for i in range(10)]
    with shards.open(url) as book:
        for key in keys:
            book.put("b", key, key.encode())
        seen: list[bytes] = []
        for index in range(2):
            for change in book.changes(shard=index):
                assert shards.shard_of(change.bucket, change.key, 2) == index
                seen.append(change.key)
        assert sorted(seen) == sorted(k.encode() for k in keys)


# -- threads ------------------------------------------------------------------------------


def test_threads_writing_through_one_handle(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=4)
    threads_n, per_thread = 8, 25
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)
    with shards.open(url) as book:

        def writer(t: int) -> None:
            start.wait()  # every thread races to open the shards at once
            try:
                for i in range(per_thread):
                    book.put("b", f"t{t}-{i:03d}", f"{t}:{i:03d}".encode())
                    assert book.get("b", f"t{t}-{i:03d}") == f"{t}:{i:03d}".encode()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        expected = sorted(
            f"t{t}-{i:03d}".encode() for t in range(threads_n) for i in range(per_thread)
        )
        assert list(book.keys("b")) == expected
    with shards.open(url) as again:
        values = again.get_many("b", [k.decode() for k in expected])
        assert values == [k.decode().removeprefix("t").replace("-", ":").encode() for k in expected]


# -- every kind of store ------------------------------------------------------------------


def test_round_trip_on_every_store(store_url: str) -> None:
    shards.create(store_url, shards=3)
    written = {f"k{i:02d}": f"v{i}".encode() for i in range(24)}
    with shards.open(store_url) as book:
        for key, value in written.items():
            book.put("b", key, value, indexes=[("add", FIELD, value)])
        book.delete("b", "k05")
        del written["k05"]
    with shards.open(store_url) as book:
        assert book.get_many("b", sorted(written)) == [written[k] for k in sorted(written)]
        assert list(book.keys("b")) == sorted(k.encode() for k in written)
        in_range = sorted((v, k.encode()) for k, v in written.items() if b"v1" <= v <= b"v2")
        assert list(book.index_query("b", FIELD, "v1", "v2")) == [k for _v, k in in_range]
    for index in range(3):  # each shard is a database of its own, holding its keys only
        with inkpen.open_reader(shards.shard_url(store_url, index)) as reader:
            held = [k.decode() for k in reader.keys("b")]
            assert held == sorted(k for k in written if shards.shard_of("b", k, 3) == index)
