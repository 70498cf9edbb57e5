"""The Penciller's clerk: chooses merges and runs them.

Whenever the ledger changes, the Penciller offers the clerk its current view
(:class:`MergeWork`); the clerk picks at most one job, in Leveled's order of priority:

1. if L0 holds files, merge them all into L1 (with the L1 files their key range overlaps);
2. otherwise, the highest level holding more files than its target (level n's target is
   ``l1_target_files * level_fanout ** (n - 1)``) sends one file down: the one with the most
   tombstones among a few sampled (Leveled's grooming), or the next in key order, alternately.

A source file with no overlap in the level below is **moved**: a manifest change alone, no bytes
rewritten. Otherwise the clerk reads the inputs, has them merged in key order (the highest SQN of
a key wins) into new SST files of about ``sst_target_bytes`` by the compute pool
(:mod:`inkpen.actors.engine.compute`, off the interpreter that serves reads and writes), and writes
each through its own SST clerk. Tombstones and expired entries are dropped only when the target is
the **basement** (no level below it holds files), since above it they must keep shadowing older
entries.

The clerk answers :class:`MergeDone` (or :class:`MergeIdle` when there is nothing to do, or when
the merge failed: then ``missing`` names an input the store no longer holds); the Penciller
commits the result in one manifest change.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import InkpenActor, handles, send, stop
from inkpen.actors.engine import compute
from inkpen.actors.engine.context import EngineContext
from inkpen.actors.files.sst_clerk import WriteSst
from inkpen.actors.files.start import write_file
from inkpen.actors.read.views import LedgerView, SstHandle
from inkpen.errors import NotFoundError
from inkpen.formats.sst import SstInfo
from inkpen.logs import get_logger

log = get_logger("inkpen.penciller")

GROOMING_SAMPLE = 16


@dataclass(frozen=True, slots=True)
class MergeJob:
    """Which files merge into which level, and whether that level is the basement."""

    source_level: int
    target_level: int
    sources: tuple[SstHandle, ...]
    targets: tuple[SstHandle, ...]
    basement: bool


@dataclass(frozen=True, slots=True)
class MergeWork:
    """Penciller to clerk: here is the ledger now; merge if it needs it."""

    view: LedgerView
    reply_to: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class MergeIdle:
    """Clerk to Penciller: no merge needed, or (``failed``) the merge could not be done;
    ``missing`` names input files the store no longer holds."""

    failed: bool = False
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MergeDone:
    """Clerk to Penciller: ``job`` produced ``added`` files, or ``moved`` its source down."""

    job: MergeJob
    added: tuple[SstHandle, ...]
    moved: tuple[SstHandle, ...] = ()


def level_target(level: int, l1_files: int, fanout: int) -> int:
    """How many files level ``level`` (1-based) holds before it merges down."""
    return l1_files * fanout ** (level - 1)


def choose_job(view: LedgerView, *, l1_files: int, fanout: int, turn: int) -> MergeJob | None:
    """The next merge the ledger needs, or None."""
    levels = [list(level.files) for level in view.levels]

    def deepest_below(level: int) -> bool:
        """True when no level deeper than ``level`` (1-based) holds files."""
        return all(not files for files in levels[level:])

    if view.l0:
        sources = tuple(view.l0)
        lo = min(h.descriptor.first_key for h in sources)
        hi = max(h.descriptor.last_key for h in sources)
        l1 = levels[0] if levels else []
        targets = tuple(
            h for h in l1 if h.descriptor.first_key <= hi and h.descriptor.last_key >= lo
        )
        return MergeJob(0, 1, sources, targets, deepest_below(1))
    for index in range(len(levels) - 1, -1, -1):
        level = index + 1
        files = levels[index]
        if len(files) <= level_target(level, l1_files, fanout):
            continue
        source = _pick_source(files, turn)
        below = levels[index + 1] if index + 1 < len(levels) else []
        first, last = source.descriptor.first_key, source.descriptor.last_key
        targets = tuple(
            h for h in below if h.descriptor.first_key <= last and h.descriptor.last_key >= first
        )
        return MergeJob(level, level + 1, (source,), targets, deepest_below(level + 1))
    return None


def _pick_source(files: Sequence[SstHandle], turn: int) -> SstHandle:
    if turn % 2 == 0:
        sample = random.sample(list(files), min(GROOMING_SAMPLE, len(files)))
        return max(sample, key=lambda h: h.descriptor.tombstone_count)
    return files[(turn // 2) % len(files)]


class PencillerClerk(InkpenActor):
    """Chooses and runs the Penciller's merges. Answers :class:`MergeWork`."""

    def __init__(self, ctx: EngineContext, penciller: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.ctx = ctx
        self.penciller = penciller
        self.turn = 0

    @handles(MergeWork)
    def _work(self, message: MergeWork) -> None:
        options = self.ctx.options
        job = choose_job(
            message.view,
            l1_files=options.l1_target_files,
            fanout=options.level_fanout,
            turn=self.turn,
        )
        self.turn += 1
        if job is None:
            send(message.reply_to, MergeIdle())
            return
        try:
            if len(job.sources) == 1 and not job.targets and job.source_level > 0:
                send(message.reply_to, MergeDone(job, (), job.sources))
                return
            added = self._merge(job)
        except NotFoundError as exc:
            name = exc.key or str(exc)
            log.warning("ledger.merge_input_missing", name=name, error=str(exc))
            send(message.reply_to, MergeIdle(failed=True, missing=(name,)))
            return
        except Exception as exc:
            log.warning("ledger.merge_failed", error=str(exc), exc_info=exc)
            send(message.reply_to, MergeIdle(failed=True))
            return
        send(message.reply_to, MergeDone(job, added))

    def _merge(self, job: MergeJob) -> tuple[SstHandle, ...]:
        """Read the inputs, merge them in the compute pool, write each output via its clerk."""
        options = self.ctx.options
        targets = sorted(job.targets, key=lambda h: h.descriptor.first_key)
        built = compute.run(
            options.compute_workers,
            compute.merge_ssts,
            [self._input(h) for h in job.sources],
            [self._input(h) for h in targets],
            job.basement,
            self.ctx.now_ms(),
            options.sst_target_bytes,
            options.sst_block_bytes,
            options.bloom_bits_per_key,
        )
        written: list[SstHandle] = []
        try:
            for data, info in built:
                written.append(self._write(data, info))
        except Exception:
            for handle in written:
                stop(handle.clerk)
            raise
        return tuple(written)

    def _input(self, handle: SstHandle) -> compute.SstInput:
        descriptor = handle.descriptor
        data = self.ctx.tables.read(descriptor)
        return descriptor.name, data, descriptor.sqn_base

    def _write(self, data: bytes, info: SstInfo) -> SstHandle:
        return write_file(self.ctx, self.penciller, WriteSst(data, info))
