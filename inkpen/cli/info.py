"""``inkpen info``: a database at a glance, from its latest manifest and its journal listing.

Reads only (the manifest layer): it never bumps the writer epoch, so a live writer is not fenced,
and it writes nothing at all.
"""

from __future__ import annotations

import time
from typing import Any

import click

from inkpen import shards
from inkpen.formats.journal import EMPTY_JOURNAL_SIZE
from inkpen.manifest.fencing import judge_tail, scan_segments
from inkpen.manifest.model import Checkpoint, Manifest
from inkpen.manifest.store import ManifestStore

from . import render
from .data_sets import each_shard, shard_option, target
from .targets import database, latest_manifest


def checkpoint_summary(checkpoint: Checkpoint, now: float) -> dict[str, Any]:
    """One checkpoint as a JSON-friendly dict."""
    return {
        "id": checkpoint.id,
        "kind": checkpoint.kind,
        "name": checkpoint.name,
        "manifest_id": checkpoint.manifest_id,
        "create_time": checkpoint.create_time,
        "expire_time": checkpoint.expire_time,
        "live": checkpoint.is_live(now),
        "metadata": dict(checkpoint.metadata),
    }


def checkpoint_rows(checkpoints: list[dict[str, Any]], now: float) -> list[str]:
    """Checkpoint summaries as an aligned table (no lines for none)."""
    if not checkpoints:
        return []
    rows = [["id", "kind", "name", "pins manifest", "created", "expires"]]
    for cp in checkpoints:
        rows.append(
            [
                cp["id"],
                cp["kind"] or "-",
                cp["name"] or "-",
                str(cp["manifest_id"]),
                render.timestamp(cp["create_time"]),
                render.expiry(cp["expire_time"], now),
            ]
        )
    return render.table(rows)


def describe(manifests: ManifestStore, manifest_id: int, manifest: Manifest) -> dict[str, Any]:
    """What ``info`` reports about a database, as a JSON-friendly dict."""
    now = time.time()
    journal, ledger = manifest.journal, manifest.ledger
    scan = judge_tail(  # a torn tail (writes in flight, or cut off by a crash) is not damage
        manifests.store,
        scan_segments(
            manifests.store, journal.last_rolled_segment, next_segment=journal.next_segment
        ),
    )
    segments = scan.refs
    files = journal.files
    levels = [
        {
            "level": depth,
            "files": len(level),
            "bytes": sum(s.size for s in level),
            "entries": sum(s.entry_count for s in level),
            "tombstones": sum(s.tombstone_count for s in level),
        }
        for depth, level in enumerate(ledger.levels)
    ]
    return {
        "url": manifests.url,
        "manifest_id": manifest_id,
        "format_version": manifest.format_version,
        "writer_epoch": manifest.writer_epoch,
        "compactor_epoch": manifest.compactor_epoch,
        "initialized": manifest.initialized,
        "destroyed_at": manifest.destroyed_at,
        "parent": None if manifest.parent is None else manifest.parent.to_document(),
        "journal": {
            "files": len(files),
            "bytes": sum(f.size for f in files),
            "entries": sum(f.entry_count for f in files),
            "min_sqn": files[0].min_sqn if files else None,
            "max_sqn": files[-1].max_sqn if files else None,
            "last_rolled_segment": journal.last_rolled_segment,
            "segments": len(segments),
            "segment_bytes": sum(s.size for s in segments),
            "fence_segments": sum(1 for s in segments if s.size == EMPTY_JOURNAL_SIZE),
            "first_segment": segments[0].id if segments else None,
            "last_segment": segments[-1].id if segments else None,
            "missing_segments": list(scan.missing),
        },
        "ledger": {
            "persisted_sqn": ledger.persisted_sqn,
            "files": sum(level["files"] for level in levels),
            "bytes": sum(level["bytes"] for level in levels),
            "entries": sum(level["entries"] for level in levels),
            "levels": levels,
        },
        "checkpoints": [checkpoint_summary(cp, now) for cp in manifest.checkpoints],
    }


def _text_lines(found: dict[str, Any]) -> list[str]:
    now = time.time()
    journal, ledger = found["journal"], found["ledger"]
    lines = [
        f"database      {found['url']}",
        f"manifest      {found['manifest_id']} (format {found['format_version']})",
        f"epochs        writer {found['writer_epoch']}, compactor {found['compactor_epoch']}",
    ]
    if found["destroyed_at"] is not None:
        lines.append(f"destroyed     at {render.timestamp(found['destroyed_at'])}")
    if found["parent"] is not None:
        parent = found["parent"]
        lines.append(f"clone of      {parent['root']} (checkpoint {parent['checkpoint_id']})")
    sqns = (
        f", SQN {journal['min_sqn']}-{journal['max_sqn']}" if journal["min_sqn"] is not None else ""
    )
    lines.append(
        f"journal       {journal['files']} files, {render.size(journal['bytes'])}, "
        f"{journal['entries']:,} entries{sqns}"
    )
    if journal["segments"]:
        lines.append(
            f"segments      {journal['segments']} after segment {journal['last_rolled_segment']}"
            f" ({journal['first_segment']}-{journal['last_segment']}), "
            f"{render.size(journal['segment_bytes'])}, {journal['fence_segments']} fence(s)"
        )
    else:
        lines.append(f"segments      none after segment {journal['last_rolled_segment']}")
    if journal["missing_segments"]:
        shown = ", ".join(str(i) for i in journal["missing_segments"][:5])
        lines.append(
            f"MISSING       {len(journal['missing_segments'])} segment(s): {shown} "
            "(damage: run inkpen verify)"
        )
    lines.append(
        f"ledger        {ledger['files']} files, {render.size(ledger['bytes'])}, "
        f"{ledger['entries']:,} entries, persisted SQN {ledger['persisted_sqn']}"
    )
    rows = [["level", "files", "size", "entries", "tombstones"]]
    for level in ledger["levels"]:
        rows.append(
            [
                f"L{level['level']}",
                str(level["files"]),
                render.size(level["bytes"]),
                f"{level['entries']:,}",
                f"{level['tombstones']:,}",
            ]
        )
    if ledger["levels"]:
        lines.extend(render.table(rows))
    live = [cp for cp in found["checkpoints"] if cp["live"]]
    expired = len(found["checkpoints"]) - len(live)
    note = f" ({expired} expired, dropped by the next GC)" if expired else ""
    lines.append(f"checkpoints   {len(live)} live{note}")
    lines.extend(checkpoint_rows(live, now))
    return lines


def _describe_url(url: str) -> dict[str, Any]:
    with database(url, live=False) as manifests:
        latest = latest_manifest(manifests)
        return describe(manifests, latest.id, latest.manifest)


def describe_data_set(url: str, urls: list[str]) -> dict[str, Any]:
    """What ``info`` reports about a data set: its descriptor and each shard's ``describe``."""
    descriptor = shards.read_descriptor(url)
    return {
        "url": url,
        "data_set": {
            "version": descriptor.version,
            "shards": descriptor.shards,
            "hash": descriptor.hash,
            "created": descriptor.created,
        },
        "shards": each_shard("info", url, urls, _describe_url, quick=True),
    }


def _data_set_lines(found: dict[str, Any]) -> list[str]:
    described = found["data_set"]
    created = (
        ""
        if described["created"] is None
        else f", created {render.timestamp(described['created'])}"
    )
    lines = [
        f"data set      {found['url']}",
        f"shards        {described['shards']} (hash {described['hash']}, format "
        f"{described['version']}{created})",
    ]
    rows = [
        ["shard", "manifest", "writer", "journal entries", "ledger", "persisted SQN", "checkpoints"]
    ]
    for index, shard in enumerate(found["shards"]):
        live = sum(1 for cp in shard["checkpoints"] if cp["live"])
        rows.append(
            [
                str(index),
                str(shard["manifest_id"]),
                str(shard["writer_epoch"]),
                f"{shard['journal']['entries']:,}",
                f"{render.size(shard['ledger']['bytes'])}, {shard['ledger']['entries']:,} entries",
                str(shard["ledger"]["persisted_sqn"]),
                f"{live} live" + (" (DESTROYED)" if shard["destroyed_at"] else ""),
            ]
        )
    lines.extend(render.table(rows))
    total_bytes = sum(s["journal"]["bytes"] + s["ledger"]["bytes"] for s in found["shards"])
    entries = sum(s["journal"]["entries"] for s in found["shards"])
    lines.append(f"total         {render.size(total_bytes)}, {entries:,} journal entries")
    missing = [i for i, s in enumerate(found["shards"]) if s["journal"]["missing_segments"]]
    if missing:
        shown = ", ".join(map(str, missing))
        lines.append(f"MISSING       segments in shard(s) {shown} (run inkpen verify)")
    return lines


@click.command()
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@shard_option
def info(url: str, as_json: bool, shard: int | None) -> None:
    """Show a database: manifest, epochs, journal, ledger levels, checkpoints.

    Reads the latest manifest and lists the journal; writes nothing and never fences a live
    writer. Given a sharded data set, shows its descriptor and one line per shard (--json: each
    shard's full figures); --shard I shows shard I as a database.

    \b
    Example:
      inkpen info ./.inkpen-demo/db
      inkpen info 's3://my-bucket/app/db?endpoint=http://127.0.0.1:8333' --json
    """
    chosen = target(url, shard)
    if chosen.shards is not None:
        found = describe_data_set(url, chosen.shards)
        if as_json:
            render.echo_json(found)
        else:
            click.echo("\n".join(_data_set_lines(found)))
        return
    found = _describe_url(chosen.url)
    if as_json:
        render.echo_json(found)
    else:
        click.echo("\n".join(_text_lines(found)))
