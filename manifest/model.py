"""The manifest's values: immutable descriptions of one database's state at one manifest id.

A :class:`Manifest` says everything needed to read the database: the writer and compactor epochs
(and how the writer compacts),
the journal (compacted journal files plus the watermarks over the journal segments), the ledger
(SST files level by level, and the SQN the ledger reflects), the checkpoints that pin older
manifests, the clone parent, and the initialized / destroyed flags.

Every value is a frozen, slotted dataclass that checks its invariants when built, so a manifest
that breaks one can neither be written nor read back. ``to_document`` / ``from_document`` map each
value to a msgpack-friendly document (str keys, bytes kept as bytes, tuples as lists);
:func:`encode` / :func:`decode` frame that document through :mod:`inkpen.formats.manifest_codec`.
Documents from a newer minor version are read leniently: unknown fields are ignored and missing
ones take their defaults.

Invariants checked on construction:

- SQN ranges are ordered (``min_sqn <= max_sqn``) and sizes and counts are non-negative;
- journal files are ordered by ``min_sqn`` and their SQN ranges are disjoint;
- ``0 <= last_rolled_segment < next_segment`` (segment ids start at 1);
- ledger levels below L0 are sorted by ``first_key`` and do not overlap;
- checkpoint ids are unique within a manifest.
"""

from __future__ import annotations

import itertools
import math
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from inkpen.errors import CorruptionError, UsageError
from inkpen.formats.manifest_codec import FORMAT_VERSION, decode_manifest, encode_manifest

CHECKPOINT_KIND = "kind"
"""Metadata key naming who holds a checkpoint: ``writer``, ``reader`` or ``clone``."""
KIND_WRITER = "writer"
KIND_READER = "reader"
KIND_CLONE = "clone"

COMPACTION_INTERNAL = "internal"
COMPACTION_EXTERNAL = "external"
COMPACTION_MODES = (COMPACTION_INTERNAL, COMPACTION_EXTERNAL)
"""Values of :attr:`Manifest.writer_compaction` (the ``compaction`` option of the writer)."""


def _check_int(value: object, what: str, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{what} must be an int >= {minimum}, got {value!r}")
    return value


def _check_root(root: object, what: str) -> str | None:
    if root is not None and (not isinstance(root, str) or not root):
        raise UsageError(f"{what} root must be None or a store URL, got {root!r}")
    return root


def _check_time(value: object, what: str, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise UsageError(f"{what} must be a finite number of seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class SstDescriptor:
    """One ledger SST file: where it lives and what keys and SQNs it covers."""

    name: str
    """Object key, ``ledger/<file-id>.sst``."""
    first_key: bytes
    last_key: bytes
    min_sqn: int
    max_sqn: int
    size: int
    entry_count: int
    tombstone_count: int
    sqn_base: int = 0
    """Added to the SQNs stored in the file to give their SQNs in this database (files written
    before their SQNs were known, as bulk loads are, store SQNs relative to this base)."""
    root: str | None = None
    """Store URL of the database holding the object; None means this database."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError(f"SST name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.first_key, bytes) or not isinstance(self.last_key, bytes):
            raise UsageError(f"SST {self.name}: first_key and last_key must be bytes")
        if self.first_key > self.last_key:
            raise UsageError(f"SST {self.name}: first_key sorts after last_key")
        _check_int(self.min_sqn, f"SST {self.name} min_sqn")
        _check_int(self.max_sqn, f"SST {self.name} max_sqn")
        if self.min_sqn > self.max_sqn:
            raise UsageError(f"SST {self.name}: min_sqn {self.min_sqn} > max_sqn {self.max_sqn}")
        _check_int(self.size, f"SST {self.name} size")
        _check_int(self.entry_count, f"SST {self.name} entry_count")
        _check_int(self.tombstone_count, f"SST {self.name} tombstone_count")
        _check_int(self.sqn_base, f"SST {self.name} sqn_base")
        _check_root(self.root, f"SST {self.name}")

    def with_root(self, root: str | None) -> SstDescriptor:
        """The same file, seen from a database that reaches it through ``root``."""
        return replace(self, root=root)

    def to_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "first_key": self.first_key,
            "last_key": self.last_key,
            "min_sqn": self.min_sqn,
            "max_sqn": self.max_sqn,
            "size": self.size,
            "entry_count": self.entry_count,
            "tombstone_count": self.tombstone_count,
            "sqn_base": self.sqn_base,
            "root": self.root,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> SstDescriptor:
        return cls(
            name=doc["name"],
            first_key=doc["first_key"],
            last_key=doc["last_key"],
            min_sqn=doc["min_sqn"],
            max_sqn=doc["max_sqn"],
            size=doc["size"],
            entry_count=doc["entry_count"],
            tombstone_count=doc["tombstone_count"],
            sqn_base=doc.get("sqn_base", 0),
            root=doc.get("root"),
        )


@dataclass(frozen=True, slots=True)
class JournalFileDescriptor:
    """One compacted journal file: where it lives and which SQNs it holds."""

    name: str
    """Object key, ``journal/compacted/<file-id>.jnl``."""
    min_sqn: int
    max_sqn: int
    size: int
    entry_count: int
    sqn_base: int = 0
    """Added to the SQNs stored in the file to give their SQNs in this database."""
    in_ledger: bool = False
    """True for bulk-loaded files whose entries are already in ledger SSTs; replay skips them."""
    root: str | None = None
    """Store URL of the database holding the object; None means this database."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError(f"journal file name must be a non-empty str, got {self.name!r}")
        _check_int(self.min_sqn, f"journal file {self.name} min_sqn")
        _check_int(self.max_sqn, f"journal file {self.name} max_sqn")
        if self.min_sqn > self.max_sqn:
            raise UsageError(
                f"journal file {self.name}: min_sqn {self.min_sqn} > max_sqn {self.max_sqn}"
            )
        _check_int(self.size, f"journal file {self.name} size")
        _check_int(self.entry_count, f"journal file {self.name} entry_count")
        _check_int(self.sqn_base, f"journal file {self.name} sqn_base")
        if not isinstance(self.in_ledger, bool):
            raise UsageError(f"journal file {self.name}: in_ledger must be a bool")
        _check_root(self.root, f"journal file {self.name}")

    def with_root(self, root: str | None) -> JournalFileDescriptor:
        """The same file, seen from a database that reaches it through ``root``."""
        return replace(self, root=root)

    def to_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "min_sqn": self.min_sqn,
            "max_sqn": self.max_sqn,
            "size": self.size,
            "entry_count": self.entry_count,
            "sqn_base": self.sqn_base,
            "in_ledger": self.in_ledger,
            "root": self.root,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> JournalFileDescriptor:
        return cls(
            name=doc["name"],
            min_sqn=doc["min_sqn"],
            max_sqn=doc["max_sqn"],
            size=doc["size"],
            entry_count=doc["entry_count"],
            sqn_base=doc.get("sqn_base", 0),
            in_ledger=doc.get("in_ledger", False),
            root=doc.get("root"),
        )


@dataclass(frozen=True, slots=True)
class JournalState:
    """The journal part of the manifest: compacted files and the segment watermarks.

    ``files`` are ordered by ``min_sqn`` with disjoint SQN ranges. Every segment id up to
    ``last_rolled_segment`` has been rolled into ``files`` (or was an empty fence);
    ``next_segment`` is the first segment id not known to be written when this manifest was made.
    The segments a reader of this manifest replays are the ids in
    ``(last_rolled_segment, next_segment)`` (for the latest manifest: every id after
    ``last_rolled_segment`` that the journal holds).
    """

    files: tuple[JournalFileDescriptor, ...] = ()
    last_rolled_segment: int = 0
    next_segment: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))
        for f in self.files:
            if not isinstance(f, JournalFileDescriptor):
                raise UsageError(f"journal files must be JournalFileDescriptor, got {f!r}")
        for before, after in itertools.pairwise(self.files):
            if after.min_sqn <= before.max_sqn:
                raise UsageError(
                    f"journal files {before.name} (SQN {before.min_sqn}-{before.max_sqn}) and "
                    f"{after.name} (SQN {after.min_sqn}-{after.max_sqn}) are out of order or "
                    "overlap; journal files must be ordered by SQN with disjoint ranges"
                )
        _check_int(self.last_rolled_segment, "last_rolled_segment")
        _check_int(self.next_segment, "next_segment", minimum=1)
        if self.next_segment <= self.last_rolled_segment:
            raise UsageError(
                f"next_segment {self.next_segment} must be above last_rolled_segment "
                f"{self.last_rolled_segment}"
            )

    def unrolled_segments(self) -> range:
        """The segment ids a reader of this manifest replays: (last_rolled, next_segment)."""
        return range(self.last_rolled_segment + 1, self.next_segment)

    def to_document(self) -> dict[str, Any]:
        return {
            "files": [f.to_document() for f in self.files],
            "last_rolled_segment": self.last_rolled_segment,
            "next_segment": self.next_segment,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> JournalState:
        return cls(
            files=tuple(JournalFileDescriptor.from_document(f) for f in doc.get("files", ())),
            # Manifests written before the rename call it "last_folded_segment".
            last_rolled_segment=doc.get("last_rolled_segment", doc.get("last_folded_segment", 0)),
            next_segment=doc.get("next_segment", 1),
        )


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The ledger part of the manifest: SST files level by level, and the persisted SQN.

    ``levels[0]`` is L0, newest first, whose files may overlap; each deeper level is sorted by
    ``first_key`` with no two files overlapping. Every journal entry with an SQN at or below
    ``persisted_sqn`` is reflected in these files.
    """

    levels: tuple[tuple[SstDescriptor, ...], ...] = ()
    persisted_sqn: int = 0

    def __post_init__(self) -> None:
        levels = tuple(tuple(level) for level in self.levels)
        object.__setattr__(self, "levels", levels)
        for depth, level in enumerate(levels):
            for sst in level:
                if not isinstance(sst, SstDescriptor):
                    raise UsageError(f"ledger level {depth} holds {sst!r}, not an SstDescriptor")
            if depth == 0:
                continue
            for before, after in itertools.pairwise(level):
                if after.first_key <= before.last_key:
                    raise UsageError(
                        f"ledger level {depth}: {before.name} and {after.name} overlap or are "
                        "out of order; levels below L0 must be sorted and non-overlapping"
                    )
        _check_int(self.persisted_sqn, "persisted_sqn")

    def ssts(self) -> Iterable[SstDescriptor]:
        """Every SST, level by level."""
        for level in self.levels:
            yield from level

    def to_document(self) -> dict[str, Any]:
        return {
            "levels": [[s.to_document() for s in level] for level in self.levels],
            "persisted_sqn": self.persisted_sqn,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> LedgerState:
        return cls(
            levels=tuple(
                tuple(SstDescriptor.from_document(s) for s in level)
                for level in doc.get("levels", ())
            ),
            persisted_sqn=doc.get("persisted_sqn", 0),
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A named pin on one manifest id: GC keeps that manifest and every file it references.

    ``expire_time`` None means the checkpoint never expires (its holder must delete it).
    ``metadata`` says who holds it: ``{"kind": "writer", "epoch": "E"}`` for a writer,
    ``{"kind": "reader"}`` for a reader's lease, ``{"kind": "clone", "clone": URL}`` for a clone.
    """

    id: str
    manifest_id: int
    create_time: float
    expire_time: float | None = None
    name: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise UsageError(f"checkpoint id must be a non-empty str, got {self.id!r}")
        _check_int(self.manifest_id, f"checkpoint {self.id} manifest_id", minimum=1)
        _check_time(self.create_time, f"checkpoint {self.id} create_time", optional=False)
        _check_time(self.expire_time, f"checkpoint {self.id} expire_time", optional=True)
        if self.name is not None and not isinstance(self.name, str):
            raise UsageError(f"checkpoint {self.id} name must be a str or None")
        if not isinstance(self.metadata, Mapping):
            raise UsageError(f"checkpoint {self.id} metadata must be a mapping of str to str")
        for k, v in self.metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise UsageError(f"checkpoint {self.id} metadata must map str to str")
        object.__setattr__(self, "metadata", types.MappingProxyType(dict(self.metadata)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            Checkpoint,
            (
                self.id,
                self.manifest_id,
                self.create_time,
                self.expire_time,
                self.name,
                dict(self.metadata),
            ),
        )

    @property
    def kind(self) -> str | None:
        """Who holds the checkpoint (``writer``, ``reader``, ``clone``), from its metadata."""
        return self.metadata.get(CHECKPOINT_KIND)

    def is_live(self, now: float) -> bool:
        """True until ``expire_time`` has passed (always, when it never expires)."""
        return self.expire_time is None or now < self.expire_time

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "manifest_id": self.manifest_id,
            "create_time": self.create_time,
            "expire_time": self.expire_time,
            "name": self.name,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Checkpoint:
        return cls(
            id=doc["id"],
            manifest_id=doc["manifest_id"],
            create_time=doc["create_time"],
            expire_time=doc.get("expire_time"),
            name=doc.get("name"),
            metadata=doc.get("metadata") or {},
        )


@dataclass(frozen=True, slots=True)
class FeedCursor:
    """A change-feed consumer's position: it has read every change up to ``sqn``.

    While the cursor is live, journal compaction keeps every journal entry above the lowest live
    cursor's ``sqn``, so the consumer meets no gap. With a ``lifetime`` (seconds) the cursor
    expires that long after it was last created or advanced; None never expires. ``owner`` says
    who made it (free text, e.g. ``spark stream ...``; None in manifests written before it was
    recorded), ``advance_time`` when it was last created, advanced or renewed (None: never
    recorded, read ``create_time``).
    """

    name: str
    sqn: int
    create_time: float
    expire_time: float | None = None
    lifetime: float | None = None
    owner: str | None = None
    advance_time: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError(f"feed cursor name must be a non-empty str, got {self.name!r}")
        _check_int(self.sqn, f"feed cursor {self.name} sqn")
        _check_time(self.create_time, f"feed cursor {self.name} create_time", optional=False)
        _check_time(self.expire_time, f"feed cursor {self.name} expire_time", optional=True)
        _check_time(self.lifetime, f"feed cursor {self.name} lifetime", optional=True)
        _check_time(self.advance_time, f"feed cursor {self.name} advance_time", optional=True)
        if self.owner is not None and not isinstance(self.owner, str):
            raise UsageError(f"feed cursor {self.name} owner must be a str or None")

    def is_live(self, now: float) -> bool:
        """True until ``expire_time`` has passed (always, when it never expires)."""
        return self.expire_time is None or now < self.expire_time

    def to_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sqn": self.sqn,
            "create_time": self.create_time,
            "expire_time": self.expire_time,
            "lifetime": self.lifetime,
            "owner": self.owner,
            "advance_time": self.advance_time,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> FeedCursor:
        return cls(
            name=doc["name"],
            sqn=doc["sqn"],
            create_time=doc["create_time"],
            expire_time=doc.get("expire_time"),
            lifetime=doc.get("lifetime"),
            owner=doc.get("owner"),
            advance_time=doc.get("advance_time"),
        )


MAX_LOAD_RECORDS = 256
"""A manifest remembers the ids of this many of its most recent bulk loads (the oldest go)."""


@dataclass(frozen=True, slots=True)
class LoadRecord:
    """A committed bulk load that carried a ``load_id``: recorded by the load's own manifest
    update, so a retried job with the same id finds it and commits nothing twice."""

    load_id: str
    commit_time: float
    rows: int
    first_sqn: int
    last_sqn: int

    def __post_init__(self) -> None:
        if not isinstance(self.load_id, str) or not self.load_id:
            raise UsageError(
                f"a load record's load_id must be a non-empty str, got {self.load_id!r}"
            )
        _check_time(self.commit_time, f"load {self.load_id} commit_time", optional=False)
        _check_int(self.rows, f"load {self.load_id} rows")
        _check_int(self.first_sqn, f"load {self.load_id} first_sqn")
        _check_int(self.last_sqn, f"load {self.load_id} last_sqn")

    def to_document(self) -> dict[str, Any]:
        return {
            "load_id": self.load_id,
            "commit_time": self.commit_time,
            "rows": self.rows,
            "first_sqn": self.first_sqn,
            "last_sqn": self.last_sqn,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> LoadRecord:
        return cls(
            load_id=doc["load_id"],
            commit_time=doc["commit_time"],
            rows=doc["rows"],
            first_sqn=doc["first_sqn"],
            last_sqn=doc["last_sqn"],
        )


@dataclass(frozen=True, slots=True)
class CloneParent:
    """Where a clone came from: the parent's store URL and the checkpoint pinning it there."""

    root: str
    checkpoint_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.root, str) or not self.root:
            raise UsageError(f"clone parent root must be a store URL, got {self.root!r}")
        if not isinstance(self.checkpoint_id, str) or not self.checkpoint_id:
            raise UsageError("clone parent checkpoint_id must be a non-empty str")

    def to_document(self) -> dict[str, Any]:
        return {"root": self.root, "checkpoint_id": self.checkpoint_id}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> CloneParent:
        return cls(root=doc["root"], checkpoint_id=doc["checkpoint_id"])


@dataclass(frozen=True, slots=True)
class Manifest:
    """The whole state of one database at one manifest id."""

    format_version: int = FORMAT_VERSION
    writer_epoch: int = 0
    compactor_epoch: int = 0
    journal: JournalState = field(default_factory=JournalState)
    ledger: LedgerState = field(default_factory=LedgerState)
    checkpoints: tuple[Checkpoint, ...] = ()
    parent: CloneParent | None = None
    initialized: bool = True
    """False while a clone is being created; true for every other database."""
    destroyed_at: float | None = None
    """Seconds since the epoch at which the database was destroyed; None while it lives."""
    head_only: str | None = None
    """``"with_lookup"`` / ``"no_lookup"`` for a head-only store (fixed at creation), else None."""
    feed_cursors: tuple[FeedCursor, ...] = ()
    """Change-feed positions that hold journal compaction off the entries above them."""
    writer_compaction: str = COMPACTION_INTERNAL
    """How the writer of ``writer_epoch`` compacts: ``"internal"`` (it merges and collects
    itself; manifests from before this field read so) or ``"external"`` (a compactor process
    does). A compactor refuses to start beside an internal writer
    (docs/ledger.md, 'External compaction')."""
    merge_operators: tuple[str, ...] = ()
    """Names of the merge operators the database was written with (sorted; recorded by the first
    merge with each). A writer must be opened with an operator of each name; manifests from
    before this field read as none."""
    loads: tuple[LoadRecord, ...] = ()
    """The most recent bulk loads that carried a ``load_id`` (at most :data:`MAX_LOAD_RECORDS`,
    oldest first): a retried load with one of these ids commits nothing."""
    segments_in_flight: int = 1
    """The most journal segment writes any writer of this database kept in flight at once (the
    largest ``segments_in_flight`` a claim recorded; it only goes up). A fenced writer's writes
    still in flight may land up to this many slots minus one above the next writer's fence, so
    that writer writes those slots one at a time (docs/manifest.md, 'Writer epochs and fencing').
    Left out of the document at 1; manifests from before this field read as 1 (writers wrote one
    at a time)."""

    def __post_init__(self) -> None:
        if (
            not isinstance(self.format_version, int)
            or not 1 <= self.format_version <= FORMAT_VERSION
        ):
            raise UsageError(
                f"manifest format_version must be 1..{FORMAT_VERSION}, got {self.format_version!r}"
            )
        _check_int(self.writer_epoch, "writer_epoch")
        _check_int(self.compactor_epoch, "compactor_epoch")
        if not isinstance(self.journal, JournalState):
            raise UsageError("manifest journal must be a JournalState")
        if not isinstance(self.ledger, LedgerState):
            raise UsageError("manifest ledger must be a LedgerState")
        checkpoints = tuple(self.checkpoints)
        object.__setattr__(self, "checkpoints", checkpoints)
        seen: set[str] = set()
        for cp in checkpoints:
            if not isinstance(cp, Checkpoint):
                raise UsageError(f"manifest checkpoints must be Checkpoint values, got {cp!r}")
            if cp.id in seen:
                raise UsageError(f"checkpoint id {cp.id} appears twice in one manifest")
            seen.add(cp.id)
        if self.parent is not None and not isinstance(self.parent, CloneParent):
            raise UsageError("manifest parent must be a CloneParent or None")
        if not isinstance(self.initialized, bool):
            raise UsageError("manifest initialized must be a bool")
        _check_time(self.destroyed_at, "destroyed_at", optional=True)
        if self.head_only not in (None, "with_lookup", "no_lookup"):
            raise UsageError(
                f"manifest head_only must be None, with_lookup or no_lookup, got {self.head_only!r}"
            )
        if self.writer_compaction not in COMPACTION_MODES:
            raise UsageError(
                "manifest writer_compaction must be internal or external, got "
                f"{self.writer_compaction!r}"
            )
        operators = tuple(self.merge_operators)
        if not all(isinstance(name, str) and name for name in operators):
            raise UsageError(f"manifest merge_operators must be names, got {operators!r}")
        object.__setattr__(self, "merge_operators", operators)
        cursors = tuple(self.feed_cursors)
        object.__setattr__(self, "feed_cursors", cursors)
        names: set[str] = set()
        for cursor in cursors:
            if not isinstance(cursor, FeedCursor):
                raise UsageError(f"manifest feed_cursors must be FeedCursor values, got {cursor!r}")
            if cursor.name in names:
                raise UsageError(f"feed cursor {cursor.name} appears twice in one manifest")
            names.add(cursor.name)
        _check_int(self.segments_in_flight, "segments_in_flight", minimum=1)
        loads = tuple(self.loads)
        object.__setattr__(self, "loads", loads)
        if not all(isinstance(record, LoadRecord) for record in loads):
            raise UsageError("manifest loads must be LoadRecord values")

    # -- questions -------------------------------------------------------------------------------

    @property
    def destroyed(self) -> bool:
        return self.destroyed_at is not None

    def live_checkpoints(self, now: float) -> tuple[Checkpoint, ...]:
        """The checkpoints that have not expired at ``now``."""
        return tuple(cp for cp in self.checkpoints if cp.is_live(now))

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        """The checkpoint with this id, or None."""
        for cp in self.checkpoints:
            if cp.id == checkpoint_id:
                return cp
        return None

    def feed_cursor(self, name: str) -> FeedCursor | None:
        """The feed cursor with this name, or None."""
        for cursor in self.feed_cursors:
            if cursor.name == name:
                return cursor
        return None

    def feed_floor(self, now: float) -> int | None:
        """The lowest SQN a live feed cursor has reached (entries above it are kept), or None."""
        return min((c.sqn for c in self.feed_cursors if c.is_live(now)), default=None)

    def load(self, load_id: str) -> LoadRecord | None:
        """The record of the committed bulk load with this ``load_id``, or None."""
        for record in self.loads:
            if record.load_id == load_id:
                return record
        return None

    def with_load(self, record: LoadRecord) -> Manifest:
        """Record a committed bulk load, forgetting the oldest beyond :data:`MAX_LOAD_RECORDS`."""
        kept = tuple(r for r in self.loads if r.load_id != record.load_id)
        return replace(self, loads=(*kept, record)[-MAX_LOAD_RECORDS:])

    def referenced_objects(self) -> frozenset[tuple[str | None, str]]:
        """``(root, name)`` of every SST and compacted journal file this manifest references."""
        refs: set[tuple[str | None, str]] = {(s.root, s.name) for s in self.ledger.ssts()}
        refs.update((f.root, f.name) for f in self.journal.files)
        return frozenset(refs)

    def sst_count(self) -> int:
        return sum(len(level) for level in self.ledger.levels)

    # -- conveniences that build a changed copy -------------------------------------------

    def with_journal(self, journal: JournalState) -> Manifest:
        return replace(self, journal=journal)

    def with_ledger(self, ledger: LedgerState) -> Manifest:
        return replace(self, ledger=ledger)

    def with_checkpoint(self, checkpoint: Checkpoint) -> Manifest:
        """Add ``checkpoint``, replacing any checkpoint with the same id."""
        kept = tuple(cp for cp in self.checkpoints if cp.id != checkpoint.id)
        return replace(self, checkpoints=(*kept, checkpoint))

    def without_checkpoint(self, checkpoint_id: str) -> Manifest:
        return replace(
            self, checkpoints=tuple(cp for cp in self.checkpoints if cp.id != checkpoint_id)
        )

    def without_checkpoints_of_kind(self, kind: str) -> Manifest:
        return replace(self, checkpoints=tuple(cp for cp in self.checkpoints if cp.kind != kind))

    # -- documents -------------------------------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        document = {
            "format_version": self.format_version,
            "writer_epoch": self.writer_epoch,
            "compactor_epoch": self.compactor_epoch,
            "journal": self.journal.to_document(),
            "ledger": self.ledger.to_document(),
            "checkpoints": [cp.to_document() for cp in self.checkpoints],
            "parent": None if self.parent is None else self.parent.to_document(),
            "initialized": self.initialized,
            "destroyed_at": self.destroyed_at,
            "head_only": self.head_only,
            "feed_cursors": [c.to_document() for c in self.feed_cursors],
            "writer_compaction": self.writer_compaction,
            "loads": [record.to_document() for record in self.loads],
        }
        if self.merge_operators:  # absent otherwise: a store without them writes what it did
            document["merge_operators"] = list(self.merge_operators)
        if self.segments_in_flight != 1:  # likewise
            document["segments_in_flight"] = self.segments_in_flight
        return document

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Manifest:
        parent = doc.get("parent")
        return cls(
            format_version=doc.get("format_version", FORMAT_VERSION),
            writer_epoch=doc.get("writer_epoch", 0),
            compactor_epoch=doc.get("compactor_epoch", 0),
            journal=JournalState.from_document(doc.get("journal") or {}),
            ledger=LedgerState.from_document(doc.get("ledger") or {}),
            checkpoints=tuple(Checkpoint.from_document(c) for c in doc.get("checkpoints", ())),
            parent=None if parent is None else CloneParent.from_document(parent),
            initialized=doc.get("initialized", True),
            destroyed_at=doc.get("destroyed_at"),
            head_only=doc.get("head_only"),
            feed_cursors=tuple(FeedCursor.from_document(c) for c in doc.get("feed_cursors", ())),
            writer_compaction=doc.get("writer_compaction", COMPACTION_INTERNAL),
            merge_operators=tuple(doc.get("merge_operators", ())),
            loads=tuple(LoadRecord.from_document(r) for r in doc.get("loads", ())),
            segments_in_flight=doc.get("segments_in_flight", 1),
        )


@dataclass(frozen=True, slots=True)
class VersionedManifest:
    """A manifest together with the id it was stored under."""

    id: int
    manifest: Manifest


def encode(manifest: Manifest) -> bytes:
    """The stored form of ``manifest`` (framed, versioned, checksummed)."""
    return encode_manifest(manifest.to_document(), version=manifest.format_version)


def decode(data: bytes, name: str) -> Manifest:
    """Read a stored manifest; ``name`` (the object key) labels errors.

    Raises :class:`CorruptionError` when the framing fails its checks or the document does not
    describe a valid manifest.
    """
    document = decode_manifest(data, name)
    try:
        return Manifest.from_document(document)
    except (KeyError, TypeError, AttributeError, UsageError) as exc:
        raise CorruptionError(name, f"manifest document is invalid: {exc}") from exc
