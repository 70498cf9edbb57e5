"""The read path: point reads and streaming folds over published views.

Everything here runs in the reader's thread over immutable views, never inside an actor: a GET is
a ledger lookup (the Bookie's cache, then the Penciller's memory, L0 and levels, bloom filters
first) which, for a value of at most ``inline_value_bytes``, holds the value itself; a larger
value takes one journal lookup by SQN. Folds merge every ledger source in key order
(``heapq.merge``; where sources share a key the most recent source wins) and stream: nothing is
loaded whole, each SST block is read when the fold reaches it, or a little before with a
read-ahead (:mod:`.ahead`: the next blocks and files read while the current ones are decoded,
within ``read_ahead_bytes``).

A point read that finds a file gone (a merge or a compaction finished and the file was deleted
after the reader took its views) takes fresh views and tries again; if files keep vanishing it
raises the :class:`NotFoundError` (a missing object is never reported as corruption: a
:class:`~inkpen.Reader` turns it into a lapsed-checkpoint error when its pin lapsed).
"""

from __future__ import annotations

import bisect
import heapq
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal, Protocol

from inkpen.actors.kernel.views import CacheView, JournalView, LedgerView
from inkpen.actors.read.ahead import Planned, ReadAhead, Stream
from inkpen.errors import CorruptionError, NotFoundError
from inkpen.formats.journal import JournalEntry, JournalReader, Kind
from inkpen.formats.keys import (
    ACTIVE,
    LedgerValue,
    Tag,
    bucket_prefix,
    decode_key,
    index_range,
    key_range,
    object_key,
    object_parts,
    prefix_end,
    reverse_parts,
    reverse_prefix,
)
from inkpen.formats.tictac import segment_of_components

READ_ATTEMPTS = 4


class JournalLookup(Protocol):
    """Anything that finds journal entries by key: a JournalView, or a snapshot's pair of them."""

    def entry(self, sqn: int, kind: Kind, ledger_key: bytes) -> JournalEntry | None: ...


@dataclass(frozen=True, slots=True)
class Head:
    """An object's metadata, from the ledger alone."""

    sqn: int
    size: int
    content_hash: int
    last_modified: float
    """Seconds since the epoch, when the object was written."""
    expires_at: float | None = None
    """Seconds since the epoch after which the object is gone (a put with ``ttl``), else None."""
    subkey: bytes = b""
    """A head-only object's subkey (``Bookie.mput``); empty for every other object."""
    value: bytes | None = None
    """A head-only object's value, kept in the ledger; None for every other object."""


def is_live(value: LedgerValue, now_ms: int) -> bool:
    if value[1] != ACTIVE:
        return False
    expiry = value[2]
    return expiry is None or expiry > now_ms


def to_head(value: LedgerValue, subkey: bytes = b"", *, head_only: bool = False) -> Head:
    """The :class:`Head` of a ledger value; a head-only object's (``head_only``) carries its
    value, an object's never does (even when the ledger keeps a small value inline)."""
    sqn, _, expiry, digest, size, lm = value[:6]
    expires = None if expiry is None else expiry / 1000.0
    if head_only and len(value) > 6:
        return Head(sqn, size, digest, lm / 1000.0, expires, subkey, value[6])
    return Head(sqn, size, digest, lm / 1000.0, expires)


def lookup(cache: CacheView, ledger: LedgerView, key: bytes) -> LedgerValue | None:
    """The newest ledger value of ``key``: the Bookie's cache first, then the Penciller's view."""
    value = cache.get(key)
    if value is None:
        value = ledger.get(key)
    return value


Views = tuple[CacheView, LedgerView, JournalLookup]


class ViewSource(Protocol):
    """Where a reader gets its views: the live board (fresh each time) or a frozen snapshot."""

    def views(self) -> Views: ...


def read_value(source: ViewSource, key: bytes, now_ms: int) -> bytes | None:
    """GET: the live value of ``key`` or None."""
    missing_sqn = None
    vanished: NotFoundError | None = None
    for _ in range(READ_ATTEMPTS):
        cache, ledger, journal = source.views()
        try:
            value = lookup(cache, ledger, key)
            if value is None or not is_live(value, now_ms):
                return None
            if len(value) > 6:
                return value[6]  # a small value, kept in the ledger: no journal read
            body = values_of(journal)(value[0], Kind.OBJECT, key)
        except NotFoundError as exc:
            vanished = exc
            continue
        if body is not None:
            return body
        missing_sqn = value[0]
    if missing_sqn is None and vanished is not None:
        raise vanished  # files kept vanishing: a missing object, never corruption
    raise CorruptionError(
        "journal",
        f"the ledger names SQN {missing_sqn} for key {key!r} but no journal object holds it",
    )


def _live_value(source: ViewSource, key: bytes, now_ms: int) -> LedgerValue | None:
    """The live ledger value of ``key``, or None; retried while ledger files vanish under it."""
    vanished: NotFoundError | None = None
    for _ in range(READ_ATTEMPTS):
        cache, ledger, _ = source.views()
        try:
            value = lookup(cache, ledger, key)
        except NotFoundError as exc:
            vanished = exc
            continue
        return value if value is not None and is_live(value, now_ms) else None
    assert vanished is not None
    raise vanished  # ledger files kept vanishing: a missing object, never corruption


def read_head(source: ViewSource, key: bytes, now_ms: int) -> Head | None:
    """HEAD: the live metadata of ``key`` from the ledger alone, or None."""
    value = _live_value(source, key, now_ms)
    return None if value is None else to_head(value, head_only=key[0] == Tag.HEAD)


def read_head_only(source: ViewSource, key: bytes, now_ms: int) -> bytes | None:
    """A head-only object's value from the ledger alone (``key`` has the HEAD tag), or None."""
    value = _live_value(source, key, now_ms)
    if value is None:
        return None
    return value[6] if len(value) > 6 else b""


def object_index_entries(
    source: ViewSource, bucket: bytes, key: bytes
) -> list[tuple[bytes, bytes, LedgerValue]]:
    """Every REVERSE entry of object (bucket, key), tombstones and expired ones included, as
    ``(field, term, value)``: the object's index entries as the ledger knows them. Retried while
    ledger files vanish under it."""
    lo = reverse_prefix(bucket, key)
    hi = prefix_end(lo)
    vanished: NotFoundError | None = None
    for _ in range(READ_ATTEMPTS):
        cache, ledger, _ = source.views()
        try:
            return [
                (*reverse_parts(found), value)
                for found, value in ledger_range(cache, ledger, lo, hi)
            ]
        except NotFoundError as exc:
            vanished = exc
    assert vanished is not None
    raise vanished  # ledger files kept vanishing: a missing object, never corruption


def ledger_range(
    cache: CacheView,
    ledger: LedgerView,
    lo: bytes | None,
    hi: bytes | None,
    *,
    reverse: bool = False,
    ahead: ReadAhead | None = None,
) -> Iterator[tuple[bytes, LedgerValue]]:
    """Every ledger entry with lo <= key < hi in key order (descending with ``reverse``), the
    most recent source's per key.

    Sources are merged with ``heapq.merge`` on the key alone: it is stable (also with
    ``reverse``), so among equal keys the source listed first (the most recent) comes first and
    the rest are skipped. A range that only one source covers is streamed from it directly.
    With ``ahead``, every file source (an L0 file; a level's files, in the order the range
    visits them) reads its planned blocks ahead through it (:mod:`.ahead`).
    """
    streams: list[Iterator[tuple[bytes, LedgerValue]]] = [
        table.iter_range(lo, hi, reverse=reverse)
        for table in (*cache.tables, *ledger.mem)
        if len(table)
    ]
    for handle in ledger.l0:
        d = handle.descriptor
        if (hi is None or d.first_key < hi) and (lo is None or d.last_key >= lo):
            reader = handle.reader
            planned = None if ahead is None else ahead.sst_stream([reader], lo, hi, reverse)
            streams.append(_sst_range(reader, lo, hi, reverse, planned))
    for level in ledger.levels:
        files = level.overlapping(lo, hi)
        if not files:
            continue
        planned = None
        if ahead is not None:
            order = reversed(files) if reverse else files
            planned = ahead.sst_stream([h.reader for h in order], lo, hi, reverse)
        if len(files) == 1:
            streams.append(_sst_range(files[0].reader, lo, hi, reverse, planned))
        else:
            streams.append(_chain(files, lo, hi, reverse, planned))
    if ahead is not None:
        ahead.start()  # every source's first reads, in turn, before the merge asks for them
    if len(streams) == 1:
        yield from streams[0]
        return
    previous = None
    for item in heapq.merge(*streams, key=_first, reverse=reverse):
        key = item[0]
        if key != previous:
            previous = key
            yield item


_first = itemgetter(0)


def _sst_range(
    reader: Any,
    lo: bytes | None,
    hi: bytes | None,
    reverse: bool,
    planned: Stream | None = None,
) -> Iterator[tuple[bytes, LedgerValue]]:
    if reverse:
        return reader.iter_range_reverse(lo, hi, prefetched=planned)  # type: ignore[no-any-return]
    return reader.iter_range(lo, hi, prefetched=planned)  # type: ignore[no-any-return]


def _chain(
    files: tuple[Any, ...],
    lo: bytes | None,
    hi: bytes | None,
    reverse: bool = False,
    planned: Stream | None = None,
) -> Iterator[tuple[bytes, LedgerValue]]:
    for handle in reversed(files) if reverse else files:
        yield from _sst_range(handle.reader, lo, hi, reverse, planned)


def live_range(
    cache: CacheView,
    ledger: LedgerView,
    lo: bytes | None,
    hi: bytes | None,
    now_ms: int,
    *,
    reverse: bool = False,
    ahead: ReadAhead | None = None,
) -> Iterator[tuple[bytes, LedgerValue]]:
    """:func:`ledger_range` without tombstones and expired entries."""
    for key, value in ledger_range(cache, ledger, lo, hi, reverse=reverse, ahead=ahead):
        if is_live(value, now_ms):
            yield key, value


def reading_ahead(window: int) -> AbstractContextManager[ReadAhead | None]:
    """A fold's :class:`~.ahead.ReadAhead` of ``window`` bytes (option ``read_ahead_bytes``),
    closed when the fold ends; none for 0."""
    return ReadAhead(window) if window > 0 else nullcontext()


def object_bounds(
    bucket: bytes | None, start: bytes | None, end: bytes | None, *, tag: Tag = Tag.OBJECT
) -> tuple[bytes, bytes]:
    """Encoded [lo, hi) of the object keys of a bucket between start and end (inclusive)."""
    if bucket is None:
        lo = bytes([tag])
        return lo, prefix_end(lo)
    return key_range(tag, bucket, start, end)


def fold_keys(
    source: ViewSource,
    bucket: bytes,
    start: bytes | None,
    end: bytes | None,
    now_ms: int,
    *,
    reverse: bool = False,
    read_ahead: int = 0,
) -> Iterator[bytes]:
    cache, ledger, _ = source.views()
    lo, hi = object_bounds(bucket, start, end)
    # As a key-order scan does: a key with no NUL is the bucket prefix, the key, then two
    # terminators, so the key is a slice; anything else is split in full.
    skip = len(bucket_prefix(Tag.OBJECT, bucket))
    with reading_ahead(read_ahead) as ahead:
        for key, value in ledger_range(cache, ledger, lo, hi, reverse=reverse, ahead=ahead):
            if value[1] != ACTIVE:
                continue
            expiry = value[2]
            if expiry is not None and expiry <= now_ms:
                continue
            found = key[skip:-4]
            if _NUL in found or key[-4:] != _TWO_TERMINATORS:
                found = object_parts(key)[1]
            yield found


@dataclass(frozen=True, slots=True)
class HeadFilter:
    """What a head fold keeps beyond its key range: keys in ``segments`` (tictac segment ids,
    None: all), last modified in [lo_ms, hi_ms] (None: open), at most ``max_objects`` (None: all).
    """

    segments: frozenset[int] | None = None
    lo_ms: int | None = None
    hi_ms: int | None = None
    max_objects: int | None = None

    def keeps(self, key: bytes, value: LedgerValue) -> bool:
        if self.segments is not None and segment_of_components(key[1:]) not in self.segments:
            return False
        lm = value[5]
        return (self.lo_ms is None or lm >= self.lo_ms) and (self.hi_ms is None or lm <= self.hi_ms)


NO_FILTER = HeadFilter()


def filtered_heads(
    cache: CacheView,
    ledger: LedgerView,
    lo: bytes,
    hi: bytes,
    now_ms: int,
    kept: HeadFilter,
    *,
    reverse: bool = False,
    ahead: ReadAhead | None = None,
) -> Iterator[tuple[bytes, LedgerValue]]:
    """Live ledger entries in [lo, hi) that ``kept`` keeps, at most ``kept.max_objects``, in key
    order (descending with ``reverse``)."""
    left = kept.max_objects
    if left is not None and left <= 0:
        return
    plain = kept.segments is None and kept.lo_ms is None and kept.hi_ms is None
    for key, value in live_range(cache, ledger, lo, hi, now_ms, reverse=reverse, ahead=ahead):
        if plain or kept.keeps(key, value):
            yield key, value
            if left is not None:
                left -= 1
                if not left:
                    return


def fold_heads(
    source: ViewSource,
    bucket: bytes | None,
    start: bytes | None,
    end: bytes | None,
    now_ms: int,
    kept: HeadFilter = NO_FILTER,
    *,
    tag: Tag = Tag.OBJECT,
    reverse: bool = False,
    read_ahead: int = 0,
) -> Iterator[tuple[bytes, bytes, Head]]:
    cache, ledger, _ = source.views()
    lo, hi = object_bounds(bucket, start, end, tag=tag)
    head_only = tag == Tag.HEAD
    with reading_ahead(read_ahead) as ahead:
        for key, value in filtered_heads(
            cache, ledger, lo, hi, now_ms, kept, reverse=reverse, ahead=ahead
        ):
            decoded = decode_key(key)
            yield decoded.bucket, decoded.key, to_head(value, decoded.subkey, head_only=head_only)


def fold_objects_by_key(
    source: ViewSource,
    bucket: bytes | None,
    start: bytes | None,
    end: bytes | None,
    now_ms: int,
    *,
    reverse: bool = False,
    read_ahead: int = 0,
) -> Iterator[tuple[bytes, bytes, bytes]]:
    """Live objects in key order (descending with ``reverse``), a window of rows at a time.

    The ledger gives a window of :data:`SCAN_WINDOW` live rows in key order; small values come
    with their entries, the others are read by :func:`window_reader` (journal records sorted by
    position, read forward, each byte at most once; see :func:`window_bodies`); then the
    window's rows leave in key order. A window opens at a row whose value the journal holds: a
    row whose value the ledger keeps leaves at once while no window is open, so a scan of small
    values holds no rows (rows held by the thousand outlive the interpreter's young
    collections, and the cycle collector then walks them again and again).

    ``read_ahead`` (bytes; 0: none): the ledger's blocks and each window's journal reads are
    read ahead of the fold, within that many bytes (:mod:`.ahead`).
    """
    with reading_ahead(read_ahead) as ahead:
        yield from _objects_by_key(source, bucket, start, end, now_ms, reverse, ahead)


def _objects_by_key(
    source: ViewSource,
    bucket: bytes | None,
    start: bytes | None,
    end: bytes | None,
    now_ms: int,
    reverse: bool,
    ahead: ReadAhead | None,
) -> Iterator[tuple[bytes, bytes, bytes]]:
    cache, ledger, journal = source.views()
    lo, hi = object_bounds(bucket, start, end)
    read_window = window_reader(journal, ahead)
    # Keys of one bucket with an empty subkey and no NUL anywhere are the bucket prefix, the
    # key, then two terminators: the key is a slice. Anything else is split in full.
    prefix = None if bucket is None else bucket_prefix(Tag.OBJECT, bucket)
    skip = 0 if prefix is None else len(prefix)
    rows: list[tuple[bytes, LedgerValue]] = []
    for item in ledger_range(cache, ledger, lo, hi, reverse=reverse, ahead=ahead):
        value = item[1]
        if value[1] != ACTIVE:
            continue
        expiry = value[2]
        if expiry is not None and expiry <= now_ms:
            continue
        if not rows and len(value) > 6:
            # A value the ledger keeps, no journal read waiting before it: it leaves at once
            # (a window held for nothing would outlive the interpreter's young collections).
            key = item[0]
            found_key = key[skip:-4]
            if prefix is None or _NUL in found_key or key[-4:] != _TWO_TERMINATORS:
                yield (*object_parts(key), value[6])
            else:
                yield bucket, found_key, value[6]
            continue
        rows.append(item)
        if len(rows) < SCAN_WINDOW:
            continue
        yield from _window_objects(rows, window_bodies(read_window, rows), bucket, prefix, skip)
        rows = []
    if rows:
        yield from _window_objects(rows, window_bodies(read_window, rows), bucket, prefix, skip)


SCAN_WINDOW = 65_536
"""Rows whose values a key-order scan reads together, sorted by their place in the journal."""


def _window_objects(
    rows: list[tuple[bytes, LedgerValue]],
    bodies: list[bytes | None],
    bucket: bytes | None,
    prefix: bytes | None,
    skip: int,
) -> Iterator[tuple[bytes, bytes, bytes]]:
    for (key, value), body in zip(rows, bodies, strict=True):
        if body is None:
            raise CorruptionError(
                "journal",
                f"the ledger names SQN {value[0]} for key {key!r} but no journal holds it",
            )
        found_key = key[skip:-4]
        if prefix is None or _NUL in found_key or key[-4:] != _TWO_TERMINATORS:
            yield (*object_parts(key), body)
        else:
            yield bucket, found_key, body  # type: ignore[misc]


WindowRead = Callable[[list[tuple[bytes, int]]], list[bytes | None]]
"""``read(rows)``: the journal's object bodies of ``rows`` (``(ledger key, SQN)``), in order."""


def window_bodies(
    read_window: WindowRead, rows: list[tuple[bytes, LedgerValue]]
) -> list[bytes | None]:
    """The object bodies of ``rows`` (``(ledger key, ledger value)``, live objects), in their
    order: a value the ledger keeps (option ``inline_value_bytes``) from its entry, the others
    through ``read_window`` (one call for the window; None where no journal holds one)."""
    bodies: list[bytes | None] = [value[6] if len(value) > 6 else None for _, value in rows]
    wanted = [at for at, body in enumerate(bodies) if body is None]
    if wanted:
        found = read_window([(rows[at][0], rows[at][1][0]) for at in wanted])
        for at, body in zip(wanted, found, strict=True):
            bodies[at] = body
    return bodies


def window_reader(journal: JournalLookup, ahead: ReadAhead | None = None) -> WindowRead:
    """``read(rows)``: the object bodies of ``rows`` (``(ledger key, SQN)``), in their order,
    for one scan (call it window after window).

    A journal view reads them with a :class:`WindowReads`; a snapshot's pair of views asks its
    newer view, then its registered one for the rows the newer did not hold (as
    :func:`values_of` does row by row); anything else goes row by row through :func:`values_of`.
    With ``ahead``, a window's reads are made through it, several at once.
    """
    if isinstance(journal, JournalView):
        return WindowReads(journal, ahead)
    current = getattr(journal, "current", None)
    registered = getattr(journal, "registered", None)
    if isinstance(current, JournalView) and isinstance(registered, JournalView):
        newer, older = WindowReads(current, ahead), WindowReads(registered, ahead)

        def paired(rows: list[tuple[bytes, int]]) -> list[bytes | None]:
            bodies = newer(rows)
            missing = [at for at, body in enumerate(bodies) if body is None]
            if missing:
                found = older([rows[at] for at in missing])
                for at, body in zip(missing, found, strict=True):
                    bodies[at] = body
            return bodies

        return paired
    value_of = values_of(journal)
    kind = Kind.OBJECT
    return lambda rows: [value_of(sqn, kind, key) for key, sqn in rows]


SCAN_KEEP_BYTES = 32 * 1024 * 1024
"""Journal bytes one scan may keep for later windows (records it read between the ones it
wanted)."""
SCAN_GAP = 64 * 1024
"""The largest run of unwanted records a scan reads through (and keeps) to join two reads."""
SCAN_RUN = 4 * 1024 * 1024
"""The largest single read of a scan."""
SCAN_BATCH = 8 * 1024 * 1024
"""The most bytes of one file's reads a scan asks the store for together (``get_ranges``)."""
SCAN_RUN_MIN = 256 * 1024
"""The fewest bytes a batch of a scan reading ahead holds (unless its file has no more)."""


def place_records(
    journal: JournalView, rows: Sequence[tuple[bytes, int]], bodies: list[bytes | None]
) -> dict[int, list[tuple[int, int, int, bytes]]]:
    """Where each row's (``(key, sqn)``) object body lives in ``journal``, reading no record:
    a body held by an unrolled segment goes into ``bodies`` at the row's index; a row in a
    journal file, located through its index (each file asked once for all its rows: a block
    index reads nothing, a paged version 1 hash region is read in as few reads as the rows
    allow), is answered per file (its index in the view) as ``(offset, length, row index,
    record key)`` of the block that holds it (version 1: of the record), unsorted; rows of one
    block share its range. Rows the view does not hold stay None."""
    kind = Kind.OBJECT
    files = journal.files
    in_files: dict[int, list[int]] = {}
    for at, (key, sqn) in enumerate(rows):
        found = journal.place(sqn)
        if found is None:
            continue
        if type(found) is not int:
            entry = found.entries.get(sqn)  # type: ignore[union-attr]
            if entry is not None and entry.ledger_key == key and entry.kind == kind:
                bodies[at] = entry.value or b""
            continue
        in_files.setdefault(found, []).append(at)
    by_file: dict[int, list[tuple[int, int, int, bytes]]] = {}
    for index, ats in in_files.items():
        wanted = [(rows[at][1], kind, rows[at][0]) for at in ats]
        placed = [
            (where[1], where[2], at, where[0])
            for at, where in zip(ats, files[index].reader.locate_many(wanted), strict=True)
            if where is not None
        ]
        if placed:
            by_file[index] = placed
    return by_file


class WindowReads:
    """The value reads of one scan over one journal view, window by window.

    A window's rows are located file by file (:meth:`JournalReader.locate_many`: a block index
    reads nothing; a version 1 file reads the slot pages its probes start on in joined runs,
    past the index cache). A window's blocks (version 1: records)
    of one file are read in offset order, asked of the store together in batches of up to
    :data:`SCAN_BATCH` bytes (``get_ranges``); records that touch are read together, and while the
    scan keeps fewer than :data:`SCAN_KEEP_BYTES`, so are records up to :data:`SCAN_GAP` apart,
    the records between them being kept for the windows that want them later. A read never
    reaches into kept bytes, so no journal byte is read twice. Entries of unrolled segments
    come from memory; a record whose slot holds another key is looked up in full.

    With ``ahead`` (:class:`~.ahead.ReadAhead`), every batch of the window, of every file, is
    planned first and then read through it, several at once within its window (a batch then
    holds at most a quarter of the window, or :data:`SCAN_RUN_MIN` if that is more); without,
    one batch after another.
    """

    def __init__(self, journal: JournalView, ahead: ReadAhead | None = None) -> None:
        self.journal = journal
        self.ahead = ahead
        self.batch_bytes = (
            SCAN_BATCH if ahead is None else max(SCAN_RUN_MIN, min(SCAN_BATCH, ahead.window // 4))
        )
        self.kept = 0
        self.runs: dict[int, tuple[list[int], list[bytes]]] = {}
        """Per file (its index in the view): the kept runs' starts, sorted, and their bytes."""

    def __call__(self, rows: list[tuple[bytes, int]]) -> list[bytes | None]:
        bodies: list[bytes | None] = [None] * len(rows)
        batches: list[_Batch] = []
        for file_index, wanted in place_records(self.journal, rows, bodies).items():
            wanted.sort()
            batches.extend(self._plan_file(file_index, wanted, rows, bodies))
        ahead = self.ahead
        if ahead is None or len(batches) < 2:
            for batch in batches:
                self._read_batch(batch, batch.read(), rows, bodies)
            return bodies
        stream = ahead.stream(
            Planned(None, (0, 0, 0, 0), batch.read, batch.size) for batch in batches
        )
        try:
            for batch in batches:
                self._read_batch(batch, stream.take_next(), rows, bodies)
        finally:
            stream.close()
        return bodies

    def _plan_file(
        self,
        file_index: int,
        wanted: list[tuple[int, int, int, bytes]],
        rows: list[tuple[bytes, int]],
        bodies: list[bytes | None],
    ) -> list[_Batch]:
        """Plan the reads of one file's wanted records (sorted by offset) in batches of at most
        :attr:`batch_bytes` (each batch one ``get_ranges`` of the store); answer at once the
        records kept from earlier windows."""
        reader = self.journal.files[file_index].reader
        starts, kept = self.runs.setdefault(file_index, ([], []))
        records_end = reader.header.hash_offset
        blocks = reader.header.version >= 2  # a read of a block holds records wanted later
        batches: list[_Batch] = []
        batch = _Batch(reader, wanted, starts, kept)
        i = 0
        count = len(wanted)
        while i < count:
            offset, length, _, _ = wanted[i]
            k = bisect.bisect_right(starts, offset) - 1
            if k >= 0 and offset + length <= starts[k] + len(kept[k]):
                self._answer(reader, wanted[i : i + 1], kept[k], starts[k], rows, bodies)
                i += 1  # a record read earlier, between two others
                continue
            limit = starts[k + 1] if k + 1 < len(starts) else records_end
            may_keep = self.kept < SCAN_KEEP_BYTES
            end = offset + length
            j = i + 1
            while j < count:
                at, size = wanted[j][0], wanted[j][1]
                if at + size <= end:
                    j += 1  # another row of a journal block this read already holds
                    continue
                gap = at - end
                if gap < 0 or at + size > limit or at + size - offset > SCAN_RUN:
                    break
                if gap and (not may_keep or gap > SCAN_GAP):
                    break
                end = at + size
                j += 1
            keep = may_keep and (blocks or end - offset > sum(w[1] for w in wanted[i:j]))
            if keep:
                self.kept += end - offset  # counted now: the next runs' plans depend on it
            batch.reads.append((i, j, offset, end, keep))
            batch.size += end - offset
            if batch.size >= self.batch_bytes:
                batches.append(batch)
                batch = _Batch(reader, wanted, starts, kept)
            i = j
        if batch.reads:
            batches.append(batch)
        return batches

    @staticmethod
    def _read_batch(
        batch: _Batch,
        found: list[bytes],
        rows: list[tuple[bytes, int]],
        bodies: list[bytes | None],
    ) -> None:
        """Answer the rows of a batch from its reads (``found``), keeping what it keeps."""
        starts, kept, wanted, reader = batch.starts, batch.kept, batch.wanted, batch.reader
        for (i, j, start, _, keep), data in zip(batch.reads, found, strict=True):
            if keep:
                k = bisect.bisect_right(starts, start)
                starts.insert(k, start)
                kept.insert(k, data)
            WindowReads._answer(reader, wanted[i:j], data, start, rows, bodies)

    @staticmethod
    def _answer(
        reader: JournalReader,
        records: list[tuple[int, int, int, bytes]],
        data: bytes,
        base: int,
        rows: list[tuple[bytes, int]],
        bodies: list[bytes | None],
    ) -> None:
        """Set the bodies of ``records``, all inside ``data`` (bytes from offset ``base``)."""
        for at, size, row, record_key in records:
            rel = at - base
            record = data if rel == 0 and size == len(data) else data[rel : rel + size]
            body = reader.body_of(record, record_key, at)
            if body is None:  # two keys that hash alike: the slower probe finds the right one
                key, sqn = rows[row]
                body = reader.value(sqn, Kind.OBJECT, key)
            bodies[row] = body


class _Batch:
    """The reads of one file a window asks the store for together: ``(i, j, start, end,
    keep)`` each, answering ``wanted[i:j]`` (records sorted by offset) from bytes ``[start,
    end)``; ``size`` their bytes."""

    __slots__ = ("kept", "reader", "reads", "size", "starts", "wanted")

    def __init__(
        self,
        reader: JournalReader,
        wanted: list[tuple[int, int, int, bytes]],
        starts: list[int],
        kept: list[bytes],
    ) -> None:
        self.reader = reader
        self.wanted = wanted
        self.starts = starts
        self.kept = kept
        self.reads: list[tuple[int, int, int, int, bool]] = []
        self.size = 0

    def read(self) -> list[bytes]:
        """The batch's reads, in one ``get_ranges`` of the store."""
        return self.reader.read_records_many([(start, end) for _, _, start, end, _ in self.reads])


_PUTS = frozenset({Kind.OBJECT, Kind.VALUE_IN_LEDGER})
"""Journal kinds of a put: with its body, or with its body left to the ledger."""
_NUL = b"\x00"
_TWO_TERMINATORS = b"\x00\x00\x00\x00"


def values_of(journal: JournalLookup) -> Callable[[int, Kind, bytes], bytes | None]:
    """``value(sqn, kind, ledger_key)`` of a journal lookup: the object body, or None.

    Views answer it directly (without decoding whole entries); a snapshot's pair of views asks
    its newer view, then its registered one (as :func:`journal_scan` walks them); anything else
    goes through ``entry``.
    """
    direct = getattr(journal, "value", None)
    if direct is not None:
        return direct  # type: ignore[no-any-return]
    current = getattr(journal, "current", None)
    registered = getattr(journal, "registered", None)
    if current is not None and registered is not None:
        newer, older = values_of(current), values_of(registered)

        def paired(sqn: int, kind: Kind, ledger_key: bytes) -> bytes | None:
            found = newer(sqn, kind, ledger_key)
            return found if found is not None else older(sqn, kind, ledger_key)

        return paired
    entry_of = journal.entry

    def via_entry(sqn: int, kind: Kind, ledger_key: bytes) -> bytes | None:
        entry = entry_of(sqn, kind, ledger_key)
        return None if entry is None else entry.value or b""

    return via_entry


def journal_scan(journal: Any) -> Iterator[JournalEntry]:
    """Every journal entry a view holds, in SQN order (files, then unrolled segments).

    A snapshot's paired journal scans its registered view (whose files are protected) and then
    whatever the newer view added above it.
    """
    registered = getattr(journal, "registered", None)
    if registered is not None:
        top = 0
        for entry in journal_scan(registered):
            top = entry.sqn
            yield entry
        for entry in journal_scan(journal.current):
            if entry.sqn > top:
                yield entry
        return
    for handle in journal.files:
        yield from handle.reader.iter_entries()
    for segment in journal.segments:
        for sqn in sorted(segment.entries):
            yield segment.entries[sqn]


def fold_objects_by_sqn(
    source: ViewSource,
    bucket: bytes | None,
    start: bytes | None,
    end: bytes | None,
    now_ms: int,
) -> Iterator[tuple[bytes, bytes, bytes]]:
    """Objects in the order they were written: scan the journal, keep entries still current
    (a put whose body the ledger holds takes it from the ledger entry that makes it current)."""
    cache, ledger, journal = source.views()
    lo, hi = object_bounds(bucket, start, end)
    for entry in journal_scan(journal):
        kind = entry.kind
        if kind not in _PUTS or not (lo <= entry.ledger_key < hi):
            continue
        value = lookup(cache, ledger, entry.ledger_key)
        if value is None or value[0] != entry.sqn or not is_live(value, now_ms):
            continue
        decoded = decode_key(entry.ledger_key)
        if kind == Kind.OBJECT:
            yield decoded.bucket, decoded.key, entry.value or b""
        elif len(value) > 6:
            yield decoded.bucket, decoded.key, value[6]
        else:
            raise CorruptionError(
                "ledger",
                f"SQN {entry.sqn} of {decoded.key!r}: the journal left its value to the ledger, "
                "whose entry holds none",
            )


def fold_index(
    source: ViewSource,
    bucket: bytes,
    field: bytes,
    start: bytes,
    end: bytes,
    now_ms: int,
    *,
    regex: str | bytes | re.Pattern[str] | re.Pattern[bytes] | None,
    return_terms: bool,
    reverse: bool = False,
    read_ahead: int = 0,
) -> Iterator[bytes | tuple[bytes, bytes]]:
    """Index entries of ``field`` with start <= term <= end, as object keys or (term, key).

    Index entries follow their object: an entry whose object is deleted or expired (in the
    same views) is skipped, whether or not the delete listed it.
    """
    cache, ledger, _ = source.views()
    lo, hi = index_range(bucket, field, start, end)
    matcher = term_matcher(regex)
    with reading_ahead(read_ahead) as ahead:
        for key, _ in live_range(cache, ledger, lo, hi, now_ms, reverse=reverse, ahead=ahead):
            decoded = decode_key(key)
            term = decoded.subkey
            if matcher is not None and not matcher(term):
                continue
            found = decoded.object_key
            owner = lookup(cache, ledger, object_key(bucket, found))
            if owner is None:
                owner = lookup(cache, ledger, object_key(bucket, found, tag=Tag.HEAD))
            if owner is None or not is_live(owner, now_ms):
                continue
            yield (term, found) if return_terms else found


def term_matcher(
    regex: str | bytes | re.Pattern[str] | re.Pattern[bytes] | None,
) -> Callable[[bytes], bool] | None:
    """The test an index query's ``regex`` puts to each term (bytes patterns against the
    bytes, text patterns against the term decoded as UTF-8); None for no regex."""
    if regex is None:
        return None
    pattern = regex if isinstance(regex, re.Pattern) else re.compile(regex)
    if isinstance(pattern.pattern, bytes):
        binary = pattern
        return lambda term: binary.search(term) is not None
    text = pattern
    return lambda term: text.search(term.decode("utf-8", "replace")) is not None


def list_buckets(source: ViewSource, now_ms: int, *, first_only: bool = False) -> Iterator[bytes]:
    """Buckets holding at least one live object, in order; skips from bucket to bucket."""
    cache, ledger, _ = source.views()
    lo: bytes = bytes([Tag.OBJECT])
    hi = prefix_end(lo)
    while True:
        found = next(iter(live_range(cache, ledger, lo, hi, now_ms)), None)
        if found is None:
            return
        bucket = decode_key(found[0]).bucket
        yield bucket
        if first_only:
            return
        lo = prefix_end(bucket_prefix(Tag.OBJECT, bucket))


Order = Literal["key", "sqn"]

__all__ = [
    "Head",
    "bucket_prefix",
    "fold_heads",
    "fold_index",
    "fold_keys",
    "fold_objects_by_key",
    "fold_objects_by_sqn",
    "is_live",
    "list_buckets",
    "lookup",
    "object_key",
    "read_head",
    "read_value",
]
