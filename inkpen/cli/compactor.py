"""``inkpen compactor``: the compactor role of a database, as a process of its own.

It claims the compactor epoch (fencing any earlier compactor; never a writer) and runs rounds
of ledger merges and a GC pass (:mod:`inkpen.actors.engine.compactor`): once with ``--once``,
else every ``--interval`` until interrupted (SIGINT or SIGTERM end it after the current round).
Each round prints a one-line report (or JSON). Pair it with a writer opened with
``compaction="external"``; beside a writer the manifest records as ``compaction="internal"``
the claim is refused unless ``--force`` says that writer is gone.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import click

from inkpen.actors.engine.compactor import CompactorReport, open_compactor

from . import render
from .durations import Duration
from .progress import progress
from .targets import database


def report_document(report: CompactorReport) -> dict[str, Any]:
    """A round's report as a JSON-friendly dict."""
    return {
        "epoch": report.epoch,
        "merges": report.merges,
        "moves": report.moves,
        "conflicts": report.conflicts,
        "written": list(report.written),
        "replaced": list(report.replaced),
        "l0_files": report.l0_files,
        "level_files": list(report.level_files),
        "gc_deleted": len(report.gc.deleted) if report.gc is not None else None,
        "manifest_id": report.manifest_id,
        "seconds": round(report.seconds, 3),
    }


@click.command()
@click.argument("url")
@click.option("--once", is_flag=True, help="Run one round, print its report and exit.")
@click.option(
    "--interval",
    type=Duration(),
    default="30s",
    show_default=True,
    help="Time between rounds when running on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print each round's report as JSON.")
@click.option(
    "--force",
    is_flag=True,
    help='Claim even though the last writer was opened with compaction="internal": say so only '
    "when that writer has closed or crashed.",
)
def compactor(url: str, once: bool, interval: float, as_json: bool, force: bool) -> None:
    """Run merges and GC for the database at URL in this process.

    Claims the compactor epoch: an older compactor is fenced at its next commit; writers are
    never fenced. The writer must be opened with compaction="external": beside a writer
    opened with compaction="internal" the claim is refused (--force once that writer is gone).

    \b
    Example:
      inkpen compactor ./.inkpen-demo/db --once
      inkpen compactor s3://bucket/db --interval 1m
    """
    with database(url, live=True):
        pass  # a clear error for a missing, destroyed or foreign database
    stop = threading.Event()

    def show(report: CompactorReport) -> None:
        if as_json:
            render.echo_json(report_document(report))
        else:
            click.echo(report.summary())

    with open_compactor(url, interval=interval if interval > 0 else 30.0, force=force) as role:
        if not as_json:
            click.echo(f"compactor epoch {role.epoch} claimed for {url}")
        if once:
            with progress("compactor", f"compacting {url}") as tracker:
                report = role.run_once(progress=tracker.phase)
            show(report)
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        with progress("compactor", f"compacting {url} every {interval:g} s") as tracker:
            role.run(stop, progress=tracker.phase, on_report=show)
