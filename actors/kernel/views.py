"""Immutable state the actors publish for readers: the read path's only inputs.

Each owning actor builds a new view value whenever its state changes and publishes it on the
:class:`ViewBoard` with one attribute assignment; readers (application threads, snapshots, folds)
take the current values and never block an actor or wait for one. Nothing in a view is ever
mutated after it is published, so any number of threads may read one.

Publication order keeps readers from missing data. A reader takes the Bookie's view, then the
Penciller's, then the Inker's. So:

- the Inker publishes a batch's journal entries *before* the Bookie caches their ledger entries
  (a ledger SQN always has its value readable);
- the Penciller publishes pushed ledger entries *before* the Bookie drops them from its cache;
- the Penciller swaps its memory for a new SST in one view; the Inker swaps rolled segments for
  a journal file in one view.

A reader that still finds nothing where its views promised something (a journal file dropped by
compaction after the reader took its ledger view) simply takes fresh views and looks again.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pykka

from inkpen.formats.bloom import bloom_hash
from inkpen.formats.journal import JournalEntry, JournalReader, Kind
from inkpen.formats.keys import LedgerValue
from inkpen.formats.sst import SstReader
from inkpen.manifest.levels import Levels
from inkpen.manifest.model import JournalFileDescriptor, SstDescriptor
from inkpen.manifest.table_store import Segment


class MemTable:
    """An immutable set of ledger entries: a dict for lookups and, once asked for, sorted keys.

    ``min_sqn``/``max_sqn`` bound the SQNs inside. Tables never change after construction; the
    sorted key list is computed on first use and cached (two threads computing it at once build
    equal lists, so the race is harmless).
    """

    __slots__ = ("_keys", "entries", "max_sqn", "min_sqn")

    def __init__(self, entries: dict[bytes, LedgerValue], min_sqn: int, max_sqn: int) -> None:
        self.entries = entries
        self.min_sqn = min_sqn
        self.max_sqn = max_sqn
        self._keys: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def of(cls, pairs: Sequence[tuple[bytes, LedgerValue]]) -> MemTable:
        """A table from (key, value) pairs in SQN order; a later pair for a key wins."""
        entries = dict(pairs)
        sqns = [v[0] for _, v in pairs]
        return cls(entries, min(sqns, default=0), max(sqns, default=0))

    @classmethod
    def merged(cls, tables: Sequence[MemTable]) -> MemTable:
        """One table from several, given newest first: the newest value of each key wins."""
        entries: dict[bytes, LedgerValue] = {}
        for table in reversed(tables):
            entries.update(table.entries)
        return cls(
            entries,
            min((t.min_sqn for t in tables), default=0),
            max((t.max_sqn for t in tables), default=0),
        )

    def sorted_keys(self) -> list[bytes]:
        keys = self._keys
        if keys is None:
            keys = sorted(self.entries)
            self._keys = keys
        return keys

    def iter_range(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, LedgerValue]]:
        """Entries with lo <= key < hi in key order, descending with ``reverse`` (None:
        unbounded)."""
        keys = self.sorted_keys()
        i = 0 if lo is None else bisect.bisect_left(keys, lo)
        j = len(keys) if hi is None else bisect.bisect_left(keys, hi)
        entries = self.entries
        for k in reversed(keys[i:j]) if reverse else keys[i:j]:
            yield k, entries[k]


@dataclass(frozen=True, slots=True)
class SstHandle:
    """One ledger file as readers see it: its manifest descriptor, its reader, its clerk."""

    descriptor: SstDescriptor
    reader: SstReader
    clerk: pykka.ActorRef[Any] | None = None

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    def first_key(self) -> bytes:
        return self.descriptor.first_key

    @property
    def last_key(self) -> bytes:
        return self.descriptor.last_key

    @property
    def tombstone_count(self) -> int:
        return self.descriptor.tombstone_count


@dataclass(frozen=True, slots=True)
class Level:
    """One level below L0: files in key order, non-overlapping, with first keys for bisect."""

    files: tuple[SstHandle, ...] = ()
    first_keys: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, files: Sequence[SstHandle]) -> Level:
        ordered = tuple(sorted(files, key=lambda h: h.descriptor.first_key))
        return cls(ordered, tuple(h.descriptor.first_key for h in ordered))

    def find(self, key: bytes) -> SstHandle | None:
        """The file whose key range holds ``key``, if any."""
        i = bisect.bisect_right(self.first_keys, key) - 1
        if i < 0:
            return None
        handle = self.files[i]
        return handle if key <= handle.descriptor.last_key else None

    def overlapping(self, lo: bytes | None, hi: bytes | None) -> tuple[SstHandle, ...]:
        """Files that may hold keys in [lo, hi) (None: unbounded), in key order."""
        return tuple(
            h
            for h in self.files
            if (hi is None or h.descriptor.first_key < hi)
            and (lo is None or h.descriptor.last_key >= lo)
        )


@dataclass(frozen=True, slots=True)
class LedgerView:
    """The Penciller's published state: memory tables and the ledger's files by level.

    ``files`` is the :class:`~inkpen.manifest.levels.Levels` the Penciller holds (level
    numbers as everywhere: 0 is L0). ``levels`` is built from it for lookups: ``levels[n]`` is
    Ln ready for bisect, for n >= 1; ``levels[0]`` is always empty, L0's files overlapping and
    so being searched one by one from :attr:`l0`.
    """

    manifest_id: int = 0
    mem: tuple[MemTable, ...] = ()
    """Newest first."""
    files: Levels[SstHandle] = field(default_factory=Levels)
    persisted_sqn: int = 0
    levels: tuple[Level, ...] = field(init=False, default=())
    """Indexed by level number; ``levels[0]`` is empty (see the class docstring)."""
    l0_files: tuple[SstHandle, ...] = field(init=False, default=())
    """:attr:`l0`, kept for point lookups (a field, not a property, on the hot path)."""

    def __post_init__(self) -> None:
        levels = tuple(Level.of(self.files.level(n)) for n in range(1, self.files.depth))
        object.__setattr__(self, "levels", (Level(), *levels))
        object.__setattr__(self, "l0_files", self.files.l0)

    @property
    def l0(self) -> tuple[SstHandle, ...]:
        """L0's files: newest first; they may overlap."""
        return self.files.l0

    def get(self, key: bytes) -> LedgerValue | None:
        """The newest ledger value of ``key`` (possibly a tombstone), or None.

        The first file consulted hashes the key for its bloom filter only if it must (a block
        it keeps decoded answers without the filter); the hash is then computed once here and
        shared by every file after it.
        """
        for table in self.mem:
            value = table.entries.get(key)
            if value is not None:
                return value
        key_hash = None
        for handle in self.l0_files:
            reader = handle.reader
            info = reader.info
            if info.first_key <= key <= info.last_key:
                value = reader.get(key, key_hash=key_hash)
                if value is not None:
                    return value
                if key_hash is None:
                    key_hash = bloom_hash(key)
        for level in self.levels:  # Level.find written out: every get passes here per level
            i = bisect.bisect_right(level.first_keys, key) - 1
            if i < 0:
                continue
            found = level.files[i]
            if key <= found.descriptor.last_key:
                value = found.reader.get(key, key_hash=key_hash)
                if value is not None:
                    return value
                if key_hash is None:
                    key_hash = bloom_hash(key)
        return None

    def mem_entries(self) -> int:
        return sum(len(t) for t in self.mem)

    def handles(self) -> Iterator[SstHandle]:
        """Every ledger file, L0 first."""
        return self.files.all_files()


@dataclass(frozen=True, slots=True)
class JournalHandle:
    """One journal file as readers see it: descriptor, reader, clerk."""

    descriptor: JournalFileDescriptor
    reader: JournalReader
    clerk: pykka.ActorRef[Any] | None = None

    @property
    def name(self) -> str:
        return self.descriptor.name


@dataclass(frozen=True, slots=True)
class SegmentTable:
    """The entries of one written journal segment, held in memory until it is rolled."""

    segment_id: int
    first_sqn: int
    last_sqn: int
    entries: dict[int, JournalEntry]
    size: int

    @classmethod
    def read_back(cls, segment: Segment) -> SegmentTable:
        """The table of a segment read back from the store (start-up, read-only views)."""
        entries = segment.entries
        return cls(
            segment.id, entries[0].sqn, entries[-1].sqn, {e.sqn: e for e in entries}, segment.size
        )


def segment_entries(segments: Iterable[SegmentTable]) -> Iterator[JournalEntry]:
    """The entries of segments (in segment order) in SQN order: what a roll writes."""
    for segment in segments:
        entries = segment.entries
        for sqn in sorted(entries):
            yield entries[sqn]


@dataclass(frozen=True, slots=True)
class JournalView:
    """The Inker's published state: journal files and the unrolled segments in memory."""

    files: tuple[JournalHandle, ...] = ()
    """Ordered by min SQN; their SQN ranges are disjoint."""
    segments: tuple[SegmentTable, ...] = ()
    """Written, not yet rolled; ordered by segment id (and so by SQN)."""
    manifest_id: int = 0
    _file_mins: tuple[int, ...] = field(default=(), repr=False)
    _segment_mins: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def of(
        cls,
        files: Sequence[JournalHandle],
        segments: Sequence[SegmentTable],
        manifest_id: int,
    ) -> JournalView:
        ordered = tuple(sorted(files, key=lambda h: h.descriptor.min_sqn))
        return cls(
            ordered,
            tuple(segments),
            manifest_id,
            tuple(h.descriptor.min_sqn for h in ordered),
            tuple(s.first_sqn for s in segments),
        )

    def with_segment(self, segment: SegmentTable) -> JournalView:
        """This view plus one newly written segment."""
        return JournalView(
            self.files,
            (*self.segments, segment),
            self.manifest_id,
            self._file_mins,
            (*self._segment_mins, segment.first_sqn),
        )

    def entry(self, sqn: int, kind: Kind, ledger_key: bytes) -> JournalEntry | None:
        """The journal entry with this key, from memory or through a file's reader."""
        i = bisect.bisect_right(self._segment_mins, sqn) - 1
        if i >= 0 and sqn <= self.segments[i].last_sqn:
            found = self.segments[i].entries.get(sqn)
            if found is not None and found.ledger_key == ledger_key and found.kind == kind:
                return found
            return None
        i = bisect.bisect_right(self._file_mins, sqn) - 1
        if i >= 0:
            handle = self.files[i]
            if sqn <= handle.descriptor.max_sqn:
                return handle.reader.get(sqn, kind, ledger_key)
        return None

    def place(self, sqn: int) -> SegmentTable | int | None:
        """Where ``sqn`` lives: the unrolled segment holding it, the index in :attr:`files` of
        the journal file whose SQN range holds it, or None."""
        i = bisect.bisect_right(self._segment_mins, sqn) - 1
        if i >= 0 and sqn <= self.segments[i].last_sqn:
            return self.segments[i]
        i = bisect.bisect_right(self._file_mins, sqn) - 1
        if i >= 0 and sqn <= self.files[i].descriptor.max_sqn:
            return i
        return None

    def value(self, sqn: int, kind: Kind, ledger_key: bytes) -> bytes | None:
        """:meth:`entry`'s object body alone (``b""`` for an entry without one), or None."""
        i = bisect.bisect_right(self._segment_mins, sqn) - 1
        if i >= 0 and sqn <= self.segments[i].last_sqn:
            found = self.segments[i].entries.get(sqn)
            if found is not None and found.ledger_key == ledger_key and found.kind == kind:
                return found.value or b""
            return None
        i = bisect.bisect_right(self._file_mins, sqn) - 1
        if i >= 0:
            handle = self.files[i]
            if sqn <= handle.descriptor.max_sqn:
                return handle.reader.value(sqn, kind, ledger_key)
        return None

    def max_sqn(self) -> int:
        if self.segments:
            return self.segments[-1].last_sqn
        return max((h.descriptor.max_sqn for h in self.files), default=0)

    def segment_bytes(self) -> int:
        return sum(s.size for s in self.segments)


@dataclass(frozen=True, slots=True)
class CacheView:
    """The Bookie's published ledger cache: tables of recent changes, newest first."""

    tables: tuple[MemTable, ...] = ()

    def get(self, key: bytes) -> LedgerValue | None:
        for table in self.tables:
            value = table.entries.get(key)
            if value is not None:
                return value
        return None

    def entries(self) -> int:
        return sum(len(t) for t in self.tables)


class ViewBoard:
    """Where the three owners publish their current views; readers take them in order.

    Attribute reads and writes are atomic under the interpreter lock, so publishing is a single
    assignment and taking a consistent set is reading ``cache``, ``ledger``, ``journal`` in that
    order (see the module docstring for why that order).
    """

    __slots__ = ("cache", "journal", "ledger")

    def __init__(self) -> None:
        self.cache = CacheView()
        self.ledger = LedgerView()
        self.journal = JournalView()

    def take(self) -> tuple[CacheView, LedgerView, JournalView]:
        cache = self.cache
        ledger = self.ledger
        journal = self.journal
        return cache, ledger, journal
