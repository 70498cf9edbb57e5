"""The ledger's levels as a pure value: which file is in which level, and how that changes.

This module owns the one level convention of inkpen: a level is named by its
:data:`LevelNo`, and **0 is L0** everywhere (the Penciller's state, its published
:class:`~inkpen.actors.kernel.views.LedgerView`, the manifest's ``LedgerState.levels``, merge jobs,
logs and stats). :class:`Levels` holds the files indexed by that number:

- ``level(0)`` is L0: files written from memory, newest first, possibly overlapping;
- ``level(n)`` for n >= 1 is Ln: files sorted by first key, no two overlapping; level n holds
  about :func:`level_target` files before a merge sends one down;
- the **basement** of a merge into level n: no level below n holds files (see
  :meth:`Levels.is_basement`), so tombstones and expired entries can be dropped there.

A merge's result is applied here, once, by :meth:`Levels.apply` (remove its inputs, add its
outputs to the target level in key order); the Penciller's state, its view and the manifest
change are all derived from that one result, and so are the manifest changes of the compactor
and of a bulk load (:mod:`inkpen.manifest.merging`, :mod:`inkpen.pipeline.commit`). The manifest
keeps its own shape (a tuple of descriptor tuples, also indexed by level number);
:func:`from_manifest` and :meth:`Levels.to_manifest` are the only conversions.

Everything here is pure (no actors, no I/O) and generic over the file type: the Penciller holds
:class:`~inkpen.actors.kernel.views.SstHandle` values, the manifest :class:`SstDescriptor` values;
both are :class:`LevelFile`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from inkpen.manifest.model import LedgerState, SstDescriptor

LevelNo = int
"""A level's number: 0 is L0, 1 is L1, and so on."""


class LevelFile(Protocol):
    """What the level logic needs to know of a file: its name and key range (inclusive)."""

    @property
    def name(self) -> str: ...

    @property
    def first_key(self) -> bytes: ...

    @property
    def last_key(self) -> bytes: ...

    @property
    def tombstone_count(self) -> int: ...


F = TypeVar("F", bound=LevelFile)
G = TypeVar("G", bound=LevelFile)


def level_target(level: LevelNo, l1_target_files: int, level_fanout: int) -> int:
    """How many files level ``level`` (>= 1) holds before it merges one down:
    ``l1_target_files * level_fanout ** (level - 1)``."""
    if level < 1:
        raise ValueError(f"level {level} has no file target: L0 merges whole, not by count")
    return int(l1_target_files * level_fanout ** (level - 1))


def overlaps(file: LevelFile, lo: bytes, hi: bytes) -> bool:
    """Whether ``file``'s key range meets the inclusive range [lo, hi]."""
    return file.first_key <= hi and file.last_key >= lo


def key_span(files: Iterable[LevelFile]) -> tuple[bytes, bytes]:
    """The smallest inclusive key range holding every one of ``files`` (at least one)."""
    listed = list(files)
    if not listed:
        raise ValueError("key_span of no files")
    return min(f.first_key for f in listed), max(f.last_key for f in listed)


class LevelError(ValueError):
    """A level structure that breaks its invariants (a bug in whoever built it)."""


@dataclass(frozen=True, slots=True)
class Levels(Generic[F]):
    """The files of the ledger, indexed by :data:`LevelNo` (``files[0]`` is L0).

    Invariants, checked on construction: L0 keeps its given order (newest first); every deeper
    level is sorted by first key with no two files overlapping; no file name appears twice;
    trailing empty levels are dropped (an empty ``Levels`` has no level at all, and
    :meth:`level` answers ``()`` for any level beyond the deepest).
    """

    files: tuple[tuple[F, ...], ...] = ()

    def __post_init__(self) -> None:
        tiers = [tuple(level) for level in self.files]
        while tiers and not tiers[-1]:
            tiers.pop()
        for number, level in enumerate(tiers):
            if number == 0:
                continue
            for before, after in itertools.pairwise(level):
                if after.first_key <= before.last_key:
                    raise LevelError(
                        f"L{number}: {before.name} and {after.name} overlap or are out of order"
                    )
        names = [f.name for level in tiers for f in level]
        if len(set(names)) != len(names):
            raise LevelError("a file appears twice in the levels")
        object.__setattr__(self, "files", tuple(tiers))

    @classmethod
    def of(cls, l0: Sequence[F] = (), deeper: Sequence[Sequence[F]] = ()) -> Levels[F]:
        """Levels from L0 (newest first) and L1, L2, ... (each sorted here by first key)."""
        return cls((tuple(l0), *(tuple(sorted(lv, key=lambda f: f.first_key)) for lv in deeper)))

    # -- reading ------------------------------------------------------------------------------

    @property
    def l0(self) -> tuple[F, ...]:
        """L0's files, newest first."""
        return self.level(0)

    @property
    def depth(self) -> int:
        """How many levels there are, L0 included: one more than the deepest level with files
        (0 when there are no files at all)."""
        return len(self.files)

    def level(self, level: LevelNo) -> tuple[F, ...]:
        """Level ``level``'s files (``()`` beyond the deepest level)."""
        if level < 0:
            raise ValueError(f"no level {level}: levels are numbered from 0 (L0)")
        return self.files[level] if level < len(self.files) else ()

    def is_basement(self, level: LevelNo) -> bool:
        """True when no level below ``level`` holds files: a merge into ``level`` may drop
        tombstones and expired entries, since nothing older below needs shadowing."""
        return level + 1 >= len(self.files)

    def overlapping(self, level: LevelNo, lo: bytes, hi: bytes) -> tuple[F, ...]:
        """The files of ``level`` whose key range meets the inclusive range [lo, hi], in the
        level's order."""
        return tuple(f for f in self.level(level) if overlaps(f, lo, hi))

    def all_files(self) -> Iterator[F]:
        """Every file, L0 first (newest first), then each level in key order."""
        for level in self.files:
            yield from level

    def counts(self) -> list[int]:
        """Files per level, indexed as the levels are: ``counts()[0]`` is L0's, present (0)
        even when the ledger has no file yet."""
        return [len(level) for level in self.files] or [0]

    def sizes(self, size: Callable[[F], int]) -> list[int]:
        """Bytes per level by ``size`` of each file, indexed as :meth:`counts`."""
        return [sum(size(f) for f in level) for level in self.files] or [0]

    # -- changing (each answers a new value) --------------------------------------------------

    def with_l0(self, *files: F) -> Levels[F]:
        """These levels with ``files`` written to L0 as its newest files (the first newest)."""
        return Levels(((*files, *self.level(0)), *self.files[1:]))

    def apply(self, removed: Iterable[str], target: LevelNo, added: Iterable[F]) -> Levels[F]:
        """A merge's result: drop every file named in ``removed`` from whatever level holds
        it, then put ``added`` into level ``target`` (>= 1) in key order. Raises
        :class:`LevelError` if the result would break the invariants (say, outputs that overlap
        a file the merge did not take)."""
        if target < 1:
            raise ValueError(f"a merge targets L1 or deeper, not L{target}")
        gone = set(removed)
        tiers = [[f for f in level if f.name not in gone] for level in self.files]
        while len(tiers) <= target:
            tiers.append([])
        tiers[target].extend(added)
        tiers[target].sort(key=lambda f: f.first_key)
        return Levels(tuple(tuple(level) for level in tiers))

    def map(self, convert: Callable[[F], G]) -> Levels[G]:
        """The same levels with each file converted (say, handles to their descriptors)."""
        return Levels(tuple(tuple(convert(f) for f in level) for level in self.files))

    # -- the manifest's shape -----------------------------------------------------------------

    def to_manifest(
        self: Levels[SstDescriptor],
    ) -> tuple[tuple[SstDescriptor, ...], ...]:
        """``LedgerState.levels`` for these levels: the same indexing, with L0 always present
        (an empty ledger that has had files keeps an empty L0)."""
        return self.files or ((),)


def from_manifest(ledger: LedgerState) -> Levels[SstDescriptor]:
    """The manifest's ledger levels as :class:`Levels` (``levels[0]`` is L0 in both)."""
    return Levels(ledger.levels)
