"""Writer epochs and fencing: how a new writer takes a database over and stops every older one.

Journal segments (``journal/<id>.jnl``) are written with create-if-absent at contiguous ids, one
at a time, and each records the epoch of its writer (in user metadata ``writer-epoch`` and in its
header). A writer claims the database in three steps:

1. **Bump the epoch.** A CAS manifest update sets ``writer_epoch = E`` (one above the stored
   epoch), drops the checkpoints of earlier writers and adds a writer checkpoint for epoch ``E``
   pinning the manifest it writes.
2. **Fence the journal.** List the segments after ``last_rolled_segment``, take the first free id
   (the end of the contiguous run, and no lower than ``journal.next_segment``) and create an empty
   segment of epoch ``E`` there. If the slot is taken, the four outcomes of a fence write are:

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

Invariants:

- segment ids are contiguous from 1 (a writer writes id ``n + 1`` only after ``n`` exists);
- the epochs of accepted segments never decrease along the ids;
- a fenced writer learns of it no later than its next segment write (the slot it wants holds a
  newer writer's fence or data) or its next manifest update (the manifest holds a newer epoch);
- with writers that write one segment at a time, the slot right after the last segment of any
  epoch holds a newer writer's fence. GC therefore keeps fence segments: deleting one would let a
  stalled writer write into the freed slot and acknowledge writes nobody will replay.

**Missing segments.** Because ids are contiguous, an id after ``last_rolled_segment`` that is
absent while a higher segment exists, or that lies below the manifest's ``next_segment``, is
damage: the segment held acknowledged writes (and possibly newer values of keys an older segment
also holds). :func:`scan_segments` lists every segment after ``last_rolled_segment`` without
stopping at a gap and names the missing ids; :func:`settle_missing` raises a
:class:`CorruptionError` naming them, or, when the operator allowed it
(``allow_missing_segments``), logs ``journal.segments_missing`` and lets the caller go on with
what is left. Only the tail may legitimately be short: a write in flight at a crash never landed,
and nothing was written above it. A writer that claims a database with missing segments allowed
fences above the highest segment present, so none of the remaining segments is rejected.
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
_RESOLVE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One journal segment seen in a listing: its id, size and (once read) its writer's epoch."""

    id: int
    size: int
    writer_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class WriterClaim:
    """What a writer holds after claiming a database.

    ``epoch`` is its writer epoch, ``versioned`` the manifest it confirmed its claim against,
    ``fence_segment`` the id of its empty fence segment (its first own segment is the next id),
    and ``segments`` the accepted segments in ``(last_rolled_segment, fence_segment)`` that it
    must replay, each with its epoch. ``missing`` are the segment ids found missing there (only
    ever non-empty when the claim was made with ``allow_missing_segments``).
    """

    epoch: int
    versioned: VersionedManifest
    fence_segment: int
    segments: tuple[SegmentRef, ...]
    missing: tuple[int, ...] = ()

    @property
    def next_segment(self) -> int:
        """The id of the first segment this writer writes after its fence."""
        return self.fence_segment + 1

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
    key = segment_key(segment_id)
    try:
        info = store.head(key)
    except NotFoundError:
        return None
    recorded = info.metadata.get(EPOCH_METADATA)
    if recorded is not None:
        try:
            return int(recorded)
        except ValueError:
            pass
    try:
        head = store.get_range(key, 0, HEADER_SIZE)
    except NotFoundError:
        return None
    if len(head) < HEADER_SIZE:
        raise CorruptionError(key, f"segment is {len(head)} bytes, shorter than a journal header")
    return read_header(head, key).writer_epoch


def _fenced(segment_id: int, found: int, mine: int) -> FencedError:
    return FencedError(
        f"journal segment {segment_id} was written by writer epoch {found}, newer than this "
        f"writer's epoch {mine}: a newer writer has opened the database. Close this handle; "
        "open the database again if this process should write"
    )


@dataclass(frozen=True, slots=True)
class _Taken:
    """A slot found holding a segment other than the one being written: its writer's epoch, and
    whether it was read back and found to hold other bytes of the writer's own epoch."""

    epoch: int
    other_bytes: bool = False


SegmentBytes = bytes | list[bytes]
"""A segment's bytes: whole, or as the pieces they join into, in order (a store that writes
pieces, ``put_pieces_if_absent``, writes them without joining them: a local directory)."""


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
    store: ObjectStore, segment_id: int, data: SegmentBytes, epoch: int, *, retried: bool = False
) -> _Taken | None:
    """Create-if-absent a segment: None when our bytes are there, else what holds the slot.

    The one read back of a segment write ("did my create land?"). After a lost response (an
    indefinite error), or when ``retried`` (an earlier attempt of this very write had an unknown
    outcome), the slot is read back: empty means write again; a segment the reader rule judges
    to be of our own epoch (:meth:`EpochRule.judge`) is compared with ``data``, and our bytes
    mean it landed. Gives up with the last store error after a few rounds that settle nothing.
    """
    key = segment_key(segment_id)
    metadata = {EPOCH_METADATA: str(epoch)}
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
) -> None:
    """Create journal segment ``segment_id`` holding ``data`` (whole, or pieces in order) on
    behalf of ``writer_epoch``, once.

    The slot is taken with create-if-absent. When it is already occupied, the reader rule judges
    the epoch there against the writer's (:meth:`EpochRule.judge`): a newer epoch raises
    :class:`FencedError`; an older one, or the writer's own where this write cannot have landed,
    raises :class:`InkpenError` (the writer's segment ids went wrong). A lost response, or a
    write ``retried`` after an unknown outcome, is resolved by reading the slot back (our bytes:
    done; empty: write again; other bytes of our epoch: :class:`InkpenError`, a loss; another
    epoch's: as above); when that cannot be settled, the indefinite :class:`StoreError` is
    raised. :meth:`~inkpen.manifest.table_store.TableStore.write_segment` is the writer's way
    in: it retries an unknown outcome with the same bytes.
    """
    epoch = _check_epoch_arg(writer_epoch)
    taken = _create_segment(store, segment_id, data, epoch, retried=retried)
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
    raise InkpenError(
        f"journal segment {segment_id} holds epoch {found}, older than this writer's epoch "
        f"{epoch}, in a slot after this writer's fence: an older writer wrote past the "
        "fence, which writers that write one segment at a time never do; this is a bug"
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
    or the manifest's ``next_segment``, whichever is higher.
    """

    after: int
    refs: tuple[SegmentRef, ...]
    missing: tuple[int, ...]

    @property
    def last(self) -> int:
        """The highest segment id present, or ``after`` when there is none."""
        return self.refs[-1].id if self.refs else self.after


def scan_segments(store: ObjectStore, after: int, *, next_segment: int = 1) -> SegmentScan:
    """Every segment with an id above ``after`` and the ids missing below the highest one or
    below ``next_segment`` (one listing, starting after segment ``after``: the rolled segments
    GC has not removed yet and the fences of earlier writers cost it nothing)."""
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
    return SegmentScan(after, tuple(refs), missing)


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
    """Scan the segments after ``versioned``'s ``last_rolled_segment``, from a manifest that
    explains every gap it can.

    A roll committed after ``versioned`` was read lets GC remove the rolled segments, which then
    look missing from the older manifest's point of view: when the scan finds ids missing and
    the latest manifest has rolled further, the scan is repeated from the latest. Answers the
    manifest the scan was made from and the scan.
    """
    store = manifest_store.store
    for _ in range(_RESOLVE_ATTEMPTS):
        journal = versioned.manifest.journal
        scan = scan_segments(store, journal.last_rolled_segment, next_segment=journal.next_segment)
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
    """``refs`` with each segment's writer epoch filled in (segments that vanished are dropped)."""
    unknown = [r for r in refs if r.writer_epoch is None]
    if not unknown:
        return list(refs)
    found = run_bounded(lambda r: segment_epoch(store, r.id), unknown, limit=concurrency(store))
    epochs = dict(zip(unknown, found, strict=True))
    filled: list[SegmentRef] = []
    for ref in refs:
        epoch = ref.writer_epoch if ref.writer_epoch is not None else epochs[ref]
        if epoch is not None:
            filled.append(replace(ref, writer_epoch=epoch))
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
    now: float, *, require_initialized: bool, url: str, compaction: str | None
) -> Callable[[VersionedManifest], Manifest]:
    def change(versioned: VersionedManifest) -> Manifest:
        manifest = versioned.manifest
        if require_initialized or manifest.destroyed_at is not None:
            require_live(versioned, url)
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
) -> WriterClaim:
    """Become the database's writer: bump the epoch, fence the journal, confirm (see module doc).

    ``compaction`` (``"internal"`` / ``"external"``) is recorded with the epoch as the
    manifest's ``writer_compaction``: a Bookie passes its option, so a compactor can tell
    whether the writer merges itself. None (a claimant that runs no merges, such as a bulk
    commit) keeps what the manifest says.

    Raises :class:`FencedError` when a newer writer claims the database meanwhile, and the
    errors of :func:`require_live` for a destroyed (or, unless ``require_initialized`` is False,
    an unfinished) database. Missing journal segments raise :class:`CorruptionError` before
    anything is written, unless ``allow_missing_segments``: then they are logged, the claim
    fences above the highest segment present and replays every accepted segment below it.
    """
    if not isinstance(manifest_store, ManifestStore):
        raise UsageError("claim_writer needs a ManifestStore")
    if not isinstance(allow_missing_segments, bool):
        raise UsageError(
            f"allow_missing_segments must be True or False, got {allow_missing_segments!r}"
        )
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
    claimed = manifest_store.update(
        _bump_epoch(when, require_initialized=require_initialized, url=url, compaction=compaction)
    )
    epoch = claimed.manifest.writer_epoch
    journal = claimed.manifest.journal
    # No older writer can roll any more (its epoch is stale), so this scan sees a settled tail.
    scan = scan_segments(store, journal.last_rolled_segment, next_segment=journal.next_segment)
    if scan.missing and not allow_missing_segments:
        _require_epoch(manifest_store, epoch)  # a newer writer may have rolled and collected
        raise missing_segments_error(url, scan.missing)
    candidate = max(scan.last + 1, journal.next_segment)
    fence = build_journal([], writer_epoch=epoch)
    while True:
        taken = _create_segment(store, candidate, fence, epoch)
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
    )
    return WriterClaim(epoch, confirmed, candidate, tuple(segments), missing)
