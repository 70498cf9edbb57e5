"""Merge choice: which files of the ledger merge next, behind the :class:`MergePolicy` protocol.

A merge policy is pure: given the ledger's :class:`~inkpen.manifest.levels.Levels` and the
number of choices made before (its only state, for policies that alternate), it answers one
:class:`MergeJob` (a frozen description: which files leave which level for which level, whether
the target is the basement, and whether the job is a **move**) or None when the ledger needs no
merge. It reads nothing, writes nothing and starts nothing; the Penciller's clerk
(:mod:`inkpen.actors.ledger.penciller_clerk`) runs whatever job it chose, and the Penciller asks
it (with ``turn=0``) whether any merge is still due when asked to compact.

The policy in use is the ``merge_policy`` option (:class:`inkpen.Options`): any object with
this protocol's ``choose``. Left at None, it is :class:`LeveledMergePolicy` with the options'
``l1_target_files`` and ``level_fanout`` (:func:`inkpen.actors.ledger.penciller_clerk.policy_for`
is the one place that decides). This module sits beside :mod:`inkpen.manifest.levels`, as
Leveled's pmanifest sits beside its actors: pure, so the Penciller, the compactor and anyone
writing a policy of their own can use it.

:class:`LeveledMergePolicy` is Leveled's order of priority, with L0 weighed against the levels:

1. if L0 holds files, merge them all into L1 (with the L1 files their key range overlaps),
   unless a level is fuller than L0: its files over its target
   (:func:`~inkpen.manifest.levels.level_target`) as a share of the target above L0's
   files as a share of ``l0_trigger``;
2. otherwise, the deepest level holding more files than its target sends one file down: on even
   turns the one with the most tombstones among a few sampled (Leveled's grooming), on odd
   turns the next in key order.

Without the weighing, L0 went first whenever it held a file, and under a steady load of random
keys it always did: L1 then grew without bound and every L0 merge rewrote all of it, so merges
fell further behind the more was written (at 3,000,000 objects L1 held 9 files against a target
of 4 and writers stopped for seconds). With it, a level more over its target than L0 is full
sends files down first, so L1 stays near its target and an L0 merge costs about the same at any
size; L0 still goes first once it is fuller, and at ``max_l0_files`` (twice the trigger by
default) only a level over twice its target comes before it.

A file that overlaps nothing in the level below is moved: the job says ``move`` and the clerk
commits it with a manifest change alone, no bytes rewritten.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from inkpen.manifest.levels import LevelFile, LevelNo, Levels, key_span, level_target

F = TypeVar("F", bound=LevelFile)

GROOMING_SAMPLE = 16
"""How many files a grooming turn samples for the one with the most tombstones."""


@dataclass(frozen=True, slots=True)
class MergeJob(Generic[F]):
    """Which files merge into which level.

    ``sources`` leave ``source_level``; ``targets`` are the files of ``target_level`` they
    overlap, rewritten with them. ``basement``: no level below ``target_level`` holds files,
    so the merge drops tombstones and expired entries. ``move``: the single source overlaps
    nothing in the target level and goes down as it is (a manifest change alone).
    """

    source_level: LevelNo
    target_level: LevelNo
    sources: tuple[F, ...]
    targets: tuple[F, ...]
    basement: bool
    move: bool = False

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a merge job needs at least one source file")
        if self.target_level < 1 or self.source_level < 0:
            raise ValueError(
                f"a merge goes from L{self.source_level} to L{self.target_level}: "
                "the target must be L1 or deeper"
            )
        if self.move and (self.targets or len(self.sources) != 1):
            raise ValueError("a move takes one source file and no target files")

    @property
    def inputs(self) -> tuple[F, ...]:
        """Every file the job takes out of the levels: sources, then targets."""
        return (*self.sources, *self.targets)

    def outputs(self, written: Sequence[F]) -> tuple[F, ...]:
        """The files the job puts into ``target_level``: the source itself for a move,
        otherwise ``written`` (the merge's new files)."""
        return self.sources if self.move else tuple(written)


@runtime_checkable
class MergePolicy(Protocol):
    """Chooses the ledger's next merge. Implementations must be pure (see the module
    docstring): the same levels and turn give an equivalent job, and nothing is changed."""

    def choose(self, levels: Levels[F], *, turn: int) -> MergeJob[F] | None:
        """The next merge ``levels`` needs, or None.

        ``turn`` counts the choices the clerk made before this one (0 for a first or a one-off
        question), for policies that alternate between ways of choosing.
        """
        ...


@dataclass(frozen=True, slots=True)
class LeveledMergePolicy:
    """Leveled's merge choice: all of L0 into L1 first unless a level is fuller than L0, then
    one file of the deepest level over its target into the level below (grooming by tombstones
    and key order alternately)."""

    l1_target_files: int = 4
    level_fanout: int = 8
    grooming_sample: int = GROOMING_SAMPLE
    l0_trigger: int = 4
    """L0 files that make L0 as full as a level at its target;
    :func:`~inkpen.actors.ledger.penciller_clerk.policy_for` makes it half of the options'
    ``max_l0_files`` (6 by default)."""

    def choose(self, levels: Levels[F], *, turn: int) -> MergeJob[F] | None:
        if levels.l0 and not self._fuller_than_l0(levels):
            sources = levels.l0
            lo, hi = key_span(sources)
            return MergeJob(0, 1, sources, levels.overlapping(1, lo, hi), levels.is_basement(1))
        return self._push_down(levels, turn)

    def _fuller_than_l0(self, levels: Levels[F]) -> bool:
        """Whether a level over its target holds more files, as a share of its target, than
        L0 holds as a share of ``l0_trigger`` (in integers: files * trigger > l0 * target)."""
        l0 = len(levels.l0)
        for level in range(1, levels.depth):
            target = level_target(level, self.l1_target_files, self.level_fanout)
            files = len(levels.level(level))
            if files > target and files * self.l0_trigger > l0 * target:
                return True
        return False

    def _push_down(self, levels: Levels[F], turn: int) -> MergeJob[F] | None:
        """The deepest level over its target sends one file down (None: every level is within
        its target)."""
        for level in range(levels.depth - 1, 0, -1):
            files = levels.level(level)
            if len(files) <= level_target(level, self.l1_target_files, self.level_fanout):
                continue
            source = self._pick_source(files, turn)
            below = level + 1
            targets = levels.overlapping(below, source.first_key, source.last_key)
            return MergeJob(
                level,
                below,
                (source,),
                targets,
                levels.is_basement(below),
                move=not targets,
            )
        return None

    def _pick_source(self, files: Sequence[F], turn: int) -> F:
        """Even turns groom (most tombstones among a sample, seeded by the turn so the choice
        is a function of its inputs); odd turns take the next file in key order."""
        if turn % 2 == 0:
            sample = random.Random(turn).sample(list(files), min(self.grooming_sample, len(files)))
            return max(sample, key=lambda f: f.tombstone_count)
        return files[(turn // 2) % len(files)]
