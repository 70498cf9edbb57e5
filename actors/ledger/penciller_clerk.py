"""The Penciller's clerk: asks the merge policy for a job and runs it.

Whenever the ledger changes, the Penciller offers the clerk its current view
(:func:`offer_work`); the clerk asks the engine's merge policy
(:mod:`inkpen.manifest.merge_policy`, by default Leveled's: all of L0 into L1 unless a level
is fuller than L0, otherwise one file of the deepest level over its target) for at most one
:class:`MergeJob`, passing the number of jobs asked for before (the policy's grooming
alternation), and runs whatever job it chose.

A **move** job (a source file with no overlap in the level below) is answered at once: the
Penciller commits it as a manifest change alone, no bytes rewritten. Otherwise the compute pool
(:func:`inkpen.actors.kernel.compute.merge`, off the interpreter that serves reads and writes)
merges the inputs in key order (the highest SQN of a key wins) into new SST files of about
``sst_target_bytes``; the clerk is the merge's host: it reads the inputs for it a run at a time
through the table store (the worker reads an input that is a local directory's file itself),
and stores each output file through its own SST clerk (recorded in flight before it is written)
as soon as the merge hands it over, so the writer never holds a merge's inputs or outputs whole.
Tombstones and expired entries are dropped only when the job's target is the **basement** (no
level below it holds files), since above it they must keep shadowing older entries. A merge
that fails after storing some outputs stops their clerks and takes them out of the in-flight set
(GC removes them as orphans); so does a merge whose worker was lost, before it runs again in the
clerk's thread.

A merge in flight when the writer halts (closed, fenced, stopped by a store failure) is
abandoned: the host's next read or output raises :class:`MergeAbandoned`, the outputs stored so
far are dropped the same way, and the clerk answers :class:`MergeIdle`. So a close waits for no
merge: it leaves L0 as the flush left it, and the next writer's clerk merges it.

The clerk answers :class:`MergeDone` (or :class:`MergeIdle` when there is nothing to do, or when
the merge failed: then ``missing`` names an input the store no longer holds); the Penciller
applies the result to its levels (:meth:`~inkpen.manifest.levels.Levels.apply`) and commits
it in one manifest change.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import InkpenActor, handles, send, stop
from inkpen.actors.files.start import write_new_sst
from inkpen.actors.kernel import compute
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.read_ahead import ReadAheadHost
from inkpen.actors.kernel.views import LedgerView, SstHandle
from inkpen.errors import NotFoundError
from inkpen.formats.sst import SstInfo, SstShape
from inkpen.logs import get_logger
from inkpen.manifest.merge_policy import LeveledMergePolicy, MergeJob, MergePolicy
from inkpen.manifest.model import SstDescriptor
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.base import is_local
from inkpen.options import Options

log = get_logger("inkpen.penciller")


def policy_for(options: Options) -> MergePolicy:
    """The merge policy an engine with ``options`` uses: ``options.merge_policy`` when set,
    otherwise :class:`LeveledMergePolicy` with the options' level sizes."""
    if options.merge_policy is not None:
        return options.merge_policy
    return LeveledMergePolicy(
        options.l1_target_files, options.level_fanout, l0_trigger=max(1, options.max_l0_files // 2)
    )


def run_merge(
    tables: TableStore,
    options: Options,
    sources: Sequence[SstDescriptor],
    targets: Sequence[SstDescriptor],
    *,
    basement: bool,
    now_ms: int,
    host: compute.MergeHost,
) -> None:
    """One merge job through the compute pool (:func:`~inkpen.actors.kernel.compute.merge`),
    ``host`` reading its inputs and storing its outputs: the sources newest first, the targets
    put in key order; an input that is a file of a local directory is read by the worker itself
    (:meth:`TableStore.local_path`); where reads are round trips, each input's next run is
    fetched while one is merged (:class:`~inkpen.actors.kernel.read_ahead.ReadAheadHost`). A
    merge that fails has ``host`` drop what it stored (``host.restart``) before the error goes
    on. The writer's clerk and the compactor both merge through here."""

    def source(d: SstDescriptor) -> compute.SstSource:
        return d.name, d.root, d.size, d.sqn_base, tables.local_path(d.name, root=d.root)

    if not is_local(tables.store):  # each input's next run is on its way as one is merged
        host = ReadAheadHost(host, {(d.name, d.root): d.size for d in (*sources, *targets)})
    try:
        compute.merge(
            options.compute_workers,
            [source(d) for d in sources],
            [source(d) for d in sorted(targets, key=lambda d: d.first_key)],
            basement=basement,
            now_ms=now_ms,
            shape=SstShape.of(options),
            host=host,
        )
    except BaseException:
        host.restart()
        raise


class MergeAbandoned(Exception):
    """The writer halted during a merge: the merge stops at its next read or output."""


@dataclass(frozen=True, slots=True)
class _MergeWork:
    """Penciller to clerk: here is the ledger now; merge if it needs it."""

    view: LedgerView
    reply_to: pykka.ActorRef[Any]


def offer_work(clerk: pykka.ActorRef[Any], view: LedgerView, reply_to: pykka.ActorRef[Any]) -> None:
    """Tell the clerk the ledger as it is now; it merges if the policy asks for it and answers
    ``reply_to`` with :class:`MergeDone` or :class:`MergeIdle`."""
    send(clerk, _MergeWork(view, reply_to))


@dataclass(frozen=True, slots=True)
class MergeIdle:
    """Clerk to Penciller: no merge needed, or (``failed``) the merge could not be done;
    ``missing`` names input files the store no longer holds."""

    failed: bool = False
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MergeDone:
    """Clerk to Penciller: ``job`` is done; ``added`` are the files it wrote (none for a move,
    whose source itself goes down: :meth:`MergeJob.outputs`)."""

    job: MergeJob[SstHandle]
    added: tuple[SstHandle, ...]
    seconds: float = 0.0
    """How long the merge took to read, merge and write (0 for a move)."""


class PencillerClerk(InkpenActor):
    """Runs the merges its policy chooses. Answers :class:`_MergeWork`."""

    def __init__(self, ctx: EngineContext, penciller: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.ctx = ctx
        self.penciller = penciller
        self.policy: MergePolicy = policy_for(ctx.options)
        self.turn = 0

    @handles(_MergeWork)
    def _work(self, message: _MergeWork) -> None:
        job = self.policy.choose(message.view.files, turn=self.turn)
        self.turn += 1
        if job is None:
            send(message.reply_to, MergeIdle())
            return
        try:
            if job.move:
                send(message.reply_to, MergeDone(job, ()))
                return
            started = time.perf_counter()
            added = self._merge(job)
            seconds = time.perf_counter() - started
        except MergeAbandoned:
            log.info("ledger.merge_abandoned", inputs=len(job.sources) + len(job.targets))
            send(message.reply_to, MergeIdle())
            return
        except NotFoundError as exc:
            name = exc.key or str(exc)
            log.warning("ledger.merge_input_missing", name=name, error=str(exc))
            send(message.reply_to, MergeIdle(failed=True, missing=(name,)))
            return
        except Exception as exc:
            log.warning("ledger.merge_failed", error=str(exc), exc_info=exc)
            send(message.reply_to, MergeIdle(failed=True))
            return
        send(message.reply_to, MergeDone(job, added, seconds))

    def _merge(self, job: MergeJob[SstHandle]) -> tuple[SstHandle, ...]:
        """Merge the inputs in the compute pool, as its host: read them a run at a time, write
        each output via its own clerk as it comes."""
        outputs = _MergeOutputs(self.ctx, self.penciller)
        run_merge(
            self.ctx.tables,
            self.ctx.options,
            [h.descriptor for h in job.sources],
            [h.descriptor for h in job.targets],
            basement=job.basement,
            now_ms=self.ctx.now_ms(),
            host=outputs,
        )
        return tuple(outputs.written)


class _MergeOutputs(compute.MergeHost):
    """The clerk's side of a merge (:class:`~inkpen.actors.kernel.compute.MergeHost`): inputs
    read through the writer's table store, each output stored and opened by a new SST clerk."""

    def __init__(self, ctx: EngineContext, penciller: pykka.ActorRef[Any]) -> None:
        self.ctx = ctx
        self.penciller = penciller
        self.written: list[SstHandle] = []

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        self._go_on()
        return self.ctx.tables.read_range(name, start, end, root=root)

    def emit(self, data: bytes, info: SstInfo) -> None:
        self._go_on()
        self.written.append(write_new_sst(self.ctx, self.penciller, data, info))

    def _go_on(self) -> None:
        """Raise :class:`MergeAbandoned` once the writer has halted: nothing would commit it."""
        if self.ctx.throttle.error is not None:
            raise MergeAbandoned

    def restart(self) -> None:
        """Stop the clerks of the outputs stored so far; no manifest will name them (GC removes
        them as orphans once they leave the in-flight set)."""
        written, self.written = self.written, []
        for handle in written:
            stop(handle.clerk)
        self.ctx.in_flight.discard(h.name for h in written)
