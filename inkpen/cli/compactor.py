"""``inkpen compactor``: the compactor role of a database, as a process of its own.

It claims the compactor epoch (fencing any earlier compactor; never a writer) and runs rounds
of ledger merges and a GC pass (:mod:`inkpen.actors.engine.compactor`): once with ``--once``,
else every ``--interval`` until interrupted (SIGINT or SIGTERM end it after the current round).
Each round prints a one-line report (or JSON). Pair it with a writer opened with
``compaction="external"``; beside a writer the manifest records as ``compaction="internal"``
the claim is refused unless ``--force`` says that writer is gone. Given a sharded data set, it
claims the compactor role of every shard (or of shard ``--shard I``) and runs their rounds side
by side, one thread per shard, each report prefixed with its shard.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

import click

from inkpen.actors.engine.compactor import CompactorReport, open_compactor

from . import render
from .data_sets import shard_option, target
from .durations import Duration
from .progress import Tracker, progress
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
@shard_option
def compactor(
    url: str, once: bool, interval: float, as_json: bool, force: bool, shard: int | None
) -> None:
    """Run merges and GC for the database at URL in this process.

    Claims the compactor epoch: an older compactor is fenced at its next commit; writers are
    never fenced. The writer must be opened with compaction="external": beside a writer
    opened with compaction="internal" the claim is refused (--force once that writer is gone).

    Given a sharded data set, claims every shard's compactor role (or shard I's, --shard I)
    and runs each shard's rounds beside the others; each report line begins with its shard.

    \b
    Example:
      inkpen compactor ./.inkpen-demo/db --once
      inkpen compactor s3://bucket/db --interval 1m
    """
    chosen = target(url, shard)
    urls = [chosen.url] if chosen.shards is None else chosen.shards
    for each in urls:
        with database(each, live=True):
            pass  # a clear error for a missing, destroyed or foreign database
    stop = threading.Event()
    lock = threading.Lock()

    def show(index: int | None, report: CompactorReport) -> None:
        with lock:
            if as_json:
                document = report_document(report)
                render.echo_json(document if index is None else {"shard": index, **document})
            else:
                prefix = "" if index is None else f"shard {index}: "
                click.echo(prefix + report.summary())

    def phase(tracker: Tracker, index: int | None) -> Any:
        return tracker.phase if index is None else lambda step: tracker.phase(f"{index}: {step}")

    every = interval if interval > 0 else 30.0
    labels: list[int | None] = [None] if chosen.shards is None else list(range(len(urls)))
    with contextlib.ExitStack() as stack:
        roles = [
            stack.enter_context(open_compactor(each, interval=every, force=force)) for each in urls
        ]
        if not as_json:
            for index, role in zip(labels, roles, strict=True):
                where = chosen.url if index is None else f"shard {index} of {url}"
                click.echo(f"compactor epoch {role.epoch} claimed for {where}")
        if once:
            with progress("compactor", f"compacting {url}") as tracker:
                for index, role in zip(labels, roles, strict=True):
                    show(index, role.run_once(progress=phase(tracker, index)))
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        with progress("compactor", f"compacting {url} every {interval:g} s") as tracker:
            if len(roles) == 1:
                roles[0].run(
                    stop, progress=phase(tracker, labels[0]), on_report=lambda r: show(labels[0], r)
                )
                return
            threads = [
                threading.Thread(
                    target=role.run,
                    args=(stop,),
                    kwargs={
                        "progress": phase(tracker, index),
                        "on_report": lambda r, i=index: show(i, r),
                    },
                    name=f"inkpen-compactor-{index}",
                )
                for index, role in zip(labels, roles, strict=True)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
