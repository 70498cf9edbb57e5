"""The Spark tasks of a reshard (:mod:`.reshard`): copy one slice of a source shard into the
destination's shards, and fold one slice of either side into what the verification compares.

**The walk** (:func:`live_objects`). A slice is a key range of OBJECT keys at one pinned manifest
(planned as a read's partitions are, :mod:`.plan`). The walk yields every live object of it in
key order with its live index entries: those come from the object's REVERSE entries (``r`` +
bucket + key + field + term, :mod:`inkpen.formats.keys`), which sort in the same order as the
objects, so one second range walk, merged with the first, finds them all (no lookup per object).
It starts at the first object's REVERSE prefix and is read only as far as the last object needs.

**What a copy carries** (:func:`object_puts`). Each live object becomes a put of its value, its
last-modified time and its expiry exactly as the source holds them (not the task's clock), with
one ``add`` spec per live index entry: the destination's ledger then holds what the source's did.
Index entries take their put's expiry. An entry whose own expiry differs from its object's (a put
with a ttl, then a put without one, leaves the first put's entries with the first expiry) goes in
a put of its own before the object's last one, with that expiry: replaying the destination's
journal then rebuilds the same ledger. SQNs are not carried (each destination shard numbers its
rows from its own top) and neither is history: overwritten versions, tombstones and objects that
expired before the copy's instant are not copied. Content hashes are computed again from the
values read, so the verification compares what was written with what was read.

**The fold** (:func:`fold_slice`). Per slice and side: counts (objects, index entries, value
bytes), the slice's :class:`~inkpen.formats.tictac.TicTacTree` of objects (the tree ``inkpen
diff`` compares: key and content hash) and a second tree of what else is carried (each object's
expiry and last-modified time, each index entry with its expiry). Trees of disjoint key sets
merge by XOR, so folds of every slice of every shard merge into the fold of a whole side,
whatever the shard count: the source's shards hold disjoint keys, and so do the destination's
once every key is in the shard :func:`inkpen.shards.shard_of` names, which the destination's
fold checks key by key (``misrouted``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from pyspark import TaskContext

from inkpen.actors.journal.changes import INDEX_ADD, IndexSpec, PendingChange
from inkpen.actors.read.checkpoint_views import ManifestViews, load_views
from inkpen.actors.read.path import SCAN_WINDOW, live_range, window_bodies, window_reader
from inkpen.errors import CorruptionError, NotFoundError
from inkpen.formats.journal import Kind
from inkpen.formats.keys import LedgerValue, Tag, content_hash, object_parts, prefix_end
from inkpen.formats.keys import reverse_parts as reverse_key_parts
from inkpen.formats.tictac import TicTacTree
from inkpen.logs import get_logger
from inkpen.manifest.clones import StoreResolver
from inkpen.objectstore import open_store
from inkpen.options import Options
from inkpen.shards import route_hash, shards_of

from . import gc_pause
from .load_task import LoadedPartition
from .plan import ScanSlice
from .ranges import KeyRange
from .sharded_load import write_routed
from .target import LoadTarget

log = get_logger("inkpen.pipeline")

OBJECT_TAG = bytes([Tag.OBJECT])
REVERSE_TAG = bytes([Tag.REVERSE])
REVERSE_END = prefix_end(REVERSE_TAG)
_TERMINATOR = b"\x00\x00"
_DETAILS = struct.Struct(">QQ")
_NO_EXPIRY = 0

Side = Literal["source", "dest"]
IndexEntry = tuple[bytes, LedgerValue]
"""A live REVERSE entry: its encoded key and its ledger value."""


def reverse_cover(ranges: Sequence[KeyRange]) -> KeyRange:
    """The REVERSE keys of every object in ``ranges`` (sorted OBJECT ranges) lie in this range:
    its SSTs are the ones a slice must open to find the objects' index entries.

    An object key is ``o`` + P + T (P its escaped bucket and key, T the empty subkey's
    terminator), its REVERSE keys ``r`` + P + X with X >= T, so ``r`` + lo[1:] bounds them
    below. Above, an object below ``hi`` has a bucket at most hi's first component, so
    everything it has sorts below the end of that bucket's REVERSE keys (or of the whole tag
    when ``hi`` names no complete bucket)."""
    lo, hi = ranges[0][0], ranges[-1][1]
    lower = REVERSE_TAG + lo[1:] if lo[:1] == OBJECT_TAG else REVERSE_TAG
    upper = REVERSE_END
    if hi[:1] == OBJECT_TAG:
        end = hi.find(_TERMINATOR, 1)
        if end > 0:
            upper = prefix_end(REVERSE_TAG + hi[1 : end + 2])
    return lower, upper


def live_objects(
    views: ManifestViews, ranges: Sequence[KeyRange], now_ms: int
) -> Iterator[tuple[bytes, LedgerValue, list[IndexEntry]]]:
    """Every live object of ``ranges`` in key order, with its live index entries (module doc)."""
    cache, ledger, _ = views.views()
    upper = reverse_cover(ranges)[1]
    entries: Iterator[IndexEntry] | None = None
    pending: IndexEntry | None = None
    for lo, hi in ranges:
        for key, value in live_range(cache, ledger, lo, hi, now_ms):
            prefix = REVERSE_TAG + key[1:-2]  # r + the object's escaped bucket and key
            if entries is None:
                entries = live_range(cache, ledger, prefix, upper, now_ms)
                pending = next(entries, None)
            while pending is not None and pending[0] < prefix:
                pending = next(entries, None)
            found: list[IndexEntry] = []
            while pending is not None and pending[0].startswith(prefix):
                found.append(pending)
                pending = next(entries, None)
            yield key, value, found


def object_puts(
    key: bytes, value: LedgerValue, body: bytes, entries: Sequence[IndexEntry]
) -> list[PendingChange]:
    """The puts that give a destination what the source holds of one object (module doc): the
    last is the object's own."""
    bucket, name = object_parts(key)
    expiry, last_modified = value[2], value[5]
    digest = content_hash(body)
    by_expiry: dict[int | None, list[IndexSpec]] = {}
    for reverse, entry in entries:
        index_field, term = reverse_key_parts(reverse)
        by_expiry.setdefault(entry[2], []).append((INDEX_ADD, index_field, term))
    own = by_expiry.pop(expiry, [])
    puts = [
        _put(key, bucket, name, body, digest, tuple(specs), other, last_modified)
        for other, specs in by_expiry.items()
    ]
    puts.append(_put(key, bucket, name, body, digest, tuple(own), expiry, last_modified))
    return puts


def _put(
    key: bytes,
    bucket: bytes,
    name: bytes,
    body: bytes,
    digest: int,
    specs: tuple[IndexSpec, ...],
    expiry_ms: int | None,
    last_modified_ms: int,
) -> PendingChange:
    weight = len(key) + len(body) + 64 + sum(len(f) + len(t) for _, f, t in specs)
    return PendingChange(
        Kind.OBJECT,
        bucket,
        name,
        key,
        body,
        specs,
        expiry_ms,
        last_modified_ms,
        digest,
        weight,
        None,
    )


# -- the copy ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CopyTask:
    """One slice of one source shard, and where its objects go."""

    index: int
    """The task's number: the partition id its files commit under in every destination shard."""
    source_shard: int
    source_url: str
    checkpoint_id: str
    slice_: ScanSlice
    now_ms: int
    """The instant TTLs are judged at: objects expired by then are not copied."""
    targets: tuple[LoadTarget, ...]
    """The destination's shards, in shard order."""
    skip: frozenset[int]
    """Destination shards that hold this reshard already (committed by an earlier run)."""


@dataclass(frozen=True, slots=True)
class Copied:
    """What one copy task wrote: per destination shard, its files (local SQNs)."""

    index: int
    parts: dict[int, LoadedPartition]
    objects: int
    """Live objects the task read (those routed to skipped shards included)."""
    ms: float


def _attempt() -> int:
    context = TaskContext.get()
    return 0 if context is None else context.attemptNumber()


@contextmanager
def _views(url: str, slice_: ScanSlice, checkpoint_id: str) -> Iterator[ManifestViews]:
    """The views of one slice at its pinned manifest; a file that is gone names the checkpoint
    that should have kept it."""
    store = open_store(url)
    resolver = StoreResolver(store)
    try:
        yield load_views(resolver, slice_.manifest, slice_.manifest_id, Options())
    except NotFoundError as exc:
        raise NotFoundError(
            f"a file of checkpoint {checkpoint_id} is gone from {url} ({exc}): the checkpoint "
            "expired or was deleted while the reshard ran and GC removed the file. Run the "
            "reshard again (a longer checkpoint_lifetime keeps its pins longer)",
            key=exc.key,
        ) from exc
    finally:
        resolver.close()
        store.close()


def copy_slice(task: CopyTask) -> Copied:
    """Read one source slice at its checkpoint and write its objects, routed by shard, as one
    load task's files per destination shard (none are visible until the driver commits them)."""
    started = time.monotonic()
    shards = len(task.targets)
    routed: dict[int, list[PendingChange]] = {}
    objects = 0
    with gc_pause.paused(), _views(task.source_url, task.slice_, task.checkpoint_id) as views:
        read_window = window_reader(views.journal)
        window: list[tuple[bytes, LedgerValue, list[IndexEntry]]] = []
        walk = live_objects(views, task.slice_.ranges, task.now_ms)
        while True:
            window.clear()
            for item in walk:
                window.append(item)
                if len(window) == SCAN_WINDOW:
                    break
            if not window:
                break
            bodies = window_bodies(read_window, [(key, value) for key, value, _ in window])
            numbers = shards_of([object_parts(key) for key, _, _ in window], shards)
            for (key, value, entries), body, shard in zip(window, bodies, numbers, strict=True):
                if body is None:
                    raise CorruptionError(
                        "journal",
                        f"the ledger of {task.source_url} names SQN {value[0]} for key "
                        f"{key!r} but no journal holds it",
                    )
                objects += 1
                if shard not in task.skip:
                    routed.setdefault(shard, []).extend(object_puts(key, value, body, entries))
    with gc_pause.paused():
        parts = write_routed(
            task.targets, routed, partition_id=task.index, attempt=_attempt(), options=Options()
        )
    ms = round((time.monotonic() - started) * 1000, 1)
    log.debug(
        "pipeline.reshard_task_copied",
        source=task.source_url,
        task=task.index,
        objects=objects,
        rows=sum(p.rows for p in parts.values()),
        shards=len(parts),
        ms=ms,
    )
    return Copied(task.index, parts, objects, ms)


# -- the verification -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FoldTask:
    """One slice of one shard of either side, folded at the verification's instant."""

    side: Side
    shard: int
    url: str
    checkpoint_id: str
    slice_: ScanSlice
    now_ms: int
    route_shards: int | None
    """The destination's shard count, to check each key's shard; None for the source."""


@dataclass(frozen=True, slots=True)
class Fold:
    """What the verification compares of a set of slices (module doc); :meth:`merge` adds two
    folds of disjoint key sets."""

    objects: int = 0
    index_entries: int = 0
    value_bytes: int = 0
    misrouted: int = 0
    first_misrouted: tuple[int, bytes, bytes] | None = None
    """(shard, bucket, key) of one key found in a shard it does not route to."""
    tree: TicTacTree = field(default_factory=TicTacTree)
    details: TicTacTree = field(default_factory=TicTacTree)

    def merge(self, other: Fold) -> Fold:
        return Fold(
            self.objects + other.objects,
            self.index_entries + other.index_entries,
            self.value_bytes + other.value_bytes,
            self.misrouted + other.misrouted,
            self.first_misrouted or other.first_misrouted,
            self.tree.merge(other.tree),
            self.details.merge(other.details),
        )


@dataclass(frozen=True, slots=True)
class SideFolds:
    """The folds of both sides, as tasks give them and Spark merges them."""

    source: Fold = field(default_factory=Fold)
    dest: Fold = field(default_factory=Fold)

    def merge(self, other: SideFolds) -> SideFolds:
        return SideFolds(self.source.merge(other.source), self.dest.merge(other.dest))


def _expiry_word(expiry_ms: int | None) -> int:
    return _NO_EXPIRY if expiry_ms is None else expiry_ms + 1


def fold_slice(task: FoldTask) -> SideFolds:
    """The fold of one slice (module doc), from the ledger alone (no journal reads)."""
    tree, details = TicTacTree(), TicTacTree()
    objects = entries_seen = value_bytes = misrouted = 0
    first_misrouted: tuple[int, bytes, bytes] | None = None
    pairs: list[tuple[bytes, int]] = []
    detail_pairs: list[tuple[bytes, int]] = []
    with gc_pause.paused(), _views(task.url, task.slice_, task.checkpoint_id) as views:
        for key, value, entries in live_objects(views, task.slice_.ranges, task.now_ms):
            components = key[1:]
            objects += 1
            value_bytes += value[4]
            pairs.append((components, value[3]))
            detail_pairs.append((components, _details(_expiry_word(value[2]), value[5])))
            for reverse, entry in entries:
                entries_seen += 1
                detail_pairs.append((reverse[1:], _details(_expiry_word(entry[2]), 0)))
            if task.route_shards is not None:
                bucket, name = object_parts(key)
                if route_hash(bucket, name) % task.route_shards != task.shard:
                    misrouted += 1
                    first_misrouted = first_misrouted or (task.shard, bucket, name)
            if len(pairs) >= SCAN_WINDOW:
                tree.add_all(pairs)
                details.add_all(detail_pairs)
                pairs.clear()
                detail_pairs.clear()
        tree.add_all(pairs)
        details.add_all(detail_pairs)
    fold = Fold(objects, entries_seen, value_bytes, misrouted, first_misrouted, tree, details)
    return SideFolds(source=fold) if task.side == "source" else SideFolds(dest=fold)


def _details(expiry_word: int, last_modified_ms: int) -> int:
    """A 64-bit summary of an entry's expiry and last-modified time, the "content hash" the
    details tree folds."""
    return content_hash(_DETAILS.pack(expiry_word, last_modified_ms))


def merge_folds(a: SideFolds, b: SideFolds) -> SideFolds:
    """Spark's reduce function over :func:`fold_slice` results."""
    return a.merge(b)
