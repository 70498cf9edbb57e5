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

Sharded data sets: two data sets of one shard count are compared shard by shard (shard ``i``
with shard ``i``); a data set against a database, or against a data set of another count, is
compared whole: a data set's tree is its shards' trees merged, the tree one database holding the
same objects would have (each shard read at a reader checkpoint of its own). ``--shard I``
compares shard I of each side that is a data set.
"""

from __future__ import annotations

import contextlib
from typing import Any

import click

from inkpen import shards
from inkpen.anti_entropy import Comparison, Difference, Side, compare_stores
from inkpen.errors import CorruptionError, InkpenError, UsageError

from . import render
from .data_sets import Target, shard_option, shard_urls
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


def pairs_to_compare(
    url_a: str, url_b: str, shard: int | None
) -> tuple[list[tuple[Target, Target]], bool]:
    """What ``diff URL_A URL_B`` compares (see the module docstring), and whether it is two data
    sets shard by shard."""
    urls_a, urls_b = shard_urls(url_a), shard_urls(url_b)
    if shard is not None:
        if urls_a is None and urls_b is None:
            raise UsageError(
                f"--shard {shard} picks a shard of a sharded data set, and neither {url_a} nor "
                f"{url_b} is one: leave --shard out"
            )
        return [(_pick(url_a, urls_a, shard), _pick(url_b, urls_b, shard))], False
    if urls_a is not None and urls_b is not None and len(urls_a) == len(urls_b):
        paired = [(Target(a, None), Target(b, None)) for a, b in zip(urls_a, urls_b, strict=True)]
        return paired, True
    return [(Target(url_a, urls_a), Target(url_b, urls_b))], False


def _pick(url: str, urls: list[str] | None, shard: int) -> Target:
    if urls is None:
        return Target(url, None)
    if shard >= len(urls):
        raise UsageError(
            f"{url} is a sharded data set of {len(urls)} shards: --shard takes 0 to {len(urls) - 1}"
        )
    return Target(urls[shard], None)


def _opened(stack: contextlib.ExitStack, side: Target) -> Side:
    """One side, read at a reader checkpoint of its own (every shard's, for a data set)."""
    if side.shards is not None:
        return stack.enter_context(shards.open_reader(side.url))
    return stack.enter_context(reader(side.url))


def run_diff(side_a: Target | str, side_b: Target | str, bucket: bytes | None) -> Comparison:
    """Compare two databases (or data sets, whole), each read at a reader checkpoint of its
    own, with progress.

    Errors other than damage and bad usage become exit status 2, as ``diff(1)`` reports trouble.
    """
    a = Target(side_a, None) if isinstance(side_a, str) else side_a
    b = Target(side_b, None) if isinstance(side_b, str) else side_b
    try:
        with (
            progress("diff", f"comparing {a.url} with {b.url}") as bar,
            contextlib.ExitStack() as stack,
        ):
            bar.phase(f"opening {a.url}")
            opened_a = _opened(stack, a)
            bar.phase(f"opening {b.url}")
            opened_b = _opened(stack, b)
            return compare_stores(opened_a, opened_b, bucket=bucket, phase=bar.phase)
    except CorruptionError:
        raise
    except InkpenError as error:
        raise CommandFailed(describe(error), EXIT_USAGE) from error


@click.command()
@click.argument("url_a")
@click.argument("url_b")
@click.option("--bucket", default=None, help="Compare only this bucket (text or hex:...).")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@shard_option
@click.pass_context
def diff(
    ctx: click.Context,
    url_a: str,
    url_b: str,
    bucket: str | None,
    as_json: bool,
    shard: int | None,
) -> None:
    """List the keys that differ between two databases: only-in-a, only-in-b or different.

    Compares tictac trees of the two ledgers, then the heads of only the differing segments;
    values are compared by content hash and size. Reads each database at a reader checkpoint
    of its own; never fences a live writer. Exit status: 0 same, 1 different, 2 bad usage or
    trouble, 3 damaged data. Two sharded data sets of one shard count are compared shard by
    shard, each shard with the other's shard of the same number; a data set and a database,
    or data sets of different counts, are compared whole (a data set's tree is its shards'
    trees merged); --shard I compares shard I of each side that is a data set.

    \b
    Example:
      inkpen diff ./db s3://backups/app?endpoint=http://localhost:8333
      inkpen diff ./db ./restored --bucket users --json
    """
    chosen = None if bucket is None else render.parse_name(bucket, "--bucket")
    pairs, paired = pairs_to_compare(url_a, url_b, shard)
    if paired:
        compared = [(a.url, b.url, run_diff(a, b, chosen)) for a, b in pairs]
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
    ((side_a, side_b),) = pairs
    found = run_diff(side_a, side_b, chosen)
    if as_json:
        render.echo_json(report(side_a.url, side_b.url, chosen, found))
    else:
        for d in found.differences:
            click.echo(f"{d.kind}\t{render.text(d.bucket)}\t{key_text(d)}")
    if not found.same:
        ctx.exit(EXIT_DIFFERENT)
