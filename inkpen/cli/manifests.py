"""``inkpen manifest``: print one manifest version (the latest by default), or list them all.

Reads only (the manifest layer); never fences a live writer. ``--json`` prints the stored
document exactly as the manifest model maps it (``Manifest.to_document``), bytes as hex, with the
id added; the text form decodes SST key ranges into buckets and keys.
"""

from __future__ import annotations

import time
from typing import Any

import click

from inkpen.errors import NotFoundError
from inkpen.manifest.model import Manifest
from inkpen.manifest.paths import manifest_key

from . import render
from .data_sets import refused, shard_option, target
from .info import checkpoint_rows, checkpoint_summary
from .params import MANIFEST_ID
from .targets import database, latest_manifest


def _journal_lines(manifest: Manifest) -> list[str]:
    journal = manifest.journal
    lines = [
        f"journal: {len(journal.files)} files; segments rolled up to "
        f"{journal.last_rolled_segment}, next segment {journal.next_segment}"
    ]
    rows = [["file", "SQNs", "entries", "size", "flags"]]
    for f in journal.files:
        flags = ["in-ledger"] if f.in_ledger else []
        if f.sqn_base:
            flags.append(f"sqn-base={f.sqn_base}")
        if f.root:
            flags.append(f"root={f.root}")
        rows.append(
            [
                f.name,
                f"{f.min_sqn}-{f.max_sqn}",
                f"{f.entry_count:,}",
                render.size(f.size),
                " ".join(flags) or "-",
            ]
        )
    if journal.files:
        lines.extend(render.table(rows))
    return lines


def _ledger_lines(manifest: Manifest) -> list[str]:
    ledger = manifest.ledger
    lines = [f"ledger: persisted SQN {ledger.persisted_sqn}"]
    for depth, level in enumerate(ledger.levels):
        lines.append(f"  L{depth}: {len(level)} files")
        rows = []
        for sst in level:
            where = f" root={sst.root}" if sst.root else ""
            rows.append(
                [
                    sst.name,
                    f"{render.ledger_key(sst.first_key)} .. {render.ledger_key(sst.last_key)}",
                    f"SQN {sst.min_sqn}-{sst.max_sqn}",
                    f"{sst.entry_count:,} entries",
                    render.size(sst.size) + where,
                ]
            )
        lines.extend(render.table(rows, indent=4))
    return lines


def text_lines(manifest_id: int, manifest: Manifest, url: str) -> list[str]:
    """A manifest for people."""
    now = time.time()
    lines = [
        f"manifest {manifest_id} of {url} ({manifest_key(manifest_id)})",
        f"format {manifest.format_version}, writer epoch {manifest.writer_epoch}, "
        f"compactor epoch {manifest.compactor_epoch}, initialized {manifest.initialized}",
    ]
    if manifest.destroyed_at is not None:
        lines.append(f"destroyed at {render.timestamp(manifest.destroyed_at)}")
    if manifest.parent is not None:
        lines.append(
            f"clone of {manifest.parent.root} (checkpoint {manifest.parent.checkpoint_id})"
        )
    lines.extend(_journal_lines(manifest))
    lines.extend(_ledger_lines(manifest))
    lines.append(f"checkpoints: {len(manifest.checkpoints)}")
    lines.extend(checkpoint_rows([checkpoint_summary(cp, now) for cp in manifest.checkpoints], now))
    return lines


def document(manifest_id: int, manifest: Manifest) -> dict[str, Any]:
    """The stored document of a manifest, with its id."""
    return {"id": manifest_id, **manifest.to_document()}


@click.command("manifest")
@click.argument("url")
@click.option("--id", "manifest_id", type=MANIFEST_ID, help="This version, not the latest.")
@click.option("--list", "list_ids", is_flag=True, help="List the manifest ids the store holds.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest document as JSON.")
@shard_option
def manifest_command(
    url: str, manifest_id: int | None, list_ids: bool, as_json: bool, shard: int | None
) -> None:
    """Print a manifest of the database (the latest unless --id), or list the ids with --list.

    Reads only; never fences a live writer. GC removes superseded versions that no checkpoint
    pins, so older ids may be gone.

    A sharded data set has no manifest of its own: each shard has its own, with ids of its own;
    name the shard with --shard I (`inkpen info URL` shows each shard's latest id).

    \b
    Example:
      inkpen manifest ./.inkpen-demo/db
      inkpen manifest ./.inkpen-demo/db --list
      inkpen manifest ./.inkpen-demo/db --id 3 --json
    """
    chosen = target(url, shard)
    if chosen.shards is not None:
        raise refused(
            url,
            len(chosen.shards),
            f"manifests are per shard: run `inkpen manifest {url} --shard I` (I from 0 to "
            f"{len(chosen.shards) - 1}), or `inkpen info {url}` for every shard's latest",
        )
    url = chosen.url
    with database(url, live=False) as manifests:
        if list_ids:
            ids = manifests.ids()
            if as_json:
                render.echo_json(ids)
            else:
                click.echo("\n".join(str(i) for i in ids))
            return
        if manifest_id is None:
            latest = latest_manifest(manifests)
            manifest_id, manifest = latest.id, latest.manifest
        else:
            try:
                manifest = manifests.read(manifest_id)
            except NotFoundError:
                raise NotFoundError(
                    f"manifest {manifest_id} does not exist in {manifests.url} (GC removes "
                    f"superseded versions); `inkpen manifest {url} --list` shows the ids present",
                    key=manifest_key(manifest_id),
                ) from None
        if as_json:
            render.echo_json(document(manifest_id, manifest))
        else:
            click.echo("\n".join(text_lines(manifest_id, manifest, manifests.url)))
