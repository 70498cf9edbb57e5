"""``inkpen compact``: run ledger merges and a journal compaction now.

Opens the database as its writer (a Bookie), so any Bookie open on it in another process is
fenced. Steps: persist what recovery replayed into memory (``flush``), merge the ledger until L0
is empty and no level is over its target (``compact_ledger``), run one journal compaction
(``compact_journal``, Leveled's ``book_compactjournal``), then close cleanly. A sharded data
set's shards are compacted so one after the other (each shard's writer fenced in turn), or only
shard ``--shard I``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from inkpen import Stats

from . import render
from .data_sets import one_by_one, shard_option, target
from .progress import progress
from .targets import writer

STEPS = ("opening (recovery)", "persisting memory", "merging the ledger", "compacting the journal")


def _shape(stats: Stats) -> dict[str, Any]:
    return {
        "memory_entries": stats["ledger_mem_entries"] + stats["ledger_cache_entries"],
        "l0_files": stats["l0_files"],
        "level_files": stats["level_files"],
        "level_bytes": stats["level_bytes"],
        "ledger_bytes": stats["ledger_bytes"],
        "journal_files": stats["journal_files"],
        "journal_bytes": stats["journal_bytes"],
    }


def _compact(url: str) -> dict[str, Any]:
    with progress("compact", STEPS[0], total=len(STEPS)) as bar, writer(url) as book:

        def begin(step: int) -> None:
            bar.update(step)
            bar.phase(STEPS[step])

        before = _shape(book.stats())
        begin(1)
        book.flush()
        begin(2)
        book.compact_ledger()
        begin(3)
        report = book.compact_journal()
        bar.update(len(STEPS))
        after = _shape(book.stats())
    return {"url": url, "before": before, "after": after, "journal_compaction": asdict(report)}


def _lines(result: dict[str, Any]) -> list[str]:
    before, after, report = result["before"], result["after"], result["journal_compaction"]
    lines = [
        f"ledger   {before['memory_entries']:,} -> {after['memory_entries']:,} entries in memory,"
        f" L0 {before['l0_files']} -> {after['l0_files']} files, levels from L0 "
        f"{before['level_files']} -> {after['level_files']} files, "
        f"{render.size(before['ledger_bytes'])} -> {render.size(after['ledger_bytes'])}"
    ]
    if report["compacted"]:
        lines.append(
            f"journal  {len(report['compacted'])} files rewritten as {len(report['written'])}, "
            f"{render.size(report['bytes_before'])} -> {render.size(report['bytes_after'])}; "
            f"entries kept {report['entries_kept']:,}, reduced {report['entries_reduced']:,}, "
            f"dropped {report['entries_dropped']:,}"
        )
    else:
        lines.append(
            f"journal  {after['journal_files']} files, {render.size(after['journal_bytes'])}: "
            "no run of files was worth rewriting"
        )
    return lines


@click.command()
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@shard_option
def compact(url: str, as_json: bool, shard: int | None) -> None:
    """Merge the ledger and compact the journal of the database at URL, now.

    Opens URL as its writer: a Bookie still open on it in another process is FENCED (its next
    write fails with FencedError). A running application compacts on its own schedule
    (compaction_interval) or with book.compact_journal() and book.compact_ledger().

    Given a sharded data set, compacts every shard in turn (fencing each shard's writer), or
    only shard I with --shard I.

    \b
    Example:
      inkpen compact ./.inkpen-demo/db
    """
    chosen = target(url, shard)
    if chosen.shards is not None:
        results = one_by_one(chosen.shards, _compact)
        if as_json:
            render.echo_json({"url": url, "shards": results})
            return
        click.echo(f"compacted the {len(results)} shards of {url}")
        for index, result in enumerate(results):
            click.echo("\n".join([f"shard {index}:", *(f"  {line}" for line in _lines(result))]))
        return
    result = _compact(chosen.url)
    if as_json:
        del result["url"]
        render.echo_json(result)
        return
    click.echo(f"compacted {chosen.url}")
    click.echo("\n".join(_lines(result)))
