"""The compactor: ledger merges and GC in a process of their own, fenced by the compactor epoch.

A writer opened with ``compaction="external"`` writes L0 files and rolls segments but runs no
merge and no GC pass; a :class:`Compactor` (``inkpen.open_compactor(url)``, ``inkpen compactor
URL``) does, in any process. The protocol (docs/ledger.md, 'External compaction'):

1. **Claim.** One CAS update raises ``compactor_epoch`` to E (stored + 1). A compactor whose
   epoch is no longer the manifest's is fenced: every commit it makes checks E inside its CAS
   change (:func:`~inkpen.manifest.merging.check_compactor`) and raises
   :class:`~inkpen.errors.FencedError` without writing, so a superseded compactor changes
   nothing any manifest names (what it stored is an orphan that GC removes). The claim is
   refused (:class:`~inkpen.errors.UsageError`, nothing written) while the manifest records the
   writer epoch as ``compaction="internal"``, unless ``force`` says that writer is gone; a
   writer epoch recorded as internal later fences the compactor the same way
   (:func:`~inkpen.manifest.merging.check_writer_mode`).
2. **Merge.** From the latest manifest the merge policy (the ``merge_policy`` option, as in the
   writer) chooses one job; the inputs are read, merged and written as new SSTs, and one CAS
   commits :func:`~inkpen.manifest.merging.replace_ssts` against whatever manifest is latest
   then: the writer's L0 files added meanwhile stay. An input the latest no longer names (it
   cannot happen while this compactor holds the epoch) drops the job
   (:class:`~inkpen.manifest.merging.ManifestConflict`). ``run_once`` repeats until the policy
   answers no job (L0 empty, every level within its target) or :data:`MAX_JOBS` jobs ran.
3. **Compact the journal.** Each journal file is scored as the writer's clerk scores it
   (``compaction_sample_size`` sampled records, the retention rules of
   :mod:`inkpen.actors.journal.retention`) against the ledger *as its SSTs hold it* at the
   manifest's ``persisted_sqn`` (entries above it are kept as they are: the writer's memory may
   hold newer values); the best run is rewritten and committed with
   :func:`~inkpen.manifest.merging.replace_journal_files`. The writer's rolls add files beside
   it (a delta too).
4. **Collect.** A GC pass (:func:`inkpen.manifest.gc.run_gc`) as a process that is not the
   writer: ``min_age`` is at least :data:`~inkpen.manifest.gc.MIN_AGE_WITHOUT_WRITER` (the
   writer's files in flight are unknown here) and every file a manifest from the writer
   checkpoint up names is kept, so the files the writer's views and snapshots still read
   survive until the writer has adopted the new levels and moved its checkpoint. The compactor
   deletes nothing else: the SSTs its merges replace are deleted by that GC once no active
   manifest names them, or by the writer's delete_pending clerks.

The compactor holds no actors: one thread runs ``run_once``; ``run`` loops on a schedule.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.actors.journal.retention import Judgement, file_chunks
from inkpen.actors.kernel import compute
from inkpen.actors.kernel.read_ahead import journals_ahead
from inkpen.actors.kernel.views import LedgerView, SstHandle
from inkpen.actors.ledger.penciller_clerk import policy_for, run_merge
from inkpen.checks import check_seconds
from inkpen.errors import FencedError, InkpenError, NotFoundError, StoreError, UsageError
from inkpen.formats.journal import JournalEntry, JournalReader
from inkpen.formats.sst import SstInfo
from inkpen.logs import get_logger
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.gc import MIN_AGE_WITHOUT_WRITER, GcOptions, GcReport, run_gc
from inkpen.manifest.levels import Levels
from inkpen.manifest.merge_policy import MergeJob, MergePolicy
from inkpen.manifest.merging import (
    ManifestConflict,
    check_compactor,
    check_writer_mode,
    internal_writer,
    replace_journal_files,
    replace_ssts,
)
from inkpen.manifest.model import JournalFileDescriptor, Manifest, SstDescriptor, VersionedManifest
from inkpen.manifest.store import ManifestStore, require_live
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.base import is_local
from inkpen.objectstore.parallel import concurrency, run_bounded
from inkpen.options import Options

log = get_logger("inkpen.compactor")

MAX_JOBS = 256
"""Merge jobs one ``run_once`` runs at most (a writer adding L0 files as fast as they merge
would otherwise keep it from its GC pass for ever)."""

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CompactorReport:
    """What one :meth:`Compactor.run_once` did."""

    epoch: int
    merges: int = 0
    moves: int = 0
    conflicts: int = 0
    written: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    l0_files: int = 0
    """L0 files in the latest manifest when the merges stopped."""
    level_files: tuple[int, ...] = ()
    """Files per level then, indexed from L0 as everywhere."""
    journal: CompactionReport | None = None
    """The journal compaction of the round (None: it failed, or no journal file yet)."""
    gc: GcReport | None = None
    manifest_id: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        deleted = len(self.gc.deleted) if self.gc is not None else 0
        compacted = len(self.journal.compacted) if self.journal is not None else 0
        return (
            f"compactor epoch {self.epoch}: {self.merges} merges, {self.moves} moves, "
            f"{len(self.written)} SSTs written, {len(self.replaced)} replaced; L0 now "
            f"{self.l0_files} files, levels {list(self.level_files)}; {compacted} journal "
            f"files compacted; GC deleted {deleted} objects; manifest {self.manifest_id}; "
            f"{self.seconds:.2f} s"
        )


class Compactor:
    """The compactor role of one database; made by :func:`open_compactor`.

    Not thread-safe: one thread calls :meth:`run_once` or :meth:`run` (and :meth:`close`, or
    sets the ``stop_event`` given to :meth:`run` from another thread).
    """

    def __init__(
        self,
        store: ObjectStore,
        options: Options,
        *,
        owns_store: bool,
        interval: float,
        force: bool = False,
    ) -> None:
        self._store = store
        self._limit = concurrency(store)
        """Files opened or sampled at once (the store's bound on requests in flight)."""
        self._owns_store = owns_store
        self.options = options
        self.interval = interval
        self.manifests = ManifestStore(store)
        require_live(self.manifests.open_database(create_if_missing=False), store.url)
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        self.tables = TableStore.for_options(StoreResolver(store), options, on_write=self._stored)
        self.policy: MergePolicy = policy_for(options)
        self._turn = 0
        self._closed = False
        self._scored: tuple[frozenset[str], int] | None = None
        """The journal files and persisted SQN a round last scored and found nothing to do."""
        claimed = self.manifests.update(
            _claim(store.url, force=force), timeout=options.manifest_update_timeout
        )
        self.epoch = claimed.manifest.compactor_epoch
        manifest = claimed.manifest
        self._tolerated = manifest.writer_epoch if internal_writer(manifest) else None
        """The internal writer's epoch ``force`` declared gone (None: the writer is external)."""
        log.info(
            "compactor.claimed",
            url=store.url,
            epoch=self.epoch,
            manifest=claimed.id,
            forced_past_writer=self._tolerated,
        )

    @property
    def url(self) -> str:
        return self._store.url

    @property
    def closed(self) -> bool:
        return self._closed

    def _stored(self, name: str) -> None:
        with self._lock:
            self._in_flight.add(name)

    def _in_flight_names(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._in_flight)

    # -- one round ----------------------------------------------------------------------------

    def run_once(self, *, progress: Progress | None = None) -> CompactorReport:
        """Merge until the policy asks for nothing (at most :data:`MAX_JOBS` jobs), then run a
        GC pass; answers the report. Raises :class:`FencedError` once a newer compactor claimed
        the database (nothing of this round's unfinished work becomes visible)."""
        if self._closed:
            raise UsageError("this Compactor is closed; call inkpen.open_compactor again")
        say = progress or (lambda _: None)
        started = time.monotonic()
        merges = moves = conflicts = 0
        written: list[str] = []
        replaced: list[str] = []
        latest = self._latest()
        for _ in range(MAX_JOBS):
            job = self.policy.choose(Levels(latest.manifest.ledger.levels), turn=self._turn)
            self._turn += 1
            if job is None:
                break
            say(_describe(job))
            try:
                outputs = self._run_job(job)
                latest = self._commit(job, outputs)
            except ManifestConflict as exc:
                conflicts += 1
                log.warning("compactor.merge_conflict", error=str(exc))
                latest = self._latest()
                continue
            if job.move:
                moves += 1
            else:
                merges += 1
                written.extend(d.name for d in outputs)
                replaced.extend(d.name for d in job.inputs)
        journal = self._compact_journal(say)
        gc = self._collect(say)
        latest = self._latest()
        levels = latest.manifest.ledger.levels
        report = CompactorReport(
            epoch=self.epoch,
            merges=merges,
            moves=moves,
            conflicts=conflicts,
            written=tuple(written),
            replaced=tuple(replaced),
            l0_files=len(levels[0]) if levels else 0,
            level_files=tuple(len(level) for level in levels),
            journal=journal,
            gc=gc,
            manifest_id=latest.id,
            seconds=time.monotonic() - started,
        )
        log.info(
            "compactor.round",
            epoch=self.epoch,
            merges=merges,
            moves=moves,
            conflicts=conflicts,
            l0_files=report.l0_files,
            deleted=len(gc.deleted) if gc is not None else 0,
            manifest=latest.id,
            ms=round(report.seconds * 1000, 2),
        )
        return report

    def _latest(self) -> VersionedManifest:
        latest = self.manifests.latest()
        if latest is None:
            raise NotFoundError(f"no inkpen database at {self.url}")
        require_live(latest, self.url)
        self._check(latest.manifest)
        return latest

    def _check(self, manifest: Manifest) -> None:
        """Inside every commit's CAS: still this database's compactor, beside no writer that
        merges itself (else :class:`FencedError`, nothing written)."""
        check_compactor(manifest, self.epoch)
        check_writer_mode(manifest, self.epoch, self._tolerated)

    def _run_job(self, job: MergeJob[SstDescriptor]) -> tuple[SstDescriptor, ...]:
        """The job's new files (none for a move), stored and in flight until the commit: the
        merge (:func:`~inkpen.actors.kernel.compute.merge`) reads its inputs a run at a time
        (from their files on a local directory, else through this compactor's table store) and
        hands over each output to be stored as soon as it is built. A merge that fails deletes
        what it had stored."""
        if job.move:
            return ()
        outputs = _MergeOutputs(self)
        run_merge(
            self.tables,
            self.options,
            job.sources,
            job.targets,
            basement=job.basement,
            now_ms=int(self.options.clock() * 1000),
            host=outputs,
        )
        return tuple(outputs.written)

    def _commit(
        self, job: MergeJob[SstDescriptor], outputs: tuple[SstDescriptor, ...]
    ) -> VersionedManifest:
        """One CAS: the job's inputs out, its outputs in, against the latest manifest."""
        removed = [d.name for d in job.inputs]
        added = job.outputs(outputs)

        def change(current: VersionedManifest) -> Manifest:
            self._check(current.manifest)
            return replace_ssts(current.manifest, removed, job.target_level, added)

        versioned = self._commit_files(change, outputs)
        log.info(
            "compactor.merge",
            source_level=job.source_level,
            target_level=job.target_level,
            inputs=len(removed),
            written=len(outputs),
            move=job.move,
            basement=job.basement,
            manifest=versioned.id,
        )
        return versioned

    def _commit_files(
        self,
        change: Callable[[VersionedManifest], Manifest],
        written: tuple[SstDescriptor, ...] | tuple[JournalFileDescriptor, ...],
    ) -> VersionedManifest:
        """The one commit of files this compactor wrote (merges and journal compactions alike):
        one CAS of ``change`` against the latest manifest. When it is refused (another change
        replaced an input, a newer compactor or writer fenced this one, the store refused),
        ``written`` is deleted again before the error goes on; either way the files leave the
        in-flight set that keeps GC away from them."""
        try:
            return self.manifests.update(change, timeout=self.options.manifest_update_timeout)
        except (ManifestConflict, FencedError, StoreError):
            self._drop(written)
            raise
        finally:
            with self._lock:
                self._in_flight.difference_update(d.name for d in written)

    def _drop(self, outputs: tuple[SstDescriptor, ...] | tuple[JournalFileDescriptor, ...]) -> None:
        """Delete files no manifest names (a commit that did not land), in one batch; GC removes
        any left."""
        result = self._store.delete_many(d.name for d in outputs)
        for name, error in result.failed.items():
            log.warning("compactor.drop_failed", name=name, error=str(error))

    # -- the journal ---------------------------------------------------------------------------

    def _compact_journal(self, say: Progress) -> CompactionReport | None:
        """Score the journal files against the SSTs' ledger; rewrite and commit the best run."""
        latest = self._latest()
        manifest = latest.manifest
        max_sqn = manifest.ledger.persisted_sqn
        floor = manifest.feed_floor(time.time())  # keep what a feed cursor has not read
        if floor is not None:
            max_sqn = min(max_sqn, floor)
        files = [d for d in manifest.journal.files if d.min_sqn <= max_sqn]
        if not files:
            return None
        seen = (frozenset(d.name for d in files), max_sqn)
        if seen == self._scored:  # nothing changed since a round found nothing to do
            return CompactionReport()
        if manifest.head_only is not None:
            # A head-only store's journal only serves recovery: trim what the SSTs persist.
            chosen = [d for d in files if d.max_sqn <= max_sqn]
            written: tuple[JournalFileDescriptor, ...] = ()
            report = CompactionReport(
                compacted=tuple(d.name for d in chosen),
                bytes_before=sum(d.size for d in chosen),
                entries_dropped=sum(d.entry_count for d in chosen),
            )
        else:
            say(f"scoring {len(files)} journal files")
            try:
                ledger = self._ledger_view(latest)
                opened = run_bounded(self.tables.open_journal, files, limit=self._limit)
                readers = {d.name: r for d, r in zip(files, opened, strict=True)}
                report, chosen, written = self._rewrite(files, readers, ledger, max_sqn)
            except InkpenError as exc:
                log.warning("compactor.journal_failed", error=str(exc))
                return None
        if not chosen:
            self._scored = seen
            return report
        removed = [d.name for d in chosen]

        def change(current: VersionedManifest) -> Manifest:
            self._check(current.manifest)
            floor = current.manifest.feed_floor(time.time())
            if floor is not None and floor < max_sqn:
                raise ManifestConflict(
                    f"a feed cursor at SQN {floor} came below the SQN {max_sqn} this journal "
                    "compaction kept entries above; the next round compacts against it"
                )
            return replace_journal_files(current.manifest, removed, written)

        try:
            versioned = self._commit_files(change, written)
        except ManifestConflict as exc:
            log.warning("compactor.journal_conflict", error=str(exc))
            return None
        log.info(
            "compactor.journal_compaction",
            replaced=removed,
            written=[d.name for d in written],
            manifest=versioned.id,
        )
        return dataclasses.replace(report, manifest_id=versioned.id)

    def _ledger_view(self, latest: VersionedManifest) -> LedgerView:
        """The ledger as the manifest's SSTs hold it (no memory: the writer's is unknown)."""
        levels = Levels(
            tuple(
                tuple(
                    SstHandle(d, reader)
                    for d, reader in zip(
                        level,
                        run_bounded(self.tables.open_sst, level, limit=self._limit),
                        strict=True,
                    )
                )
                for level in latest.manifest.ledger.levels
            )
        )
        return LedgerView(
            manifest_id=latest.id,
            files=levels,
            persisted_sqn=latest.manifest.ledger.persisted_sqn,
        )

    def _rewrite(
        self,
        files: list[JournalFileDescriptor],
        readers: dict[str, JournalReader],
        ledger: LedgerView,
        max_sqn: int,
    ) -> tuple[CompactionReport, list[JournalFileDescriptor], tuple[JournalFileDescriptor, ...]]:
        now_ms = int(self.options.clock() * 1000)
        judgement = Judgement(
            ledger.get,
            self.options,
            max_sqn=max_sqn,
            now_ms=now_ms,
            trim_through=ledger.persisted_sqn,
        )
        rng = random.Random()
        found = judgement.scores([readers[d.name] for d in files], rng, limit=self._limit)
        scores = {d.name: score for d, score in zip(files, found, strict=True)}
        run = judgement.choose([scores[d.name] for d in files])
        if run is None:
            return CompactionReport(scores=scores), [], ()
        chosen = files[run[0] : run[0] + run[1]]
        counts = judgement.counts
        ahead: Iterable[JournalReader] = (
            (readers[d.name] for d in chosen)
            if is_local(self._store)
            else journals_ahead(self.tables, chosen)
        )
        written = self._write_journal(judgement.survivors(ahead))
        report = CompactionReport(
            scores=scores,
            compacted=tuple(d.name for d in chosen),
            written=tuple(d.name for d in written),
            bytes_before=sum(d.size for d in chosen),
            bytes_after=sum(d.size for d in written),
            entries_kept=counts["kept"],
            entries_reduced=counts["reduced"],
            entries_dropped=counts["dropped"],
        )
        return report, chosen, written

    def _write_journal(self, entries: Iterator[JournalEntry]) -> tuple[JournalFileDescriptor, ...]:
        """Entries (SQN order) as journal files of about ``journal_file_target_bytes``."""
        epoch = self._latest().manifest.writer_epoch
        target = self.options.journal_file_target_bytes
        written: list[JournalFileDescriptor] = []
        try:
            for chunk in file_chunks(entries, target):
                written.append(self.tables.write_journal(chunk, writer_epoch=epoch))
        except BaseException:
            self._drop(tuple(written))
            raise
        return tuple(written)

    def _collect(self, say: Progress) -> GcReport | None:
        self._latest()  # fenced: no pass
        min_age = max(self.options.gc_min_age, MIN_AGE_WITHOUT_WRITER)
        say(f"gc (min_age {min_age:g} s)")
        try:
            return run_gc(
                self._store,
                options=GcOptions(min_age=min_age),
                keep=self._in_flight_names,
            )
        except FencedError:
            raise
        except InkpenError as exc:
            log.warning("compactor.gc_failed", error=str(exc))
            return None

    # -- the schedule -------------------------------------------------------------------------

    def run(
        self,
        stop_event: threading.Event | None = None,
        *,
        progress: Progress | None = None,
        on_report: Callable[[CompactorReport], None] | None = None,
    ) -> None:
        """Run :meth:`run_once` every ``interval`` seconds until ``stop_event`` is set (or for
        ever). A round that fails other than by the fence is logged and tried again at the next
        tick; the fence ends the loop with :class:`FencedError`."""
        stop = stop_event or threading.Event()
        while not stop.is_set():
            try:
                report = self.run_once(progress=progress)
            except FencedError:
                raise
            except InkpenError as exc:
                log.warning("compactor.round_failed", error=str(exc))
            else:
                if on_report is not None:
                    on_report(report)
            stop.wait(self.interval)

    def close(self) -> None:
        """Stop being the compactor (the epoch stays: a new compactor claims the next one)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> Compactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Compactor({self.url!r}, epoch={self.epoch})"


def _claim(url: str, *, force: bool) -> Callable[[VersionedManifest], Manifest]:
    """The claim's CAS change: ``compactor_epoch`` + 1; refused (nothing written) beside a
    writer opened with ``compaction="internal"`` unless ``force``."""

    def change(current: VersionedManifest) -> Manifest:
        manifest = current.manifest
        if internal_writer(manifest) and not force:
            raise UsageError(
                f"the writer of {url} (writer epoch {manifest.writer_epoch}) was opened with "
                'compaction="internal": it runs its own merges and GC, and a compactor beside '
                'it would merge the same files. Reopen the writer with compaction="external". '
                "If that writer has closed or crashed, pass force=True (inkpen compactor "
                "--force); the compactor still stops once a writer opened with "
                'compaction="internal" claims the database again'
            )
        return dataclasses.replace(manifest, compactor_epoch=manifest.compactor_epoch + 1)

    return change


def _describe(job: MergeJob[Any]) -> str:
    kind = "move" if job.move else "merge"
    return (
        f"{kind} L{job.source_level} -> L{job.target_level}: {len(job.sources)} source, "
        f"{len(job.targets)} target files"
    )


def open_compactor(
    url: str | ObjectStore,
    options: Options | None = None,
    /,
    *,
    interval: float = 30.0,
    force: bool = False,
    **overrides: Any,
) -> Compactor:
    """Claim the compactor role of the database at ``url`` (bumping ``compactor_epoch``, which
    fences any earlier compactor) and answer the :class:`Compactor`.

    ``options`` and keyword overrides are :class:`~inkpen.Options` (the merge policy and its
    sizes, SST sizes, ``gc_min_age``, ``compute_workers`` — 0 by default here: the compactor is
    a process of its own). ``interval``: seconds between rounds of :meth:`Compactor.run`.
    Pair it with a writer opened with ``compaction="external"``: beside a writer whose epoch
    the manifest records as ``compaction="internal"`` (it merges and collects itself) the claim
    is refused with :class:`~inkpen.errors.UsageError`, writing nothing. Object storage cannot
    tell a live writer from one that closed or crashed: ``force=True`` says that internal
    writer is gone and claims anyway. Either way the compactor stops with
    :class:`~inkpen.errors.FencedError` at its next commit once an internal writer claims a
    newer writer epoch."""
    if not isinstance(force, bool):
        raise UsageError(f"force must be True or False, got {force!r}")
    overrides.setdefault("compute_workers", 0)
    opts = Options.build(options, **overrides)
    seconds = check_seconds("interval", interval, above_minimum=True)
    if isinstance(url, str):
        from inkpen.objectstore import open_store

        store, owns = open_store(url), True
    elif isinstance(url, ObjectStore):
        store, owns = url, False
    else:
        raise UsageError(f"url must be a store URL or an ObjectStore, got {type(url).__name__}")
    try:
        return Compactor(store, opts, owns_store=owns, interval=seconds, force=force)
    except BaseException:
        if owns:
            store.close()
        raise


class _MergeOutputs(compute.MergeHost):
    """A compactor merge's host (:class:`~inkpen.actors.kernel.compute.MergeHost`): inputs read
    and outputs stored through the compactor's table store (which records each output in flight
    before it is written)."""

    def __init__(self, compactor: Compactor) -> None:
        self.compactor = compactor
        self.written: list[SstDescriptor] = []

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        return self.compactor.tables.read_range(name, start, end, root=root)

    def emit(self, data: bytes, info: SstInfo) -> None:
        self.written.append(self.compactor.tables.write_sst(data, info))

    def restart(self) -> None:
        """Delete the outputs stored so far (no manifest names them) and forget them."""
        written, self.written = tuple(self.written), []
        compactor = self.compactor
        compactor._drop(written)
        with compactor._lock:
            compactor._in_flight.difference_update(d.name for d in written)
