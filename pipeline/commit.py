"""The commit of a bulk load, on the driver: every task's files join the database in one CAS.

Protocol (all or nothing; one manifest update makes the load visible):

1. **Collect.** One :class:`LoadedPartition` per Spark partition, from the successful attempts
   only (Spark passes nothing else), in partition order. Partitions that wrote no rows add
   nothing; a load of no rows changes nothing at all. Every file named must still exist: GC
   removes uncommitted files older than its ``min_age``, which must therefore exceed the time
   between a task writing its files and this commit.
2. **Fence.** :func:`inkpen.manifest.fencing.claim_writer` bumps the writer epoch and fences the
   journal: a live writer gets ``FencedError`` at its next segment write or manifest update and
   never acknowledges another write. The single-writer rule holds: the load is, for this commit,
   the database's writer.
3. **Finish the fenced writer's work** (:mod:`.tail`). Its acknowledged writes above
   ``ledger.persisted_sqn`` live only in the journal: their ledger entries are written as more
   SSTs (one per key tag). Its unrolled segments are rolled into one more journal file (as its
   own roll would have done), so every journal file's SQN range stays below the loaded ones.
4. **Number.** ``top`` is the highest SQN anywhere. Partition ``i`` (in partition order) gets
   ``sqn_base = top + rows of the partitions before it``, so its local SQNs 1..n become
   ``base + 1 .. base + n``: disjoint, above everything already there (loaded values win over
   older ones), and higher for later partitions (across tasks the higher partition wins;
   within a task the later row already has the higher local SQN).
5. **One CAS**, made with the claimed epoch (a newer writer meanwhile makes it fail with
   ``FencedError``):

   - L0 becomes: the loaded SSTs, newest first (highest partition first), then the tail's
     SSTs, then the L0 files that were there; the levels below are unchanged. Readers search L0 in
     that order and merges keep the highest SQN, so both agree on every key;
   - ``persisted_sqn`` becomes the top loaded SQN. Every SST entry then has an SQN at or below
     it, and nothing above it exists in any journal, so start-up replays nothing;
   - the loaded journal files join ``journal.files`` (sorted by SQN) with their ``sqn_base``
     and ``in_ledger=True``: their entries are in the ledger already, so replay skips them,
     while a rebuild from the journal (a restored backup) replays them; the rolled segments'
     file joins them too, and ``last_rolled_segment`` becomes the fence
     (``next_segment`` moves past it);
   - the claim's writer checkpoint is dropped: the load is not a long-lived writer.

   The change is recomputed if another process updates the manifest first, and refused if the
   ledger or the journal files changed since the claim (only a writer changes them).
6. With a ``load_id`` (the load option of that name), the CAS also records the load
   (:class:`~inkpen.manifest.model.LoadRecord`: id, time, rows, SQNs) in the manifest's
   ``loads``, atomically with the files. Before it claims, and again inside the CAS change, the
   commit looks the id up: a load already recorded commits nothing (no claim, no fence) and
   returns None, so a retried job, or a data set's commit retried after only some shards
   committed, never adds the same rows twice.
7. If the claim is lost to a newer writer before the CAS lands, the load claims again, which
   fences that writer too, and repeats steps 2-5, up to :data:`CLAIM_ATTEMPTS` times.

A commit that fails leaves the loaded files (and the tail's files) unreferenced: orphans, which
:func:`inkpen.manifest.gc.run_gc` or a writer's GC removes once older than ``min_age``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from inkpen.errors import FencedError, InkpenError, UsageError
from inkpen.formats.sst import SstShape
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import delete_checkpoint
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import WriterClaim, claim_writer
from inkpen.manifest.levels import from_manifest
from inkpen.manifest.model import (
    JournalFileDescriptor,
    LedgerState,
    LoadRecord,
    Manifest,
    SstDescriptor,
    VersionedManifest,
)
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import ObjectStore, open_store

from .files import write_journal, write_ssts
from .load_task import LoadedPartition
from .tail import JournalTail, read_journal_tail

log = get_logger("inkpen.pipeline")

CLAIM_ATTEMPTS = 3
_HEAD_WORKERS = 16
_TAIL_SST_BYTES = 1 << 62
"""The tail is written as one SST per key tag, however large."""


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a committed bulk load added."""

    manifest_id: int
    rows: int
    first_sqn: int
    last_sqn: int
    journal_files: int
    ssts: int
    tail_entries: int
    """Ledger entries of the fenced writer's journal tail the commit wrote as an SST."""
    rolled_entries: int
    """Entries of unrolled segments the commit rolled into a journal file."""
    writer_epoch: int


def check_partitions(parts: Sequence[LoadedPartition | None]) -> list[LoadedPartition]:
    """Step 1: the partitions in order, each once, each with local SQNs exactly 1..rows."""
    if any(part is None for part in parts):
        raise InkpenError("a bulk load was asked to commit with a failed task; it must abort")
    ordered = sorted((p for p in parts if p is not None), key=lambda p: p.partition_id)
    for before, after in itertools.pairwise(ordered):
        if before.partition_id == after.partition_id:
            raise InkpenError(
                f"two commit messages for partition {after.partition_id} (attempts "
                f"{before.attempt} and {after.attempt}); only one attempt per partition commits"
            )
    for part in ordered:
        covered = sum(f.entry_count for f in part.journal_files)
        first = min((f.min_sqn for f in part.journal_files), default=1)
        last = max((f.max_sqn for f in part.journal_files), default=0)
        if covered != part.rows or first != 1 or last != part.rows:
            raise InkpenError(
                f"partition {part.partition_id} reports {part.rows} rows but its journal files "
                f"hold SQNs {first}..{last} ({covered} entries); its files are inconsistent"
            )
    return ordered


def _check_files_exist(store: ObjectStore, names: Sequence[str]) -> None:
    tables = TableStore(store)
    with ThreadPoolExecutor(max_workers=_HEAD_WORKERS) as pool:
        found = pool.map(tables.exists, names)
        missing = [n for n, there in zip(names, found, strict=True) if not there]
    if missing:
        raise UsageError(
            f"{len(missing)} file(s) written by this load's tasks are gone from {store.url} "
            f"(first: {missing[0]}): GC removed them as orphans before the commit. GC's min_age "
            "must exceed the time from a task writing its files to the commit; raise it (the "
            "writer's gc_min_age, or run_gc's min_age) and run the load again"
        )


def _based(
    part: LoadedPartition, base: int
) -> tuple[tuple[SstDescriptor, ...], tuple[JournalFileDescriptor, ...]]:
    ssts = tuple(
        replace(s, min_sqn=s.min_sqn + base, max_sqn=s.max_sqn + base, sqn_base=base)
        for s in part.ssts
    )
    journals = tuple(
        replace(
            f, min_sqn=f.min_sqn + base, max_sqn=f.max_sqn + base, sqn_base=base, in_ledger=True
        )
        for f in part.journal_files
    )
    return ssts, journals


def _write_tail(
    store: ObjectStore, tail: JournalTail, epoch: int
) -> tuple[tuple[SstDescriptor, ...], JournalFileDescriptor | None]:
    """Step 3: the tail's ledger entries as SSTs (one per key tag: objects and index entries
    apart), the unrolled segments as one journal file."""
    ssts = write_ssts(store, tail.entries, SstShape(target_bytes=_TAIL_SST_BYTES))
    rolled = write_journal(store, tail.unrolled, writer_epoch=epoch) if tail.unrolled else None
    return tuple(ssts), rolled


def _release_claim(manifests: ManifestStore, checkpoint_id: str | None) -> None:
    """After a failed commit, drop the claim's writer checkpoint (it never expires, and GC keeps
    every manifest from the one it pins on); best effort: the next writer's claim drops it too."""
    if checkpoint_id is None:
        return
    try:
        delete_checkpoint(manifests, checkpoint_id)
    except InkpenError as exc:
        log.warning("pipeline.load_claim_release_failed", checkpoint=checkpoint_id, error=str(exc))


@dataclass(frozen=True, slots=True)
class _Additions:
    """What one commit attempt adds, with its SQNs assigned."""

    ssts: tuple[SstDescriptor, ...]
    """Newest (highest partition) first, then the tail's SSTs."""
    journal_files: tuple[JournalFileDescriptor, ...]
    """The loaded journal files, then the rolled segments' file if any."""
    first_sqn: int
    top_sqn: int


def _number(
    parts: Sequence[LoadedPartition],
    top: int,
    tail_ssts: tuple[SstDescriptor, ...],
    rolled: JournalFileDescriptor | None,
) -> _Additions:
    """Step 4: give partition i the base ``top + rows before it``; order SSTs newest first."""
    ssts: list[SstDescriptor] = []
    journals: list[JournalFileDescriptor] = []
    base = top
    for part in parts:
        based_ssts, based_journals = _based(part, base)
        ssts[:0] = based_ssts  # a later partition goes in front
        journals.extend(based_journals)
        base += part.rows
    ssts.extend(tail_ssts)
    if rolled is not None:
        journals.append(rolled)
    return _Additions(tuple(ssts), tuple(journals), top + 1, base)


class AlreadyLoaded(InkpenError):
    """The load's ``load_id`` is recorded in the manifest: it committed before."""


def _manifest_change(
    claim: WriterClaim,
    added: _Additions,
    writer_checkpoint: str | None,
    url: str,
    load_id: str | None = None,
) -> Callable[[VersionedManifest], Manifest]:
    """Step 5: the CAS change (a pure function of the manifest it is given)."""
    basis = claim.versioned.manifest

    def change(versioned: VersionedManifest) -> Manifest:
        current = versioned.manifest
        if load_id is not None and current.load(load_id) is not None:
            raise AlreadyLoaded(f"load {load_id} is already committed to {url}")
        if (
            current.ledger != basis.ledger
            or current.journal.files != basis.journal.files
            or current.journal.last_rolled_segment != basis.journal.last_rolled_segment
        ):
            raise InkpenError(
                f"the ledger or journal of {url} changed after this load claimed it (manifest "
                f"{claim.versioned.id} -> {versioned.id}); no writer should be able to do that, "
                "so the load stops without committing. Run it again"
            )
        levels = from_manifest(current.ledger).with_l0(*added.ssts)
        journal = replace(
            current.journal,
            files=tuple(
                sorted((*current.journal.files, *added.journal_files), key=lambda f: f.min_sqn)
            ),
            last_rolled_segment=max(current.journal.last_rolled_segment, claim.fence_segment),
            next_segment=max(current.journal.next_segment, claim.fence_segment + 1),
        )
        updated = replace(
            current,
            ledger=LedgerState(levels=levels.to_manifest(), persisted_sqn=added.top_sqn),
            journal=journal,
        )
        if writer_checkpoint is not None:
            updated = updated.without_checkpoint(writer_checkpoint)
        if load_id is not None:
            record = LoadRecord(
                load_id,
                round(time.time(), 3),
                added.top_sqn - added.first_sqn + 1,
                added.first_sqn,
                added.top_sqn,
            )
            updated = updated.with_load(record)
        return updated

    return change


def _commit_once(
    manifests: ManifestStore,
    resolver: StoreResolver,
    parts: Sequence[LoadedPartition],
    load_id: str | None,
) -> LoadReport:
    """Steps 2-5 against one claim."""
    claim = claim_writer(manifests)
    writer_checkpoint = claim.writer_checkpoint
    try:
        tail = read_journal_tail(resolver, claim)
        tail_ssts, rolled = _write_tail(manifests.store, tail, claim.epoch)
        added = _number(parts, tail.top_sqn, tail_ssts, rolled)
        change = _manifest_change(claim, added, writer_checkpoint, manifests.url, load_id)
        committed = manifests.update(change, writer_epoch=claim.epoch)
    except FencedError:
        raise  # the newer writer's claim has dropped this claim's writer checkpoint already
    except BaseException:
        _release_claim(manifests, writer_checkpoint)
        raise
    return LoadReport(
        manifest_id=committed.id,
        rows=added.top_sqn - tail.top_sqn,
        first_sqn=added.first_sqn,
        last_sqn=added.top_sqn,
        journal_files=len(added.journal_files) - (0 if rolled is None else 1),
        ssts=len(added.ssts) - len(tail_ssts),
        tail_entries=len(tail.entries),
        rolled_entries=len(tail.unrolled),
        writer_epoch=claim.epoch,
    )


def _recorded(manifests: ManifestStore, load_id: str | None) -> LoadRecord | None:
    if load_id is None:
        return None
    latest = manifests.latest()
    return None if latest is None else latest.manifest.load(load_id)


def _skipped(url: str, load_id: str | None, record: LoadRecord | None) -> None:
    log.info(
        "pipeline.load_already_committed",
        url=url,
        load_id=load_id,
        rows=None if record is None else record.rows,
        first_sqn=None if record is None else record.first_sqn,
        last_sqn=None if record is None else record.last_sqn,
    )


def commit_load(
    url: str, parts: Sequence[LoadedPartition | None], *, load_id: str | None = None
) -> LoadReport | None:
    """Commit a bulk load (module docstring); None when it holds no rows or when ``load_id`` is
    already recorded as committed (nothing changes either way)."""
    started = time.monotonic()
    ordered = [p for p in check_partitions(parts) if p.rows]
    if not ordered:
        log.info("pipeline.load_empty", url=url, partitions=len(parts))
        return None
    store = open_store(url)
    resolver = StoreResolver(store)
    try:
        manifests = ManifestStore(store)
        done = _recorded(manifests, load_id)
        if done is not None:
            _skipped(url, load_id, done)
            return None
        _check_files_exist(store, [name for part in ordered for name in part.files])
        for attempt in range(1, CLAIM_ATTEMPTS + 1):
            try:
                report = _commit_once(manifests, resolver, ordered, load_id)
                break
            except AlreadyLoaded:
                _skipped(url, load_id, _recorded(manifests, load_id))
                return None
            except FencedError as exc:
                if attempt == CLAIM_ATTEMPTS:
                    raise FencedError(
                        f"{exc}. The bulk load lost its claim on {url} to a newer writer "
                        f"{CLAIM_ATTEMPTS} times; run it again when no other writer is opening "
                        "the database"
                    ) from exc
                log.warning("pipeline.load_claim_lost", url=url, attempt=attempt, error=str(exc))
    finally:
        resolver.close()
        store.close()
    log.info(
        "pipeline.load_committed",
        url=url,
        load_id=load_id,
        manifest_id=report.manifest_id,
        rows=report.rows,
        first_sqn=report.first_sqn,
        last_sqn=report.last_sqn,
        journal_files=report.journal_files,
        ssts=report.ssts,
        tail_entries=report.tail_entries,
        rolled_entries=report.rolled_entries,
        writer_epoch=report.writer_epoch,
        ms=round((time.monotonic() - started) * 1000, 1),
    )
    return report


def log_abort(url: str, parts: Sequence[LoadedPartition | None]) -> None:
    """An aborted load changes nothing; its files stay as orphans for GC. Logs which."""
    files = [name for part in parts if part is not None for name in part.files]
    log.warning(
        "pipeline.load_aborted",
        url=url,
        finished_partitions=sum(1 for part in parts if part is not None),
        failed_partitions=sum(1 for part in parts if part is None),
        orphans=len(files),
        first_orphans=files[:5],
    )
