"""The garbage collector actor: the writer's own GC runs, at start-up and then on a schedule.

Files a manifest change drops are normally deleted by their clerks (delete_pending); GC removes
what no clerk owns: journal segments once rolled, manifests no live checkpoint names, and the
orphans a crash leaves (files written but never committed). It runs the manifest layer's planner
(:func:`inkpen.manifest.gc.run_gc`), never touching an object younger than ``gc_min_age`` nor one
this writer is still writing (:mod:`inkpen.actors.kernel.in_flight`). Open snapshots are safe
because the writer checkpoint points at the oldest manifest they read.

It runs once when the Bookie opens, then every ``gc_interval`` — but only if the manifest changed
since the last run, so an idle Bookie makes no requests for GC — and sooner (within
:data:`ROLLED_CHECK` seconds) when the journal rolled segments since its last pass: rolled
segments no live checkpoint pins are deleted at any age (``GcOptions.rolled_segment_min_age``),
so the store does not hold every write twice for ``gc_min_age``. The Bookie's close runs a last
pass after its final roll (:func:`collect`). A fenced writer never collects:
the newer writer owns the database. A writer fenced without knowing it yet learns it here: every
pass gives ``run_gc`` the writer's epoch, which must still be the manifest's when the pass reads
it and before each batch of deletes (a newer writer's files in flight would look like orphans);
otherwise the pass raises ``FencedError`` and the writer is fenced.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass

import pykka

from inkpen.actors.base import ActorGone, InkpenActor, handles, send
from inkpen.actors.kernel.context import EngineContext
from inkpen.errors import FencedError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.gc import GcOptions, GcReport, run_gc

log = get_logger("inkpen.gc")

ROLLED_CHECK = 10.0
"""Seconds between two looks at whether the journal rolled segments since the last GC pass."""


@dataclass(frozen=True, slots=True)
class _RunGc:
    """Run a GC pass now; the report (or the error) goes to ``result``."""

    result: Future[GcReport]
    min_age: float | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


class GarbageCollector(InkpenActor):
    """Owns the writer's GC schedule; :func:`request_gc` asks it for a pass now."""

    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx
        self._seen_commits = -1
        self._seen_rolled = -1
        self._last_pass = 0.0
        self.runs = 0

    def on_start(self) -> None:
        if self.ctx.options.compaction == "external":
            return  # a compactor process collects; its GC keeps what this writer pins
        self.ctx.scheduler.after(0.0, self.actor_ref, _Tick())

    @handles(_Tick)
    def _tick(self, _: _Tick) -> None:
        options = self.ctx.options
        try:
            keeper = self.ctx.keeper
            due = time.monotonic() - self._last_pass >= options.gc_interval
            rolled = keeper.latest.manifest.journal.last_rolled_segment != self._seen_rolled
            if keeper.commits != self._seen_commits and (due or rolled):
                self._collect(options.gc_min_age, dry_run=False)
        except Exception as exc:
            log.warning("gc.failed", error=str(exc))
        finally:
            wait = min(options.gc_interval, ROLLED_CHECK)
            self.ctx.scheduler.after(wait, self.actor_ref, _Tick())

    @handles(_RunGc)
    def _run(self, message: _RunGc) -> None:
        if self.ctx.options.compaction == "external":
            message.result.set_exception(_external("GC"))
            return
        try:
            min_age = self.ctx.options.gc_min_age if message.min_age is None else message.min_age
            message.result.set_result(self._collect(min_age, dry_run=message.dry_run))
        except Exception as exc:
            message.result.set_exception(exc)

    def _collect(self, min_age: float, *, dry_run: bool) -> GcReport:
        keeper = self.ctx.keeper
        commits = keeper.commits
        rolled = keeper.latest.manifest.journal.last_rolled_segment
        report = collect(self.ctx, min_age, dry_run=dry_run)
        if not dry_run:
            self._seen_commits = commits
            self._seen_rolled = rolled
            self._last_pass = time.monotonic()
        self.runs += 1
        return report


def collect(ctx: EngineContext, min_age: float, *, dry_run: bool = False) -> GcReport:
    """One GC pass of the writer ``ctx`` belongs to: objects older than ``min_age``, rolled
    segments at any age, never what the writer has in flight; a pass that finds a newer writer
    fences this one and raises :class:`FencedError`."""
    keeper = ctx.keeper
    if keeper.fenced is not None:
        raise keeper.fenced
    try:
        report = run_gc(
            ctx.store,
            options=GcOptions(min_age=min_age, rolled_segment_min_age=0.0),
            dry_run=dry_run,
            keep=ctx.in_flight.names,  # asked between listing and reading (run_gc)
            writer_epoch=keeper.epoch,
        )
    except FencedError as exc:
        keeper.fence(exc)
        raise
    if not dry_run:
        meter = ctx.meter
        meter.gc_runs += 1
        meter.gc_deletions += len(report.deleted)
        meter.gc_bytes_deleted += report.bytes_deleted
    return report


def _external(what: str) -> UsageError:
    return UsageError(
        f"this Bookie was opened with compaction='external': {what} is the compactor's "
        "(inkpen.open_compactor, or `inkpen compactor URL`); a writer's own pass here could "
        "delete the files a compactor has in flight"
    )


def request_gc(
    collector: pykka.ActorRef[GarbageCollector], *, min_age: float | None, dry_run: bool
) -> Future[GcReport]:
    """Ask for a GC pass now (``min_age`` None: the ``gc_min_age`` option); its report, or its
    error, comes through the future. Raises :class:`ActorGone` if the collector has stopped."""
    result: Future[GcReport] = Future()
    if not send(collector, _RunGc(result, min_age, dry_run)):
        raise ActorGone("the garbage collector has stopped")
    return result
