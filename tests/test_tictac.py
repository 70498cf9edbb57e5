"""Tictac trees: the pure tree (compare, merge, serialization) against a model, and the trees and
filtered head folds a Bookie, a Snapshot and a Reader build from their ledgers."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inkpen
from inkpen import TicTacTree
from inkpen.errors import CorruptionError, UsageError
from inkpen.formats import tictac
from inkpen.formats.keys import content_hash
from support.engine import TINY, FakeClock

keys = st.binary(min_size=1, max_size=12)
hashes = st.integers(min_value=0, max_value=2**64 - 1)
stores = st.dictionaries(st.tuples(st.sampled_from([b"a", b"b\x00"]), keys), hashes, max_size=40)


Model = dict[tuple[bytes, bytes], int]
"""A store's content as the tree sees it: a hash per (bucket, key)."""


def tree_of(model: Model) -> TicTacTree:
    tree = TicTacTree()
    for (bucket, key), digest in model.items():
        tree.add(bucket, key, digest)
    return tree


def differing_segments(a: Model, b: Model) -> set[int]:
    """The oracle: segments of every key added, removed or changed between two models."""
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    return {TicTacTree.segment_of(bucket, key) for bucket, key in changed}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=stores, removed=st.data(), added=stores, changed=st.data())
def test_compare_reports_exactly_the_segments_of_the_changes(
    base: Model, removed: st.DataObject, added: Model, changed: st.DataObject
) -> None:
    other = dict(base)
    for k in removed.draw(st.lists(st.sampled_from(sorted(base)), unique=True)) if base else []:
        del other[k]
    other.update(added)
    if other:
        for k in changed.draw(st.lists(st.sampled_from(sorted(other)), unique=True)):
            other[k] = (other[k] + 1) % 2**64
    expected = sorted(differing_segments(base, other))
    a, b = tree_of(base), tree_of(other)
    assert a.compare(b) == expected
    assert b.compare(a) == expected
    assert (a == b) == (not expected)


@settings(max_examples=100, deadline=None)
@given(model=stores, order=st.randoms(use_true_random=False))
def test_trees_are_order_independent_incremental_and_merge(
    model: Model, order: random.Random
) -> None:
    items = list(model.items())
    order.shuffle(items)
    assert tree_of(dict(items)) == tree_of(model)
    half = len(items) // 2
    merged = tree_of(dict(items[:half])).merge(tree_of(dict(items[half:])))
    assert merged == tree_of(model)
    shrinking = tree_of(model)
    for (bucket, key), digest in items:
        shrinking.remove(bucket, key, digest)
    assert shrinking.is_empty() and shrinking == TicTacTree()


@settings(max_examples=60, deadline=None)
@given(model=stores)
def test_serialization_round_trips(model: Model) -> None:
    tree = tree_of(model)
    data = tree.to_bytes()
    assert len(data) == tictac.SERIALIZED_SIZE
    again = TicTacTree.from_bytes(data)
    assert again == tree and again.compare(tree) == []
    for segment in range(0, TicTacTree.SEGMENTS, 997):
        assert again.segment_hash(segment) == tree.segment_hash(segment)


def test_segment_count_is_fixed_and_segments_are_in_range() -> None:
    assert TicTacTree.SEGMENTS == 65536
    seen = {TicTacTree.segment_of("b", f"k{i}") for i in range(2000)}
    assert all(0 <= s < TicTacTree.SEGMENTS for s in seen)
    assert len(seen) > 1900  # spread over the segments
    assert TicTacTree.segment_of("b", "k") == TicTacTree.segment_of(b"b", b"k")


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


def test_bad_bytes_are_refused_clearly() -> None:
    tree = TicTacTree()
    tree.add("b", "k", 5)
    good = tree.to_bytes()
    body = good[:-4]
    cases = {
        "too short": good[:5],
        "bad magic": b"X" + good[1:],
        "newer than this inkpen": _with_crc(body[:6] + struct.pack(">H", 9) + body[8:]),
        "segments": _with_crc(body[:8] + struct.pack(">I", 16) + body[12:]),
        "bytes; a serialized tree": good + b"\x00",
        "CRC mismatch": good[:100] + bytes([good[100] ^ 1]) + good[101:],
    }
    for expected, data in cases.items():
        with pytest.raises(CorruptionError, match=expected):
            TicTacTree.from_bytes(data)
    with pytest.raises(CorruptionError, match="upgrade inkpen"):
        TicTacTree.from_bytes(cases["newer than this inkpen"])
    with pytest.raises(UsageError, match="takes bytes"):
        TicTacTree.from_bytes("not bytes")  # type: ignore[arg-type]


def test_bad_arguments_are_usage_errors() -> None:
    tree = TicTacTree()
    for bad in (-1, 2**64, 1.5, True, None):
        with pytest.raises(UsageError, match="content_hash"):
            tree.add("b", "k", bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="segment id"):
        tree.segment_hash(TicTacTree.SEGMENTS)
    with pytest.raises(UsageError, match="TicTacTree"):
        tree.compare(b"x")  # type: ignore[arg-type]
    assert tree.is_empty()


# -- trees and filtered head folds of a database ----------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def model_tree(model: dict[tuple[str, str], bytes]) -> TicTacTree:
    tree = TicTacTree()
    for (bucket, key), value in model.items():
        tree.add(bucket, key, content_hash(value))
    return tree


def test_bookie_snapshot_and_reader_trees_match_the_model(store_url: str, clock: FakeClock) -> None:
    model: dict[tuple[str, str], bytes] = {}
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        for i in range(120):
            bucket = "even" if i % 2 == 0 else "odd"
            model[(bucket, f"k{i:03}")] = f"value {i}".encode()
            book.put(bucket, f"k{i:03}", f"value {i}".encode())
        for i in range(0, 120, 7):
            bucket = "even" if i % 2 == 0 else "odd"
            book.delete(bucket, f"k{i:03}")
            del model[(bucket, f"k{i:03}")]
        book.put("even", "k002", b"changed")
        model[("even", "k002")] = b"changed"
        book.put("odd", "ttl", b"gone soon", ttl=5)
        assert book.tictac_tree() == model_tree({**model, ("odd", "ttl"): b"gone soon"})
        clock.advance(10)  # the ttl object expires
        expected = model_tree(model)
        assert book.tictac_tree() == expected
        evens = {k: v for k, v in model.items() if k[0] == "even"}
        assert book.tictac_tree("even") == model_tree(evens)
        ranged = {k: v for k, v in evens.items() if "k010" <= k[1] <= "k050"}
        assert book.tictac_tree("even", start="k010", end="k050") == model_tree(ranged)
        with book.snapshot() as snap:
            book.put("odd", "after", b"not in the snapshot")
            assert snap.tictac_tree() == expected
        model[("odd", "after")] = b"not in the snapshot"
        assert book.tictac_tree() == model_tree(model)
        book.checkpoint()
    with inkpen.open_reader(store_url, clock=clock) as reader:
        assert reader.tictac_tree() == model_tree(model)


def test_heads_of_differing_segments_are_exactly_the_changed_keys(
    store_url: str, clock: FakeClock
) -> None:
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        for i in range(200):
            book.put("b", f"k{i:03}", b"same")
        before = book.tictac_tree()
        book.put("b", "k017", b"changed")
        book.delete("b", "k150")
        book.put("b", "new", b"added")
        segments = before.compare(book.tictac_tree())
        assert segments == sorted({TicTacTree.segment_of("b", k) for k in ("k017", "k150", "new")})
        found = {key for _, key, _ in book.heads(segments=segments)}
        expected = {b"k017", b"new"} | {
            f"k{i:03}".encode()
            for i in range(200)
            if i != 150 and TicTacTree.segment_of("b", f"k{i:03}") in segments
        }
        assert found == expected
        partial, full = book.tictac_tree(segments=segments), book.tictac_tree()
        assert partial.compare(TicTacTree()) == [s for s in segments if full.segment_hash(s)]
        assert all(partial.segment_hash(s) == full.segment_hash(s) for s in segments)
        assert list(book.heads("b", segments=[])) == []


def test_modified_range_and_max_objects(store_url: str, clock: FakeClock) -> None:
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        start = clock()
        for i in range(30):
            book.put("b", f"k{i:02}", b"v")
            clock.advance(1)
        heads = {key: head.last_modified for _, key, head in book.heads("b")}
        lo, hi = start + 10, start + 19
        inside = {k for k, t in heads.items() if lo <= t <= hi}
        assert len(inside) == 10
        assert {k for _, k, _ in book.heads("b", modified_range=(lo, hi))} == inside
        assert {k for _, k, _ in book.heads("b", modified_range=(None, hi))} == {
            k for k, t in heads.items() if t <= hi
        }
        assert [k for _, k, _ in book.heads("b", max_objects=4)] == sorted(heads)[:4]
        assert list(book.heads("b", max_objects=0)) == []
        ranged = book.tictac_tree("b", modified_range=(lo, hi))
        only = TicTacTree()
        for key in inside:
            only.add("b", key, content_hash(b"v"))
        assert ranged == only


def test_fold_arguments_are_checked(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        book.put("b", "k", b"v")
        for kwargs, match in (
            ({"segments": [-1]}, "segment id"),
            ({"segments": "12"}, "segments must be"),
            ({"modified_range": (1, 2, 3)}, "modified_range"),
            ({"modified_range": (float("nan"), None)}, "seconds since the epoch"),
            ({"max_objects": -1}, "max_objects"),
            ({"max_objects": 1.0}, "max_objects"),
        ):
            with pytest.raises(UsageError, match=match):
                book.heads("b", **kwargs)
        with pytest.raises(UsageError, match="needs a bucket"):
            book.tictac_tree(start="a")
