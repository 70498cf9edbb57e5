"""The ledger's level structure (manifest/levels.py): one numbering (0 is L0), its
invariants, and a merge result applied to it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.actors.kernel.views import LedgerView, SstHandle
from inkpen.manifest.levels import (
    LevelError,
    Levels,
    from_manifest,
    key_span,
    level_target,
)
from inkpen.manifest.model import LedgerState, SstDescriptor


def key(n: int) -> bytes:
    return b"%05d" % n


def sst(name: str, first: int, last: int, tombstones: int = 0) -> SstDescriptor:
    return SstDescriptor(f"ledger/{name}.sst", key(first), key(last), 1, 5, 100, 10, tombstones)


@st.composite
def sorted_level(draw: st.DrawFn, prefix: str) -> list[SstDescriptor]:
    """Non-overlapping files in key order: consecutive pairs of distinct sorted points."""
    points = sorted(draw(st.sets(st.integers(0, 999), max_size=12)))
    pairs = list(zip(points[0::2], points[1::2], strict=False))
    return [sst(f"{prefix}-{i}", lo, hi) for i, (lo, hi) in enumerate(pairs)]


@st.composite
def ledgers(draw: st.DrawFn) -> Levels[SstDescriptor]:
    """Random valid levels: an L0 of possibly overlapping files, then up to four levels."""
    l0 = []
    for i in range(draw(st.integers(0, 4))):
        lo = draw(st.integers(0, 999))
        l0.append(sst(f"l0-{i}", lo, draw(st.integers(lo, 999))))
    deeper = [draw(sorted_level(f"l{n}")) for n in range(1, draw(st.integers(0, 4)) + 1)]
    return Levels.of(l0, deeper)


def check_invariants(levels: Levels[SstDescriptor]) -> None:
    for n in range(1, levels.depth):
        files = levels.level(n)
        for before, after in itertools.pairwise(files):
            assert before.last_key < after.first_key, f"L{n} overlaps or is out of order"
    if levels.depth:
        assert levels.files[-1], "a trailing empty level was kept"


@st.composite
def merges(
    draw: st.DrawFn,
) -> tuple[Levels[SstDescriptor], int, tuple[SstDescriptor, ...], list[SstDescriptor]]:
    """Levels, a merge's source level, its inputs and its outputs (which cover parts of the
    inputs' key span, in key order, without overlapping each other)."""
    levels = draw(ledgers())
    candidates = [n for n in range(levels.depth) if levels.level(n)]
    if not candidates:
        levels = levels.with_l0(sst("only", 10, 20))
        candidates = [0]
    source = draw(st.sampled_from(candidates))
    sources = levels.l0 if source == 0 else (draw(st.sampled_from(levels.level(source))),)
    lo, hi = key_span(sources)
    targets = levels.overlapping(source + 1, lo, hi)
    lo, hi = key_span((*sources, *targets))
    first, last = int(lo), int(hi)
    points = sorted(draw(st.sets(st.integers(first, last), max_size=8)))
    pairs = list(zip(points[0::2], points[1::2], strict=False))
    outputs = [sst(f"out-{i}", a, b) for i, (a, b) in enumerate(pairs)]
    return levels, source, (*sources, *targets), outputs


@settings(max_examples=300)
@given(merges())
def test_applying_a_merge_keeps_levels_sorted_and_non_overlapping(
    case: tuple[Levels[SstDescriptor], int, tuple[SstDescriptor, ...], list[SstDescriptor]],
) -> None:
    levels, source, inputs, outputs = case
    target = source + 1
    after = levels.apply((f.name for f in inputs), target, outputs)
    check_invariants(after)
    gone = {f.name for f in inputs}
    # Oracle: every file not taken stays where it was, in the same order; outputs land in target.
    for n in range(max(levels.depth, after.depth)):
        kept = [f for f in levels.level(n) if f.name not in gone]
        if n == target:
            assert sorted(after.level(n), key=lambda f: f.first_key) == list(after.level(n))
            assert {f.name for f in after.level(n)} == {f.name for f in kept} | {
                f.name for f in outputs
            }
        else:
            assert list(after.level(n)) == kept
    assert not gone & {f.name for f in after.all_files()}
    # The one conversion to the manifest's shape is accepted by the manifest's own checks.
    state = LedgerState(after.to_manifest())
    assert from_manifest(state) == after


@given(ledgers())
def test_the_manifest_shape_is_indexed_by_level_number_too(levels: Levels[SstDescriptor]) -> None:
    state = LedgerState(levels.to_manifest())
    for n in range(levels.depth + 1):
        expected = state.levels[n] if n < len(state.levels) else ()
        assert levels.level(n) == expected
    assert from_manifest(state) == levels


@given(ledgers())
def test_the_view_uses_the_same_numbering(levels: Levels[SstDescriptor]) -> None:
    handles = levels.map(lambda d: SstHandle(d, cast(Any, None)))
    view = LedgerView(files=handles)
    assert view.l0 == handles.level(0)
    assert view.levels[0].files == ()  # L0 overlaps: it is searched from view.l0
    assert len(view.levels) == max(levels.depth, 1)
    for n in range(1, levels.depth):
        assert view.levels[n].files == handles.level(n)
    assert list(view.handles()) == list(handles.all_files())


@given(ledgers())
def test_the_basement_is_the_deepest_level_with_files(levels: Levels[SstDescriptor]) -> None:
    deepest = max((n for n in range(levels.depth) if levels.level(n)), default=0)
    for n in range(levels.depth + 2):
        assert levels.is_basement(n) == all(not levels.level(m) for m in range(n + 1, n + 6))
        assert levels.is_basement(n) == (n >= deepest)


def test_level_targets_grow_by_the_fanout() -> None:
    assert [level_target(n, 4, 8) for n in (1, 2, 3)] == [4, 32, 256]
    assert [level_target(n, 2, 2) for n in (1, 2, 3)] == [2, 4, 8]
    with pytest.raises(ValueError, match="L0"):
        level_target(0, 4, 8)


def test_l0_keeps_its_order_and_may_overlap() -> None:
    old, new = sst("old", 0, 50), sst("new", 10, 60)
    levels = Levels.of([old]).with_l0(new)
    assert levels.l0 == (new, old)
    assert levels.overlapping(0, key(55), key(70)) == (new,)


def test_deeper_levels_refuse_overlap_and_duplicates() -> None:
    with pytest.raises(LevelError, match="overlap"):
        Levels(((), (sst("a", 0, 10), sst("b", 10, 20))))
    with pytest.raises(LevelError, match="twice"):
        Levels(((sst("a", 0, 10),), (sst("a", 0, 10),)))


def test_apply_refuses_outputs_that_overlap_a_file_the_merge_left() -> None:
    levels = Levels.of([sst("l0", 0, 10)], [[sst("a", 0, 5), sst("b", 20, 30)]])
    with pytest.raises(LevelError):
        levels.apply(["l0"], 1, [sst("out", 0, 25)])
    with pytest.raises(ValueError, match="L1 or deeper"):
        levels.apply(["l0"], 0, [])


def test_trailing_empty_levels_are_dropped_and_lookups_beyond_are_empty() -> None:
    lone = sst("a", 0, 5)
    levels = Levels.of([], [[lone], [], []])
    assert levels.files == ((), (lone,))
    assert levels.level(7) == ()
    emptied = levels.apply([lone.name], 2, [])
    assert emptied == Levels()
    assert emptied.to_manifest() == ((),)  # the manifest keeps an empty L0
    with pytest.raises(ValueError, match="numbered from 0"):
        levels.level(-1)


def test_counts_and_sizes_index_the_levels_from_l0() -> None:
    levels = Levels.of([sst("l0", 0, 1)], [[sst("a", 0, 5)], [sst("b", 0, 3), sst("c", 4, 9)]])
    assert levels.counts() == [1, 1, 2]
    assert levels.sizes(lambda f: f.size) == [100, 100, 200]


def names(files: Sequence[SstDescriptor]) -> list[str]:
    return [f.name for f in files]


def test_overlap_lookup_is_inclusive_on_both_ends() -> None:
    a, b, c = sst("a", 0, 9), sst("b", 10, 19), sst("c", 30, 39)
    levels = Levels.of([], [[c, a, b]])
    assert names(levels.level(1)) == names([a, b, c])  # sorted by first key
    assert names(levels.overlapping(1, key(9), key(10))) == names([a, b])
    assert levels.overlapping(1, key(20), key(29)) == ()
    assert names(levels.overlapping(1, key(39), key(99))) == names([c])
