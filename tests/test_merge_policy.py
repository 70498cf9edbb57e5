"""Merge choice (actors/manifest/merge_policy.py): Leveled's policy as a pure function of the
levels, and the engine running whichever MergePolicy its options name."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import inkpen
from inkpen.actors.files import start
from inkpen.actors.kernel import compute
from inkpen.actors.ledger import penciller_clerk
from inkpen.actors.ledger.penciller_clerk import policy_for
from inkpen.errors import UsageError
from inkpen.formats.keys import ACTIVE, TOMBSTONE, LedgerValue, object_key
from inkpen.formats.sst import SstInfo, SstReader, SstShape, build_sst
from inkpen.manifest.levels import LevelFile, Levels, key_span, level_target
from inkpen.manifest.merge_policy import LeveledMergePolicy, MergeJob, MergePolicy
from inkpen.manifest.model import SstDescriptor
from support.engine import TINY
from support.fetching import memory_fetch
from support.waiting import wait_until

F = TypeVar("F", bound=LevelFile)

POLICY = LeveledMergePolicy(l1_target_files=2, level_fanout=2)


def key(n: int) -> bytes:
    return b"%05d" % n


def sst(name: str, first: int, last: int, tombstones: int = 0) -> SstDescriptor:
    return SstDescriptor(f"ledger/{name}.sst", key(first), key(last), 1, 5, 100, 10, tombstones)


@st.composite
def sorted_level(draw: st.DrawFn, prefix: str) -> list[SstDescriptor]:
    points = sorted(draw(st.sets(st.integers(0, 999), max_size=24)))
    pairs = list(zip(points[0::2], points[1::2], strict=False))
    return [
        sst(f"{prefix}-{i}", lo, hi, draw(st.integers(0, 50))) for i, (lo, hi) in enumerate(pairs)
    ]


@st.composite
def ledgers(draw: st.DrawFn, with_l0: bool | None = None) -> Levels[SstDescriptor]:
    count = draw(st.integers(0, 3)) if with_l0 is None else (draw(st.integers(1, 3)) * with_l0)
    l0 = []
    for i in range(count):
        lo = draw(st.integers(0, 999))
        l0.append(sst(f"l0-{i}", lo, draw(st.integers(lo, 999))))
    deeper = [draw(sorted_level(f"l{n}")) for n in range(1, draw(st.integers(0, 4)) + 1)]
    return Levels.of(l0, deeper)


def over_target(levels: Levels[SstDescriptor]) -> list[int]:
    return [
        n
        for n in range(1, levels.depth)
        if len(levels.level(n)) > level_target(n, POLICY.l1_target_files, POLICY.level_fanout)
    ]


def fuller_than_l0(levels: Levels[SstDescriptor]) -> list[int]:
    """The levels over their target whose files/target exceed L0's files/l0_trigger."""
    l0 = len(levels.l0) / POLICY.l0_trigger
    return [
        n
        for n in over_target(levels)
        if len(levels.level(n)) / level_target(n, POLICY.l1_target_files, POLICY.level_fanout) > l0
    ]


@settings(max_examples=300)
@given(ledgers(with_l0=True), st.integers(0, 20))
def test_l0_goes_first_and_whole_unless_a_level_is_fuller(
    levels: Levels[SstDescriptor], turn: int
) -> None:
    job = POLICY.choose(levels, turn=turn)
    assert job is not None
    if fuller_than_l0(levels):
        # A level fuller than L0 sends a file down first: the deepest level over its target.
        assert job.source_level == max(over_target(levels)) and len(job.sources) == 1
        return
    assert (job.source_level, job.target_level) == (0, 1)
    assert job.sources == levels.l0
    lo, hi = key_span(levels.l0)
    assert job.targets == tuple(
        f for f in levels.level(1) if f.first_key <= hi and f.last_key >= lo
    )
    assert not job.move  # L0 is always rewritten, even a lone file with nothing below
    assert job.basement == all(not levels.level(n) for n in range(2, levels.depth))


@settings(max_examples=300)
@given(ledgers(with_l0=False), st.integers(0, 20))
def test_the_deepest_level_over_its_target_sends_one_file_down(
    levels: Levels[SstDescriptor], turn: int
) -> None:
    job = POLICY.choose(levels, turn=turn)
    over = over_target(levels)
    if not over:
        assert job is None
        return
    assert job is not None
    assert job.source_level == max(over)
    assert job.target_level == job.source_level + 1
    (source,) = job.sources
    assert source in levels.level(job.source_level)
    below = levels.level(job.target_level)
    assert job.targets == tuple(
        f for f in below if f.first_key <= source.last_key and f.last_key >= source.first_key
    )
    # A file with no overlap below is a move: a manifest change alone.
    assert job.move == (not job.targets)
    assert job.basement == all(not levels.level(n) for n in range(job.target_level + 1, 6))
    # Pure: the same levels and turn give the same job.
    assert POLICY.choose(levels, turn=turn) == job


def test_a_growing_l1_is_sent_down_before_l0_merges_into_it() -> None:
    """Under a steady load L0 always holds a file: without weighing, L1 grew without bound and
    every L0 merge rewrote all of it."""
    policy = LeveledMergePolicy(l1_target_files=4, level_fanout=8, l0_trigger=4)
    l1 = [sst(f"a{i}", 10 * i, 10 * i + 5) for i in range(6)]  # 1.5 x its target
    one_l0 = Levels.of([sst("l0", 0, 999)], [l1])
    job = policy.choose(one_l0, turn=1)
    assert job is not None and job.source_level == 1 and job.move  # 6/4 > 1/4: L1 first
    two_l0 = Levels.of([sst(f"l0-{i}", 0, 999) for i in range(7)], [l1])
    job = policy.choose(two_l0, turn=1)
    assert job is not None and job.source_level == 0  # 7/4 > 6/4: L0 first
    at_target = Levels.of([sst("l0", 0, 999)], [l1[:4]])
    job = policy.choose(at_target, turn=1)
    assert job is not None and job.source_level == 0  # no level over its target


def test_turns_alternate_grooming_and_key_order() -> None:
    files = [sst(f"f{i}", 10 * i, 10 * i + 5, tombstones=3 if i == 2 else 0) for i in range(4)]
    levels = Levels.of([], [files])  # four files over L1's target of two
    picked = []
    for turn in range(6):
        job = POLICY.choose(levels, turn=turn)
        assert job is not None and job.move
        picked.append(job.sources[0].name)
    # even turns: the most tombstones; odd turns: the next file in key order
    assert picked[0::2] == [files[2].name] * 3
    assert picked[1::2] == [files[0].name, files[1].name, files[2].name]


def test_a_file_with_overlap_below_is_merged_not_moved() -> None:
    l1 = [sst(f"a{i}", 10 * i, 10 * i + 5) for i in range(3)]
    l2 = [sst("b", 0, 3), sst("c", 200, 300)]
    job = POLICY.choose(Levels.of([], [l1, l2]), turn=1)  # odd turn: first file in key order
    assert job is not None
    assert job.sources == (l1[0],) and job.targets == (l2[0],)
    assert not job.move and job.basement


def test_an_empty_or_balanced_ledger_needs_no_merge() -> None:
    assert POLICY.choose(Levels(), turn=0) is None
    assert POLICY.choose(Levels.of([], [[sst("a", 0, 1), sst("b", 2, 3)]]), turn=0) is None


def test_a_job_describes_a_valid_move_only() -> None:
    a, b = sst("a", 0, 1), sst("b", 0, 1)
    with pytest.raises(ValueError, match="move"):
        MergeJob(1, 2, (a,), (b,), True, move=True)
    with pytest.raises(ValueError, match="source"):
        MergeJob(1, 2, (), (), True)
    with pytest.raises(ValueError, match="L1 or deeper"):
        MergeJob(0, 0, (a,), (), True)
    move = MergeJob(1, 2, (a,), (), True, move=True)
    assert move.inputs == (a,) and move.outputs([b]) == (a,)
    merge = MergeJob(1, 2, (a,), (), True)
    assert merge.outputs([b]) == (b,)


def entries(keys: range, sqn: int, status: int = ACTIVE) -> list[tuple[bytes, LedgerValue]]:
    return [
        (object_key(b"b", b"k%05d" % i), LedgerValue(sqn + i, status, None, i, 10, 0)) for i in keys
    ]


def described(name: str, info: SstInfo) -> SstDescriptor:
    return SstDescriptor(
        name,
        info.first_key,
        info.last_key,
        info.min_sqn,
        info.max_sqn,
        info.size,
        info.entry_count,
        info.tombstone_count,
    )


@pytest.mark.parametrize("deeper_files", [False, True])
def test_the_basement_drops_tombstones(deeper_files: bool) -> None:
    """A job into the deepest level with files is a basement merge: tombstones go; with files
    further down, they stay to keep shadowing them."""
    newer_data, newer_info = build_sst(entries(range(0, 100, 2), 10_000, TOMBSTONE))
    older_data, older_info = build_sst(entries(range(0, 100), 1))
    newer = described("ledger/newer.sst", newer_info)
    older = described("ledger/older.sst", older_info)
    deep = [[sst("deep", 0, 1)]] if deeper_files else []
    job = POLICY.choose(Levels.of([newer], [[older], *deep]), turn=0)
    assert job is not None and job.targets == (older,)
    assert job.basement is not deeper_files
    built = compute.merge_ssts(
        [(newer.name, newer_data, 0)],
        [(older.name, older_data, 0)],
        job.basement,
        0,
        SstShape(block_bytes=4096, bloom_bits_per_key=10, target_bytes=1 << 20),
    )
    out = [
        value
        for data, _ in built
        for _, value in SstReader.open("out", len(data), memory_fetch(data)).iter_range()
    ]
    tombstones = sum(1 for v in out if v.status == TOMBSTONE)
    assert tombstones == (50 if deeper_files else 0)
    assert len(out) == (100 if deeper_files else 50)


def test_policy_for_takes_the_option_or_builds_leveled_from_the_sizes() -> None:
    assert policy_for(inkpen.Options(l1_target_files=3, level_fanout=5)) == LeveledMergePolicy(
        3, 5, l0_trigger=6
    )  # half of the default max_l0_files, 12
    assert policy_for(inkpen.Options(max_l0_files=9)) == LeveledMergePolicy(4, 8, l0_trigger=4)
    custom = LeveledMergePolicy(1, 2)
    assert policy_for(inkpen.Options(merge_policy=custom)) is custom
    assert isinstance(POLICY, MergePolicy)
    with pytest.raises(UsageError, match="merge_policy"):
        inkpen.Options(merge_policy=object())  # type: ignore[arg-type]


@dataclass
class GatedPolicy:
    """Never merges while ``gate`` is shut, then delegates to Leveled's; records every call."""

    gate: threading.Event = field(default_factory=threading.Event)
    calls: list[tuple[int, int]] = field(default_factory=list)
    inner: LeveledMergePolicy = field(default_factory=lambda: LeveledMergePolicy(2, 2))

    def choose(self, levels: Levels[F], *, turn: int) -> MergeJob[F] | None:
        self.calls.append((len(levels.l0), turn))
        if not self.gate.is_set():
            return None
        return self.inner.choose(levels, turn=turn)


def test_the_engine_uses_the_policy_its_options_name(store_url: str) -> None:
    """With a policy that never merges, L0 fills, the writer is held back and no merge runs;
    once the policy merges, the ledger drains and every write reads back."""
    policy = GatedPolicy()
    book = inkpen.open(store_url, **{**TINY, "merge_policy": policy})
    done = threading.Event()
    model: dict[str, bytes] = {}

    def writer() -> None:
        for i in range(600):
            value = b"v%d" % i
            book.put("mp", f"k{i % 150:04d}", value)
            model[f"k{i % 150:04d}"] = value
        done.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:

        def blocked_on_a_full_l0() -> bool:
            # The Bookie's cache can reach STOP while L0 writes are still under way (slow on a
            # busy machine): wait for both, L0 full and the writer held.
            stats = book.stats()
            full = stats["l0_files"] == TINY["max_l0_files"]
            return full and stats["pressure"].get("ledger_cache") == 2

        wait_until(blocked_on_a_full_l0, "L0 full and the writer blocked")
        stats = book.stats()
        assert stats["merges"] == 0 and stats["moves"] == 0
        assert policy.calls, "the engine never asked the policy"
        assert not done.is_set()
        policy.gate.set()
        book.compact_ledger()
        assert done.wait(timeout=120)
        thread.join()
        book.compact_ledger()
        stats = book.stats()
        assert stats["merges"] > 0
        assert stats["l0_files"] == 0
        turns = [turn for _, turn in policy.calls]
        assert any(t > 0 for t in turns), "the clerk's turns never advanced"
        for k, v in model.items():
            assert book.get("mp", k) == v
    finally:
        policy.gate.set()
        book.close()


def test_a_merge_that_fails_after_storing_outputs_lets_them_go_and_is_retried(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clerk stores each output as the merge hands it over: when a later one fails, the
    ones stored leave the in-flight set (GC's orphans; no manifest names them) and their clerks
    stop; the merge is retried, and every write reads back."""
    real = start.write_new_sst
    stored: list[str] = []
    failed: list[str] = []

    def second_fails(ctx: Any, owner: Any, data: bytes, info: SstInfo) -> Any:
        if len(stored) == 1 and not failed:
            failed.append("once")
            raise inkpen.StoreError("the store refused this output (a test)", definite=True)
        handle = real(ctx, owner, data, info)
        stored.append(handle.name)
        return handle

    monkeypatch.setattr(penciller_clerk, "write_new_sst", second_fails)
    book = inkpen.open(store_url, **{**TINY, "sst_target_bytes": 1024})
    try:
        model = {f"k{i:04d}": b"v%d" % i * 8 for i in range(300)}
        for key, value in model.items():
            book.put("mp", key, value)
        book.compact_ledger()
        assert failed, "no merge wrote two outputs"
        ctx = book._engine.ctx
        named = {h.name for h in ctx.board.ledger.handles()}
        assert stored[0] not in named  # the failed merge's output was never committed
        assert stored[0] not in ctx.in_flight.names()
        assert book.stats()["merges"] > 0
        for key, value in model.items():
            assert book.get("mp", key) == value
    finally:
        book.close()
