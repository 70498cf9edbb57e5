"""``inkpen gc``: one garbage-collection pass over a database, through the manifest layer.

It never opens a writer, so a live writer keeps running. What it may delete is decided by the
rules of :mod:`inkpen.manifest.gc`: superseded manifests no checkpoint pins, rolled segments,
and journal files and SSTs no active manifest names, each older than ``--min-age``. That age is
what protects files a live writer has written but not yet committed (a slow merge, a bulk load):
keep it above the longest such time. Below one minute it is refused unless ``--offline`` says no
writer has the database open. Expired checkpoints are dropped from the manifest first.

Given a sharded data set it collects every shard (several at once), or shard ``--shard I``; once
every shard of a destroyed data set is removed, it removes the data set's descriptor too.
"""

from __future__ import annotations

from typing import Any

import click

from inkpen.manifest.gc import GcOptions, GcReport, run_gc
from inkpen.operations import remove_descriptor

from . import render
from .data_sets import each_shard, shard_option, target
from .durations import Duration
from .failures import CommandFailed
from .progress import progress
from .targets import database, holds_nothing


def report_document(report: GcReport) -> dict[str, Any]:
    """A GC report as a JSON-friendly dict."""
    return {
        "url": report.url,
        "dry_run": report.dry_run,
        "counts": report.counts(),
        "deleted": list(report.deleted),
        "planned": [{"key": k, "reason": report.plan.reasons.get(k)} for k in report.plan.deletes],
        "bytes_deleted": report.bytes_deleted,
        "dropped_checkpoints": list(report.dropped_checkpoints),
        "expired_checkpoints": list(report.plan.expired_checkpoints),
        "destroyed": report.destroyed,
        "detached": report.detached,
        "failed": dict(report.failed),
    }


def _require_all_deleted(reports: list[GcReport | None]) -> None:
    """Exit 1 when a pass could not delete some of what it planned (run it again)."""
    failed = sorted(key for report in reports if report is not None for key in report.failed)
    if failed:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        raise CommandFailed(
            f"{len(failed)} object(s) could not be deleted ({shown}); the store refused or did "
            "not answer: run inkpen gc again"
        )


@click.command()
@click.argument("url")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; change nothing.")
@click.option(
    "--min-age",
    type=Duration(),
    default="5m",
    show_default=True,
    help="Never delete an object younger than this.",
)
@click.option(
    "--destroy-grace",
    type=Duration(),
    default="1h",
    show_default=True,
    help="After a soft destroy, wait this long before removing the database.",
)
@click.option(
    "--offline",
    is_flag=True,
    help="No writer has the database open: allow a --min-age below 1m.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@shard_option
def gc(
    url: str,
    dry_run: bool,
    min_age: float,
    destroy_grace: float,
    offline: bool,
    as_json: bool,
    shard: int | None,
) -> None:
    """Delete what the database at URL no longer needs (see --dry-run first).

    Never fences a live writer. --min-age must exceed the longest time a writer takes between
    writing a file and committing it; the default of 5 minutes suits inkpen's own writers, and
    below 1 minute it is refused unless --offline vouches that no writer has the database open.
    Given a sharded data set, collects every shard (several at once; --dry-run lists each
    shard's objects), or only shard I with --shard I.

    \b
    Example:
      inkpen gc ./.inkpen-demo/db --dry-run
      inkpen gc ./.inkpen-demo/db --min-age 1h
    """
    options = GcOptions(min_age=min_age, destroy_grace=destroy_grace, offline=offline)
    chosen = target(url, shard)
    if chosen.shards is not None:

        def collect(shard_url: str) -> GcReport | None:
            if holds_nothing(shard_url):
                return None  # removed already: a destroyed data set's shard GC has finished
            with database(shard_url, live=False) as manifests:
                return run_gc(manifests.store, options=options, dry_run=dry_run)

        reports = each_shard("gc", url, chosen.shards, collect)
        removed = (
            not dry_run
            and all(r is None or r.destroyed for r in reports)
            and remove_descriptor(url)
        )
        if as_json:
            documents = [None if r is None else report_document(r) for r in reports]
            render.echo_json({"url": url, "shards": documents, "data_set_removed": removed})
            _require_all_deleted(reports)
            return
        for index, found in enumerate(reports):
            if found is None:
                click.echo(f"shard {index}: removed already")
            else:
                click.echo("\n".join(_lines(found, prefix=f"shard {index}: ", indent="  ")))
        if removed:
            click.echo(f"the destroyed data set {url} is removed: every shard and its descriptor")
        _require_all_deleted(reports)
        return
    with database(chosen.url, live=False) as manifests, progress("gc", f"collecting {url}"):
        report = run_gc(manifests.store, options=options, dry_run=dry_run)
    if as_json:
        render.echo_json(report_document(report))
        _require_all_deleted([report])
        return
    click.echo("\n".join(_lines(report)))
    _require_all_deleted([report])


def _lines(report: GcReport, *, prefix: str = "", indent: str = "") -> list[str]:
    """What one GC pass did (or, in a dry run, would do): each object it would delete and why."""
    document = report_document(report)
    counts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in document["counts"].items())
    if report.dry_run:
        lines = [f"{prefix}would delete {len(report.plan.deletes)} objects ({counts})"]
        lines.extend(f"{indent}  {item['key']}: {item['reason']}" for item in document["planned"])
        if report.plan.expired_checkpoints:
            lines.append(
                f"{indent}would drop expired checkpoints "
                f"{', '.join(report.plan.expired_checkpoints)}"
            )
        return lines
    lines = [
        f"{prefix}deleted {len(report.deleted)} objects, {render.size(report.bytes_deleted)} "
        f"({counts})"
    ]
    if report.dropped_checkpoints:
        lines.append(f"{indent}dropped expired checkpoints {', '.join(report.dropped_checkpoints)}")
    if report.destroyed and not report.failed:
        lines.append(f"{indent}the database was destroyed and is now removed")
    if report.detached:
        lines.append(f"{indent}the clone no longer needs its parent and was detached from it")
    return lines
