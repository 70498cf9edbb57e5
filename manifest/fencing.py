"""Writer epochs and fencing: how a new writer takes a database over and stops every older one.

Journal segments (``journal/<id>.jnl``) are written with create-if-absent, and each records the
epoch of its writer (in user metadata ``writer-epoch`` and in its header) and its **durable
floor** (user metadata ``durable-floor``): the id through which every segment was durable when
its writer issued it. A writer keeps up to ``segments_in_flight`` (k) segment writes in flight:
it issues slot ``n`` only while ``n <= floor + k``, and acknowledges a segment only once it and
every lower one are durable, in id order, which is SQN order. A writer claims the database in
three steps:

1. **Bump the epoch.** A CAS manifest update sets ``writer_epoch = E`` (one above the stored
   epoch), drops the checkpoints of earlier writers, adds a writer checkpoint for epoch ``E``
   pinning the manifest it writes, and raises the manifest's ``segments_in_flight`` (the most
   writes any writer kept in flight; it never goes down) to the claimant's k.
2. **Fence the journal.** List the segments after ``last_rolled_segment`` and judge the tail
   (below); take the first slot of a torn tail, or else the first id after the highest segment
   (never below ``journal.next_segment``), and create an empty segment of epoch ``E`` there. If
   the slot is taken, the four outcomes of a fence write are:

   ========================  =================================================================
   the create succeeds       every older writer is fenced: its next segment write lands on an
                             occupied slot
   slot holds a lower epoch  an older writer got there first; step to the next id and try again
   slot holds epoch ``E``    two writers share one epoch, which CAS rules out: a bug, raised
   slot holds a higher       a newer writer has claimed the database: this claimant is fenced
   epoch                     (:class:`FencedError`)
   ========================  =================================================================

3. **Confirm.** Re-read the manifest; if its ``writer_epoch`` is no longer ``E`` a newer writer
   won, and this claim is fenced.

The segments a new writer replays are the accepted ones between ``last_rolled_segment`` and its
fence. **Reader rule:** walking segment ids upwards, a segment whose epoch is lower than the epoch
of any earlier segment is rejected, never replayed: it was written by a writer that had already
been fenced.

**Torn tails and missing segments.** With k writes in flight a crash can leave gaps at the end of
the journal: slot ``g`` never landed while ``g + 1`` did. No segment above ``g`` was acknowledged
then (that needs ``g`` durable), and each of them records a floor below ``g`` (it was issued
before ``g`` was durable). So :func:`judge_tail` reads the floors of the segments above the first
gap and tells the two apart:

- an id below the manifest's ``next_segment`` that is absent is **damage** (the manifest records
  those as written);
- the **torn tail** starts at the lowest absent id ``g >= next_segment`` that no segment above it
  records as durable (no floor ``>= g``); every segment above ``g`` is unacknowledged, and is
  never replayed: the fence goes into ``g``, and the reader rule rejects everything above it;
- any other absent id is **damage**: a later segment records that it was durable, so it may have
  held acknowledged writes (and newer values of keys an older segment holds too).

A segment that records no floor (written before floors were, or whose metadata a store or copy
dropped) counts as issued once every lower segment was durable (floor ``id - 1``): a gap below it
is damage, as it always was, and a lost floor can make a torn tail read as damage (refused, with
``allow_missing_segments`` as the way on), never damage read as a torn tail. The floor is
metadata, not a header field, so the journal format is unchanged (older readers ignore it, and
the header's checks cover what they did), the write carries it at no cost, and it is read only
when there is a gap: one HEAD per segment above the first gap (the claim HEADs the segments it
replays for their epochs anyway). :func:`scan_segments` lists every segment after
``last_rolled_segment`` without stopping at a gap and names the missing ids; :func:`judge_tail`
judges them; :func:`settle_missing` raises a :class:`CorruptionError` naming the damaged ones,
or, when the operator allowed it (``allow_missing_segments``), logs ``journal.segments_missing``
and lets the caller go on with what is left. A writer that claims a database with missing
segments allowed fences above the highest segment present (or at a torn tail), so none of the
remaining segments is rejected. Whoever reads the tail judges it the same way: a checkpoint made
beside a live writer ends its window at the first gap of a torn tail (the writer's writes in
flight leave exactly such gaps), ``inkpen verify`` and ``inkpen info`` report only damage, and a
following Reader stops at the first absent slot (it lands, or the next writer fences it).

**A fenced writer's writes in flight.** When a new writer fences slot ``f``, an older one may
still have writes in flight; its floor is below ``f``, so they land at most
``segments_in_flight - 1`` slots above ``f`` (the manifest's bound before the claim,
:attr:`WriterClaim.older_in_flight`). Up to that slot (:attr:`WriterClaim.sequential_until`) the
new writer writes one segment at a time and steps over a slot holding an older epoch
(:class:`OlderSlot`; the same bytes go into the next slot): the reader rule rejects such a
segment. Past it an older epoch in a slot is a bug. A writer cannot step over with several
writes in flight: the later ones were built on the earlier one's SQNs, so it would leave a later
segment below an earlier one.

Invariants:

- a writer issues slot ``n`` only while every slot up to ``n - k`` is durable (it records that
  floor), and acknowledges a segment only once every slot up to it holds a durable segment of
  its own (or, up to ``sequential_until``, an older epoch's it stepped over);
- the epochs of accepted segments never decrease along the ids;
- every segment a writer acknowledged is accepted: to acknowledge past a newer fence it would
  have had to write the fence's slot;
- a fenced writer learns of it no later than its next segment write to land (the slot it wants
  holds a newer writer's fence or data) or its next manifest update (the manifest holds a newer
  epoch);
- a newer writer's fence lies in the first slot after everything its predecessors acknowledged
  (the first gap, or the end, of their tail). GC therefore keeps fence segments: deleting one
  would let a stalled writer write into the freed slot and acknowledge writes nobody will replay.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from inkpen.errors import (
    AlreadyExistsError,
    CorruptionError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from inkpen.formats.journal import HEADER_SIZE, build_journal, read_header
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.base import put_pieces_if_absent
from inkpen.objectstore.parallel import concurrency, run_bounded

from .model import (
    CHECKPOINT_KIND,
    COMPACTION_MODES,
    KIND_WRITER,
    Checkpoint,
    Manifest,
    VersionedManifest,
)
from .paths import JOURNAL_PREFIX, parse_segment_key, segment_key
from .store import ManifestStore, require_live

log = get_logger("inkpen.manifest")

EPOCH_METADATA = "writer-epoch"
"""User-metadata key under which a segment records its writer's epoch."""
FLOOR_METADATA = "durable-floor"
"""User-metadata key under which a segment records its durable floor: the id through which
every segment was durable when its writer issued it (see the module docstring)."""
_RESOLVE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One journal segment seen in a listing: its id, size and (once read) its writer's epoch and
    durable floor (None when not read, or not recorded: :attr:`floor` then says ``id - 1``)."""

    id: int
    size: int
    writer_epoch: int | None = None
    durable_floor: int | None = None

    @property
    def floor(self) -> int:
        """The recorded durable floor, or ``id - 1`` when none is known (a segment written
        before floors were recorded was issued only once every lower one was durable)."""
        return self.id - 1 if self.durable_floor is None else self.durable_floor


@dataclass(frozen=True, slots=True)
class SegmentStamp:
    """What a segment records of its writing: the writer's epoch and its durable floor (None
    when the segment records none: written before floors were, or its metadata was lost)."""

    writer_epoch: int
    durable_floor: int | None


@dataclass(frozen=True, slots=True)
class WriterClaim:
    """What a writer holds after claiming a database.

    ``epoch`` is its writer epoch, ``versioned`` the manifest it confirmed its claim against,
    ``fence_segment`` the id of its empty fence segment (its first own segment is the next id),
    and ``segments`` the accepted segments in ``(last_rolled_segment, fence_segment)`` that it
    must replay, each with its epoch. ``missing`` are the segment ids found missing there (only
    ever non-empty when the claim was made with ``allow_missing_segments``).
    :attr:`sequential_until` is the last slot older writers' writes in flight may still take.
    """

    epoch: int
    versioned: VersionedManifest
    fence_segment: int
    segments: tuple[SegmentRef, ...]
    missing: tuple[int, ...] = ()
    older_in_flight: int = 1
    """The most segment writes any older writer kept in flight (the manifest's
    ``segments_in_flight`` before this claim): how far above the fence their writes may land."""

    @property
    def next_segment(self) -> int:
        """The id of the first segment this writer writes after its fence."""
        return self.fence_segment + 1

    @property
    def sequential_until(self) -> int:
        """The highest slot a fenced writer's write still in flight may land in: up to it, this
        writer writes one segment at a time and steps over a slot an older epoch took."""
        return self.fence_segment + self.older_in_flight - 1

    @property
    def writer_checkpoint(self) -> str | None:
        """The id of the checkpoint this claim added for its epoch (None if it is gone)."""
        for checkpoint in self.versioned.manifest.checkpoints:
            if checkpoint.kind == KIND_WRITER and checkpoint.metadata.get("epoch") == str(
                self.epoch
            ):
                return checkpoint.id
        return None


def _check_epoch_arg(epoch: object) -> int:
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise UsageError(f"writer_epoch must be an int >= 1, got {epoch!r}")
    return epoch


def segment_epoch(store: ObjectStore, segment_id: int) -> int | None:
    """The writer epoch recorded by segment ``segment_id``; None when the slot is empty.

    Reads the ``writer-epoch`` metadata and falls back to the segment's header when the metadata
    is missing (a store that dropped it, or a copy).
    """
    stamp = segment_stamp(store, segment_id)
    return None if stamp is None else stamp.writer_epoch


def _metadata_int(metadata: dict[str, str], name: str) -> int | None:
    recorded = metadata.get(name)
    if recorded is None:
        return None
    try:
        return int(recorded)
    except ValueError:
        return None


def segment_stamp(store: ObjectStore, segment_id: int) -> SegmentStamp | None:
    """The writer epoch and durable floor segment ``segment_id`` records (one HEAD); None when
    the slot is empty. The epoch falls back to the segment's header when the metadata is missing
    (a store that dropped it, or a copy); the floor has no fallback (None: see
    :attr:`SegmentRef.floor`)."""
    key = segment_key(segment_id)
    try:
        info = store.head(key)
    except NotFoundError:
        return None
    metadata = dict(info.metadata)
    floor = _metadata_int(metadata, FLOOR_METADATA)
    epoch = _metadata_int(metadata, EPOCH_METADATA)
    if epoch is not None:
        return SegmentStamp(epoch, floor)
    try:
        head = store.get_range(key, 0, HEADER_SIZE)
    except NotFoundError:
        return None
    if len(head) < HEADER_SIZE:
        raise CorruptionError(key, f"segment is {len(head)} bytes, shorter than a journal header")
    return SegmentStamp(read_header(head, key).writer_epoch, floor)


def _fenced(segment_id: int, found: int, mine: int) -> FencedError:
    return FencedError(
        f"journal segment {segment_id} was written by writer epoch {found}, newer than this "
        f"writer's epoch {mine}: a newer writer has opened the database. Close this handle; "
        "open the database again if this process should write"
    )


class OlderSlot(InkpenError):
    """A slot the writer wanted holds a segment of an older epoch: a fenced writer's write that
    was still in flight when this writer claimed the database landed there. The reader rule
    rejects it (an older epoch after this writer's fence); a writer steps over it to the next
    slot only where its claim says such writes may land (``WriterClaim.sequential_until``), and
    elsewhere it is a bug."""

    def __init__(self, message: str, *, segment_id: int, epoch: int) -> None:
        super().__init__(message)
        self.segment_id = segment_id
        self.epoch = epoch


@dataclass(frozen=True, slots=True)
class _Taken:
    """A slot found holding a segment other than the one being written: its writer's epoch, and
    whether it was read back and found to hold other bytes of the writer's own epoch."""

    epoch: int
    other_bytes: bool = False


SegmentBytes = bytes | list[bytes]
"""A segment's bytes: whole, or as the pieces they join into, in order (a store that writes
pieces, ``put_pieces_if_absent``, writes them without joining them: a local directory)."""


def segment_metadata(epoch: int, durable_floor: int | None) -> dict[str, str]:
    """The user metadata a segment is stored with: its writer's epoch and, when given, its
    durable floor."""
    metadata = {EPOCH_METADATA: str(epoch)}
    if durable_floor is not None:
        metadata[FLOOR_METADATA] = str(durable_floor)
    return metadata


def _put_segment(
    store: ObjectStore, key: str, data: SegmentBytes, metadata: dict[str, str]
) -> None:
    """``put_if_absent`` of a segment, whole or as pieces
    (:func:`~inkpen.objectstore.base.put_pieces_if_absent`: written without being joined by a
    store that can, joined for any other)."""
    if isinstance(data, bytes):
        store.put_if_absent(key, data, metadata=metadata)
    else:
        put_pieces_if_absent(store, key, data, metadata=metadata)


def _create_segment(
    store: ObjectStore,
    segment_id: int,
    data: SegmentBytes,
    epoch: int,
    *,
    retried: bool = False,
    durable_floor: int | None = None,
) -> _Taken | None:
    """Create-if-absent a segment: None when our bytes are there, else what holds the slot.

    The one read back of a segment write ("did my create land?"). After a lost response (an
    indefinite error), or when ``retried`` (an earlier attempt of this very write had an unknown
    outcome), the slot is read back: empty means write again; a segment the reader rule judges
    to be of our own epoch (:meth:`EpochRule.judge`) is compared with ``data``, and our bytes
    mean it landed. Gives up with the last store error after a few rounds that settle nothing.
    """
    key = segment_key(segment_id)
    metadata = segment_metadata(epoch, durable_floor)
    uncertain = False
    last_error: StoreError | None = None
    for _ in range(_RESOLVE_ATTEMPTS):
        try:
            _put_segment(store, key, data, metadata)
            return None
        except AlreadyExistsError:
            pass
        except StoreError as exc:
            if exc.definite and not uncertain:
                raise
            uncertain = uncertain or not exc.definite
            last_error = exc
        try:
            found = segment_epoch(store, segment_id)
            if found is None:
                continue  # empty (a lost create that never landed): write again
            ours = EpochRule(epoch).judge(found) is SlotEpoch.SAME
            if ours and (uncertain or retried):
                # Only this writer holds this epoch: the bytes there are ours unless it reused
                # the id or the store lost them, which the comparison tells apart.
                ours_there = store.get(key) == (data if isinstance(data, bytes) else b"".join(data))
                return None if ours_there else _Taken(found, other_bytes=True)
        except StoreError as exc:
            last_error = exc
            continue
        return _Taken(found)
    assert last_error is not None
    if uncertain and last_error.definite:
        raise StoreError(
            f"could not learn whether journal segment {segment_id} of {store.url} was written: "
            f"{last_error}",
            definite=False,
            key=key,
        ) from last_error
    raise last_error


def write_segment(
    store: ObjectStore,
    segment_id: int,
    data: SegmentBytes,
    *,
    writer_epoch: int,
    retried: bool = False,
    durable_floor: int | None = None,
) -> None:
    """Create journal segment ``segment_id`` holding ``data`` (whole, or pieces in order) on
    behalf of ``writer_epoch``, once, recording ``durable_floor`` (the id through which every
    segment was durable when the writer issued this one) when given.

    The slot is taken with create-if-absent. When it is already occupied, the reader rule judges
    the epoch there against the writer's (:meth:`EpochRule.judge`): a newer epoch raises
    :class:`FencedError`; an older one raises :class:`OlderSlot`; the writer's own where this
    write cannot have landed raises :class:`InkpenError` (the writer's segment ids went wrong).
    A lost response, or a
    write ``retried`` after an unknown outcome, is resolved by reading the slot back (our bytes:
    done; empty: write again; other bytes of our epoch: :class:`InkpenError`, a loss; another
    epoch's: as above); when that cannot be settled, the indefinite :class:`StoreError` is
    raised. :meth:`~inkpen.manifest.table_store.TableStore.write_segment` is the writer's way
    in: it retries an unknown outcome with the same bytes.
    """
    epoch = _check_epoch_arg(writer_epoch)
    taken = _create_segment(
        store, segment_id, data, epoch, retried=retried, durable_floor=durable_floor
    )
    if taken is None:
        return
    found = taken.epoch
    verdict = EpochRule(epoch).judge(found)
    if verdict is SlotEpoch.NEWER:
        raise _fenced(segment_id, found, epoch)
    if verdict is SlotEpoch.SAME and taken.other_bytes:
        raise InkpenError(
            f"journal segment {segment_id} holds other bytes of writer epoch {epoch}: "
            "two writers claimed one epoch, or the store lost a write it had acknowledged"
        )
    if verdict is SlotEpoch.SAME:
        raise InkpenError(
            f"journal segment {segment_id} already holds a segment of this writer's epoch "
            f"{epoch}: the writer used one segment id twice; this is a bug in inkpen"
        )
    raise OlderSlot(
        f"journal segment {segment_id} holds epoch {found}, older than this writer's epoch "
        f"{epoch}, in a slot after this writer's fence: a fenced writer's write landed there, "
        "further above the fence than its writes in flight could reach; this is a bug",
        segment_id=segment_id,
        epoch=found,
    )


def list_segments(store: ObjectStore, after: int) -> list[SegmentRef]:
    """The contiguous run of segments with ids ``after + 1, after + 2, ...`` (stops at a gap)."""
    run: list[SegmentRef] = []
    for ref in scan_segments(store, after).refs:
        if ref.id != after + 1 + len(run):
            break
        run.append(ref)
    return run


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """Every journal segment after ``after``, and the ids missing among them (see module doc).

    ``refs`` are the segments present, in id order, not stopping at a gap. ``missing`` are the
    ids in ``(after, end)`` that are absent, ``end`` being one past the highest segment present
    or ``next_segment`` (the manifest's), whichever is higher. A scan straight from the listing
    (:func:`scan_segments`) names every gap; once judged (:func:`judge_tail`), ``missing`` are
    the damaged ids only and ``torn_from`` the first id of a torn tail, if there is one.
    """

    after: int
    refs: tuple[SegmentRef, ...]
    missing: tuple[int, ...]
    next_segment: int = 1
    torn_from: int | None = None
    """The lowest missing id at or above ``next_segment`` above which no segment records a
    durable floor reaching it: the segments above it were in flight together and none was
    acknowledged (a torn tail). None when there is no torn tail (or the scan is not judged)."""

    @property
    def last(self) -> int:
        """The highest segment id present, or ``after`` when there is none."""
        return self.refs[-1].id if self.refs else self.after

    @property
    def end(self) -> int:
        """One past the journal's durable run: the first id of the torn tail, or one past the
        highest segment present (never below ``next_segment``)."""
        if self.torn_from is not None:
            return self.torn_from
        return max(self.last + 1, self.next_segment)

    @property
    def torn(self) -> tuple[int, ...]:
        """The ids present above :attr:`torn_from`: never acknowledged, never replayed."""
        if self.torn_from is None:
            return ()
        return tuple(r.id for r in self.refs if r.id > self.torn_from)

    @property
    def kept(self) -> tuple[SegmentRef, ...]:
        """The segments present below :attr:`end` (those a reader of the tail replays)."""
        end = self.end
        return tuple(r for r in self.refs if r.id < end)


def scan_segments(store: ObjectStore, after: int, *, next_segment: int = 1) -> SegmentScan:
    """Every segment with an id above ``after`` and the ids missing below the highest one or
    below ``next_segment`` (one listing, starting after segment ``after``: the rolled segments
    GC has not removed yet and the fences of earlier writers cost it nothing; not judged: see
    :func:`judge_tail`)."""
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise UsageError(f"after must be an int >= 0, got {after!r}")
    refs: list[SegmentRef] = []
    # The listing starts after segment ``after``: the segments before it are never paged through.
    token: str | None = segment_key(after) if after else None
    more = True
    while more:
        page = store.list_page(JOURNAL_PREFIX, token=token)
        token, more = page.next_token, page.next_token is not None
        for info in page.objects:
            segment_id = parse_segment_key(info.key)
            if segment_id is None:
                if info.key.startswith(JOURNAL_PREFIX + "compacted/"):
                    more = False  # "compacted/" sorts after every 20-digit segment key
                    break
                continue
            refs.append(SegmentRef(segment_id, info.size))
    present = {r.id for r in refs}
    end = max(refs[-1].id + 1 if refs else after + 1, next_segment)
    missing = tuple(i for i in range(after + 1, end) if i not in present)
    return SegmentScan(after, tuple(refs), missing, next_segment)


def torn_tail(refs: Sequence[SegmentRef], missing: Sequence[int], next_segment: int) -> int | None:
    """The first id of the torn tail among ``missing`` (see the module docstring): the lowest
    missing id ``g >= next_segment`` such that every segment of ``refs`` above ``g`` records a
    durable floor below ``g`` (:attr:`SegmentRef.floor`). Pure: the floors must be filled in."""
    candidates = [g for g in missing if g >= next_segment]
    if not candidates:
        return None
    ordered = sorted(refs, key=lambda r: r.id)
    highest_floor = -1  # the highest floor among the segments above the gap looked at
    above: dict[int, int] = {}
    position = len(ordered)
    for gap in sorted(candidates, reverse=True):
        while position and ordered[position - 1].id > gap:
            position -= 1
            highest_floor = max(highest_floor, ordered[position].floor)
        above[gap] = highest_floor
    for gap in candidates:
        if above[gap] < gap:
            return gap
    return None


def judge_tail(store: ObjectStore, scan: SegmentScan) -> SegmentScan:
    """``scan`` judged: the torn tail told from damage (see the module docstring).

    When a gap lies at or above ``next_segment``, the durable floors of the segments above the
    lowest such gap are read (one HEAD each, in parallel; none otherwise). Answers the scan with
    ``torn_from`` set and ``missing`` holding only the damaged ids: those below ``next_segment``
    and those below the torn tail (some later segment records that they were durable)."""
    candidates = [g for g in scan.missing if g >= scan.next_segment]
    if not candidates:
        return scan
    lowest = candidates[0]
    refs = list(scan.refs)
    above = [r for r in refs if r.id > lowest and r.durable_floor is None]
    if above:
        stamped = {r.id: r for r in with_epochs(store, above)}
        refs = [stamped.get(r.id, r) for r in refs]
    torn_from = torn_tail(refs, scan.missing, scan.next_segment)
    if torn_from is None:
        return replace(scan, refs=tuple(refs))
    damaged = tuple(g for g in scan.missing if g < torn_from)
    return replace(scan, refs=tuple(refs), missing=damaged, torn_from=torn_from)


def describe_missing(missing: Sequence[int]) -> str:
    """``journal/...5.jnl, journal/...6.jnl`` (the first few keys of ``missing``)."""
    shown = ", ".join(segment_key(i) for i in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return shown + more


def missing_segments_error(url: str, missing: Sequence[int]) -> CorruptionError:
    """The error for journal segments that should exist and do not."""
    return CorruptionError(
        f"{url}/{segment_key(missing[0])}",
        f"journal segment(s) {describe_missing(missing)} are missing below later segments or "
        "below the manifest's next_segment: the acknowledged writes they held are lost. Restore "
        "the missing objects from a backup, or open what is left with "
        "allow_missing_segments=True (`inkpen verify` lists every damaged object)",
    )


def settle_missing(url: str, scan: SegmentScan, *, allow: bool) -> None:
    """Raise :func:`missing_segments_error` for ``scan.missing``, or log it when ``allow``."""
    if not scan.missing:
        return
    if not allow:
        raise missing_segments_error(url, scan.missing)
    log.warning(
        "journal.segments_missing",
        url=url,
        missing=[segment_key(i) for i in scan.missing],
        after=scan.after,
        last=scan.last,
    )


def scan_latest(
    manifest_store: ManifestStore, versioned: VersionedManifest
) -> tuple[VersionedManifest, SegmentScan]:
    """Scan the segments after ``versioned``'s ``last_rolled_segment``, judged
    (:func:`judge_tail`), from a manifest that explains every gap it can.

    A roll committed after ``versioned`` was read lets GC remove the rolled segments, which then
    look missing from the older manifest's point of view: when the scan finds ids missing and
    the latest manifest has rolled further, the scan is repeated from the latest. Answers the
    manifest the scan was made from and the scan.
    """
    store = manifest_store.store
    for _ in range(_RESOLVE_ATTEMPTS):
        journal = versioned.manifest.journal
        scan = judge_tail(
            store,
            scan_segments(store, journal.last_rolled_segment, next_segment=journal.next_segment),
        )
        if not scan.missing:
            return versioned, scan
        again = manifest_store.latest()
        if (
            again is None
            or again.manifest.journal.last_rolled_segment <= journal.last_rolled_segment
        ):
            return versioned, scan
        versioned = again
    return versioned, scan


def with_epochs(store: ObjectStore, refs: Sequence[SegmentRef]) -> list[SegmentRef]:
    """``refs`` with each segment's writer epoch and durable floor filled in from one HEAD each,
    in parallel (segments that vanished are dropped)."""
    unknown = [r for r in refs if r.writer_epoch is None]
    if not unknown:
        return list(refs)
    found = run_bounded(lambda r: segment_stamp(store, r.id), unknown, limit=concurrency(store))
    stamps = dict(zip(unknown, found, strict=True))
    filled: list[SegmentRef] = []
    for ref in refs:
        if ref.writer_epoch is not None:
            filled.append(ref)
            continue
        stamp = stamps[ref]
        if stamp is not None:
            filled.append(
                replace(ref, writer_epoch=stamp.writer_epoch, durable_floor=stamp.durable_floor)
            )
    return filled


class SlotEpoch(enum.Enum):
    """Where a segment's writer epoch stands against the highest epoch accepted before it."""

    OLDER = "older"
    """Below it: written by a writer already fenced; the reader rule rejects the segment."""
    SAME = "same"
    NEWER = "newer"
    """Above it: a newer writer wrote it, and every writer of a lower epoch is fenced."""


class EpochRule:
    """The reader rule, one segment at a time in id order: a segment whose writer epoch is below
    an earlier accepted one's was written by a fenced writer after a newer one took over, and is
    rejected. The one place the rule is written: :func:`accepted_segments` applies it to a run
    of segments, a following Reader to each segment it probes, and a writer of epoch ``E``
    (``EpochRule(E)``: its fence is accepted) to the segment it finds in a slot it writes
    (:func:`write_segment`, the claim's fence): an older epoch there is one readers reject, a
    newer one fences the writer."""

    __slots__ = ("highest",)

    def __init__(self, highest: int = 0) -> None:
        self.highest = highest
        """The highest epoch accepted so far."""

    def judge(self, writer_epoch: int) -> SlotEpoch:
        """Where a segment of ``writer_epoch`` stands against :attr:`highest` (changes nothing)."""
        if writer_epoch < self.highest:
            return SlotEpoch.OLDER
        return SlotEpoch.SAME if writer_epoch == self.highest else SlotEpoch.NEWER

    def accepts(self, writer_epoch: int) -> bool:
        """Whether the next segment (in id order), of ``writer_epoch``, is accepted."""
        if self.judge(writer_epoch) is SlotEpoch.OLDER:
            return False
        self.highest = writer_epoch
        return True


def accepted_segments(refs: Iterable[SegmentRef]) -> list[SegmentRef]:
    """The reader rule (:class:`EpochRule`) over ``refs`` in id order.

    Each ref must carry its epoch (see :func:`with_epochs`). The result's epochs never decrease.
    """
    accepted: list[SegmentRef] = []
    rule = EpochRule()
    previous_id: int | None = None
    for ref in refs:
        if ref.writer_epoch is None:
            raise UsageError(f"segment {ref.id} has no epoch; fill epochs in with with_epochs()")
        if previous_id is not None and ref.id <= previous_id:
            raise UsageError("segments must be given in increasing id order")
        previous_id = ref.id
        if rule.accepts(ref.writer_epoch):
            accepted.append(ref)
    return accepted


def _bump_epoch(
    now: float,
    *,
    require_initialized: bool,
    url: str,
    compaction: str | None,
    in_flight: int,
    older: list[int],
) -> Callable[[VersionedManifest], Manifest]:
    """The claim's CAS change; ``older`` is set to the ``segments_in_flight`` of the manifest it
    was last given (the bound of every older writer)."""

    def change(versioned: VersionedManifest) -> Manifest:
        manifest = versioned.manifest
        if require_initialized or manifest.destroyed_at is not None:
            require_live(versioned, url)
        older[:] = [manifest.segments_in_flight]
        epoch = manifest.writer_epoch + 1
        checkpoint = Checkpoint(
            id=str(uuid.uuid4()),
            manifest_id=versioned.id + 1,
            create_time=now,
            metadata={CHECKPOINT_KIND: KIND_WRITER, "epoch": str(epoch)},
        )
        return replace(
            manifest.without_checkpoints_of_kind(KIND_WRITER).with_checkpoint(checkpoint),
            writer_epoch=epoch,
            writer_compaction=manifest.writer_compaction if compaction is None else compaction,
            segments_in_flight=max(manifest.segments_in_flight, in_flight),
        )

    return change


def _require_epoch(manifest_store: ManifestStore, epoch: int) -> VersionedManifest:
    """The latest manifest, which must still hold writer epoch ``epoch`` (else fenced)."""
    confirmed = manifest_store.latest()
    if confirmed is None or confirmed.manifest.writer_epoch != epoch:
        found = confirmed.manifest.writer_epoch if confirmed is not None else None
        raise FencedError(
            f"while epoch {epoch} fenced the journal of {manifest_store.url}, the manifest "
            f"moved to writer epoch {found}: a newer writer opened the database. Open it again "
            "if this process should write"
        )
    return confirmed


def claim_writer(
    manifest_store: ManifestStore,
    *,
    now: float | None = None,
    require_initialized: bool = True,
    allow_missing_segments: bool = False,
    compaction: str | None = None,
    segments_in_flight: int = 1,
) -> WriterClaim:
    """Become the database's writer: bump the epoch, fence the journal, confirm (see module doc).

    ``compaction`` (``"internal"`` / ``"external"``) is recorded with the epoch as the
    manifest's ``writer_compaction``: a Bookie passes its option, so a compactor can tell
    whether the writer merges itself. None (a claimant that runs no merges, such as a bulk
    commit) keeps what the manifest says. ``segments_in_flight``: the most segment writes the
    claimant will keep in flight (raises the manifest's bound, which never goes down).

    Raises :class:`FencedError` when a newer writer claims the database meanwhile, and the
    errors of :func:`require_live` for a destroyed (or, unless ``require_initialized`` is False,
    an unfinished) database. Missing journal segments raise :class:`CorruptionError` before
    anything is written, unless ``allow_missing_segments``: then they are logged, the claim
    fences above the highest segment present (or at a torn tail) and replays every accepted
    segment below it. A torn tail is not damage: the fence goes into its first slot.
    """
    if not isinstance(manifest_store, ManifestStore):
        raise UsageError("claim_writer needs a ManifestStore")
    if not isinstance(allow_missing_segments, bool):
        raise UsageError(
            f"allow_missing_segments must be True or False, got {allow_missing_segments!r}"
        )
    if (
        not isinstance(segments_in_flight, int)
        or isinstance(segments_in_flight, bool)
        or segments_in_flight < 1
    ):
        raise UsageError(f"segments_in_flight must be an int >= 1, got {segments_in_flight!r}")
    store = manifest_store.store
    url = manifest_store.url
    when = time.time() if now is None else now
    if not allow_missing_segments:
        # Damage is refused before the epoch moves: nothing is written.
        current = manifest_store.latest()
        if current is not None:
            settle_missing(url, scan_latest(manifest_store, current)[1], allow=False)
    if compaction is not None and compaction not in COMPACTION_MODES:
        raise UsageError(f"compaction must be internal or external, got {compaction!r}")
    older: list[int] = [1]
    claimed = manifest_store.update(
        _bump_epoch(
            when,
            require_initialized=require_initialized,
            url=url,
            compaction=compaction,
            in_flight=segments_in_flight,
            older=older,
        )
    )
    epoch = claimed.manifest.writer_epoch
    journal = claimed.manifest.journal
    # No older writer can roll any more (its epoch is stale), so this scan sees a settled tail
    # (but for writes an older writer still has in flight, which only ever land in the torn tail
    # or above it: the fence goes into the tail's first slot).
    scan = judge_tail(
        store,
        scan_segments(store, journal.last_rolled_segment, next_segment=journal.next_segment),
    )
    if scan.missing and not allow_missing_segments:
        _require_epoch(manifest_store, epoch)  # a newer writer may have rolled and collected
        raise missing_segments_error(url, scan.missing)
    if scan.torn_from is not None:
        log.info(
            "journal.torn_tail",
            url=url,
            torn_from=segment_key(scan.torn_from),
            never_acknowledged=[segment_key(i) for i in scan.torn],
            epoch=epoch,
        )
    candidate = scan.end
    fence = build_journal([], writer_epoch=epoch)
    while True:
        taken = _create_segment(store, candidate, fence, epoch, durable_floor=candidate - 1)
        if taken is None:
            break
        verdict = EpochRule(epoch).judge(taken.epoch)
        if verdict is SlotEpoch.NEWER:
            raise _fenced(candidate, taken.epoch, epoch)
        if verdict is SlotEpoch.SAME:
            raise InkpenError(
                f"journal segment {candidate} already holds a fence or data of epoch {epoch}, "
                "the epoch this writer just claimed: two writers hold one epoch; this is a bug"
            )
        log.debug(
            "writer.fence_slot_taken", url=url, segment=candidate, found=taken.epoch, epoch=epoch
        )
        candidate += 1
    confirmed = _require_epoch(manifest_store, epoch)
    rolled = max(journal.last_rolled_segment, confirmed.manifest.journal.last_rolled_segment)
    tail = scan_segments(store, rolled, next_segment=candidate)
    missing = tuple(i for i in tail.missing if i < candidate)
    if missing:
        _require_epoch(manifest_store, epoch)
    settle_missing(url, replace(tail, missing=missing), allow=allow_missing_segments)
    before = [r for r in tail.refs if r.id < candidate]
    segments = accepted_segments(with_epochs(store, before))
    rule = EpochRule(epoch)
    for ref in segments:
        if ref.writer_epoch is not None and rule.judge(ref.writer_epoch) is SlotEpoch.NEWER:
            raise _fenced(ref.id, ref.writer_epoch, epoch)
    log.debug(
        "writer.claimed",
        url=url,
        epoch=epoch,
        manifest_id=claimed.id,
        fence_segment=candidate,
        replay_segments=len(segments),
        missing_segments=len(missing),
        older_in_flight=older[0],
    )
    return WriterClaim(epoch, confirmed, candidate, tuple(segments), missing, older[0])
