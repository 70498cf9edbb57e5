"""``inkpen diff URL_A URL_B``: what differs between two databases, found by tictac trees.

Each database is read through a Reader at a reader checkpoint of its own (refreshed while the
command runs, deleted after), so neither side's writer is fenced and both states stay pinned. The
comparison is :func:`inkpen.anti_entropy.compare_stores`: trees first, then the heads of the
differing segments only. Each differing key prints as ``only-in-a``, ``only-in-b`` or
``different``, followed by its bucket and key (text, or ``hex:``; a head-only object's key is
followed by ``#`` and its subkey), tab-separated; ``--json``
prints one document instead.

Exit status as ``diff(1)``: 0 the databases hold the same objects, 1 they differ, 2 bad usage or
trouble (a database missing, a store unreachable), 3 damaged data on either side.
"""

from __future__ import annotations

import contextlib
from typing import Any

import click

from inkpen.anti_entropy import Comparison, Difference, compare_stores
from inkpen.errors import CorruptionError, InkpenError

from . import render
from .data_sets import paired_shards
from .failures import EXIT_USAGE, CommandFailed, describe
from .progress import progress
from .targets import reader

EXIT_DIFFERENT = 1


def report(url_a: str, url_b: str, bucket: bytes | None, found: Comparison) -> dict[str, Any]:
    """The JSON document of one comparison."""
    return {
        "a": url_a,
        "b": url_b,
        "bucket": None if bucket is None else render.text(bucket),
        "same": found.same,
        "differing_segments": len(found.differing_segments),
        "heads_read": found.heads_read,
        "differences": [
            {
                "kind": d.kind,
                "bucket": render.text(d.bucket),
                "key": render.text(d.key),
                "subkey": render.text(d.subkey),
                "a": None if d.a is None else _head(d.a),
                "b": None if d.b is None else _head(d.b),
            }
            for d in found.differences
        ],
    }


def key_text(d: Difference) -> str:
    """A differing key as text; a head-only object's subkey follows a ``#``."""
    key = render.text(d.key)
    return f"{key}#{render.text(d.subkey)}" if d.subkey else key


def _head(head: Any) -> dict[str, Any]:
    return {"size": head.size, "content_hash": f"{head.content_hash:016x}", "sqn": head.sqn}


def run_diff(url_a: str, url_b: str, bucket: bytes | None) -> Comparison:
    """Compare the databases at two URLs, each at a reader checkpoint of its own, with progress.

    Errors other than damage and bad usage become exit status 2, as ``diff(1)`` reports trouble.
    """
    try:
        with (
            progress("diff", f"comparing {url_a} with {url_b}") as bar,
            contextlib.ExitStack() as stack,
        ):
            bar.phase(f"opening {url_a}")
            side_a = stack.enter_context(reader(url_a))
            bar.phase(f"opening {url_b}")
            side_b = stack.enter_context(reader(url_b))
            return compare_stores(side_a, side_b, bucket=bucket, phase=bar.phase)
    except CorruptionError:
        raise
    except InkpenError as error:
        raise CommandFailed(describe(error), EXIT_USAGE) from error


@click.command()
@click.argument("url_a")
@click.argument("url_b")
@click.option("--bucket", default=None, help="Compare only this bucket (text or hex:...).")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@click.pass_context
def diff(ctx: click.Context, url_a: str, url_b: str, bucket: str | None, as_json: bool) -> None:
    """List the keys that differ between two databases: only-in-a, only-in-b or different.

    Compares tictac trees of the two ledgers, then the heads of only the differing segments;
    values are compared by content hash and size. Reads each database at a reader checkpoint
    of its own; never fences a live writer. Exit status: 0 same, 1 different, 2 bad usage or
    trouble, 3 damaged data. Two sharded data sets (of one shard count) are compared shard by
    shard, each shard with the other's shard of the same number.

    \b
    Example:
      inkpen diff ./db s3://backups/app?endpoint=http://localhost:8333
      inkpen diff ./db ./restored --bucket users --json
    """
    chosen = None if bucket is None else render.parse_name(bucket, "--bucket")
    pairs = paired_shards(url_a, url_b)
    if pairs is not None:
        compared = [(a, b, run_diff(a, b, chosen)) for a, b in pairs]
        if as_json:
            render.echo_json(
                {
                    "a": url_a,
                    "b": url_b,
                    "bucket": None if chosen is None else render.text(chosen),
                    "same": all(found.same for _a, _b, found in compared),
                    "shards": [report(a, b, chosen, found) for a, b, found in compared],
                }
            )
        else:
            for _a, _b, found in compared:
                for d in found.differences:
                    click.echo(f"{d.kind}\t{render.text(d.bucket)}\t{key_text(d)}")
        if not all(found.same for _a, _b, found in compared):
            ctx.exit(EXIT_DIFFERENT)
        return
    found = run_diff(url_a, url_b, chosen)
    if as_json:
        render.echo_json(report(url_a, url_b, chosen, found))
    else:
        for d in found.differences:
            click.echo(f"{d.kind}\t{render.text(d.bucket)}\t{key_text(d)}")
    if not found.same:
        ctx.exit(EXIT_DIFFERENT)
