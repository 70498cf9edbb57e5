"""``inkpen gc``: one garbage-collection pass over a database, through the manifest layer.

It never opens a writer, so a live writer keeps running. What it may delete is decided by the
rules of :mod:`inkpen.manifest.gc`: superseded manifests no checkpoint pins, rolled segments,
and journal files and SSTs no active manifest names, each older than ``--min-age``. That age is
what protects files a live writer has written but not yet committed (a slow merge, a bulk load):
keep it above the longest such time. Below one minute it is refused unless ``--offline`` says no
writer has the database open. Expired checkpoints are dropped from the manifest first.
"""

from __future__ import annotations

from typing import Any

import click

from inkpen.manifest.gc import GcOptions, GcReport, run_gc

from . import render
from .data_sets import each_shard, shard_urls
from .durations import Duration
from .failures import CommandFailed
from .progress import progress
from .targets import database


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


def _require_all_deleted(reports: list[GcReport]) -> None:
    """Exit 1 when a pass could not delete some of what it planned (run it again)."""
    failed = sorted(key for report in reports for key in report.failed)
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
def gc(
    url: str, dry_run: bool, min_age: float, destroy_grace: float, offline: bool, as_json: bool
) -> None:
    """Delete what the database at URL no longer needs (see --dry-run first).

    Never fences a live writer. --min-age must exceed the longest time a writer takes between
    writing a file and committing it; the default of 5 minutes suits inkpen's own writers, and
    below 1 minute it is refused unless --offline vouches that no writer has the database open.
    Given a sharded data set, collects every shard (several at once).

    \b
    Example:
      inkpen gc ./.inkpen-demo/db --dry-run
      inkpen gc ./.inkpen-demo/db --min-age 1h
    """
    options = GcOptions(min_age=min_age, destroy_grace=destroy_grace, offline=offline)
    urls = shard_urls(url)
    if urls is not None:

        def collect(shard: str) -> GcReport:
            with database(shard, live=False) as manifests:
                return run_gc(manifests.store, options=options, dry_run=dry_run)

        reports = each_shard("gc", url, urls, collect)
        if as_json:
            render.echo_json({"url": url, "shards": [report_document(r) for r in reports]})
            _require_all_deleted(reports)
            return
        for index, found in enumerate(reports):
            if dry_run:
                click.echo(f"shard {index}: would delete {len(found.plan.deletes)} objects")
            else:
                click.echo(
                    f"shard {index}: deleted {len(found.deleted)} objects, "
                    f"{render.size(found.bytes_deleted)}"
                )
        _require_all_deleted(reports)
        return
    with database(url, live=False) as manifests, progress("gc", f"collecting {url}"):
        report = run_gc(manifests.store, options=options, dry_run=dry_run)
    document = report_document(report)
    if as_json:
        render.echo_json(document)
        _require_all_deleted([report])
        return
    counts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in document["counts"].items())
    if dry_run:
        click.echo(f"would delete {len(report.plan.deletes)} objects ({counts})")
        for item in document["planned"]:
            click.echo(f"  {item['key']}: {item['reason']}")
        if report.plan.expired_checkpoints:
            click.echo(
                f"would drop expired checkpoints {', '.join(report.plan.expired_checkpoints)}"
            )
        return
    click.echo(
        f"deleted {len(report.deleted)} objects, {render.size(report.bytes_deleted)} ({counts})"
    )
    if report.dropped_checkpoints:
        click.echo(f"dropped expired checkpoints {', '.join(report.dropped_checkpoints)}")
    if report.destroyed and not report.failed:
        click.echo("the database was destroyed and is now removed")
    if report.detached:
        click.echo("the clone no longer needs its parent and was detached from it")
    _require_all_deleted([report])
