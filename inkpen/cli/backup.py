"""``inkpen backup`` and ``inkpen restore``: copies of a database that open as databases.

``backup URL DEST`` takes a hot backup through a Bookie (``Bookie.hot_backup``): it opens URL as
its writer, which fences any Bookie open on it elsewhere, and copies the journal (the ledger is
rebuilt from it when the backup is opened). ``backup --no-fence`` and ``restore`` open no writer:
they copy the database as a checkpoint pins it (:mod:`inkpen.manifest.copies`), so the source
is left alone.
``restore BACKUP DEST`` then opens DEST once as a Bookie, which rebuilds its ledger from the
journal, and closes it cleanly: DEST is a working database holding the backup's objects.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import click

import inkpen
from inkpen import shards
from inkpen._shard_layout import adopt_descriptor
from inkpen.errors import UsageError
from inkpen.manifest.copies import CopyReport, Pinned, copy_database, planned_bytes
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, open_store
from inkpen.objectstore.url import check_distinct_locations
from inkpen.operations import stand_in_operators

from . import render
from .data_sets import shard_option, target
from .progress import Tracker, progress, watched
from .targets import checked_url, existing_store, writer


def _copy_lines(report: CopyReport) -> list[str]:
    return [
        f"files         {report.files} ({report.files_copied} copied, {report.files_kept} "
        f"already there, {render.size(report.bytes_copied)} copied)",
        f"read at       checkpoint {report.checkpoint} (manifest {report.source_manifest_id})",
        f"segments      {report.segments_rolled} read and rolled into the copy's journal",
        f"removed       {report.files_removed} files an earlier copy had",
        f"manifest      {report.manifest_id} in {report.destination}",
        f"took          {report.seconds:.2f}s",
    ]


def _copy(
    source_url: str, dest_url: str, *, checkpoint: str | None, fresh: bool, description: str
) -> CopyReport:
    checked_url(dest_url, must_exist=False)
    check_distinct_locations(source_url, dest_url, what="copy")
    with existing_store(source_url) as source:
        dest = open_store(dest_url)
        try:
            with progress("copy", description, unit="bytes") as bar:

                def pinned(found: Pinned) -> None:
                    bar.update(0, total=planned_bytes(found.manifest))

                return copy_database(
                    source,
                    dest,
                    checkpoint=checkpoint,
                    fresh=fresh,
                    observe=lambda _key, size: bar.advance(size),
                    on_pinned=pinned,
                )
        finally:
            dest.close()


def _hot_backup(url: str, dest_url: str) -> inkpen.BackupReport:
    checked_url(dest_url, must_exist=False)
    check_distinct_locations(url, dest_url, what="back up")  # before the writer fences anyone
    with writer(url) as book:
        taken = book.hot_backup()
        with taken:
            dest = CountingStore(open_store(dest_url))
            try:
                with progress("backup", f"backing up {url}", unit="files") as bar:
                    return watched(lambda: taken(dest), lambda: _show_copies(bar, dest))
            finally:
                dest.close()


def _show_copies(bar: Tracker, dest: CountingStore) -> None:
    counts = dest.snapshot()
    bar.update(counts["copies"] + counts["puts"])


@click.command()
@click.argument("url")
@click.argument("dest")
@click.option(
    "--no-fence",
    is_flag=True,
    help="Open no writer: copy the database at a checkpoint, leaving a live writer running.",
)
@click.option(
    "--checkpoint",
    default=None,
    metavar="ID",
    help="Copy this live checkpoint's state (implies --no-fence; writes nothing to URL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@shard_option
def backup(
    url: str,
    dest: str,
    no_fence: bool,
    checkpoint: str | None,
    as_json: bool,
    shard: int | None,
) -> None:
    """Back up the database at URL into DEST (an empty location or an earlier backup).

    By default this opens URL as its writer and takes a hot backup of its journal: a Bookie
    still open on URL in another process is FENCED (its next write fails with FencedError).
    To back up a database an application is writing, call book.hot_backup() in that
    application, or pass --no-fence: the copy is then read at a checkpoint (one of its own, or
    --checkpoint ID) and no writer is opened. Backing up into the same DEST again copies only
    new files. Restore with `inkpen restore DEST NEW_LOCATION`.

    \b
    Example:
      inkpen backup ./.inkpen-demo/db ./backups/monday
      inkpen backup 's3://prod/app?endpoint=http://127.0.0.1:8333' s3://backups/app --no-fence

    A sharded data set is backed up shard by shard into DEST, which gets the same descriptor
    (with the writers of every shard fenced, or none with --no-fence; --checkpoint ID names a
    data-set checkpoint, each shard copied at its part of it). --shard I backs up shard I alone
    into DEST, as a database.
    """
    chosen = target(url, shard)
    url = chosen.url
    pairs = None if chosen.shards is None else _copy_pairs(url, dest, chosen.shards)
    if pairs is not None:
        pinned = _pinned(url, checkpoint)
        if no_fence or pinned is not None:
            copies = one_by_one_pairs(
                pairs,
                lambda a, b: asdict(
                    _copy(a, b, checkpoint=pinned, fresh=False, description=f"copying {a}")
                ),
            )
        else:
            copies = one_by_one_pairs(pairs, lambda a, b: asdict(_hot_backup(a, b)))
        if as_json:
            render.echo_json({"url": url, "dest": dest, "shards": copies})
            return
        how = (
            "without opening a writer"
            if no_fence or pinned is not None
            else "(hot backups of each shard's journal)"
        )
        click.echo(f"backed up the {len(pairs)} shards of {url} into {dest} {how}")
        for index, copied in enumerate(copies):
            click.echo(
                f"shard {index}: {copied['files']} files ({copied['files_copied']} copied, "
                f"{render.size(copied['bytes_copied'])}), manifest {copied['manifest_id']}"
            )
        return
    if no_fence or checkpoint is not None:
        report = _copy(url, dest, checkpoint=checkpoint, fresh=False, description=f"copying {url}")
        if as_json:
            render.echo_json(asdict(report))
        else:
            click.echo(f"backed up {url} into {dest} without opening a writer")
            click.echo("\n".join(_copy_lines(report)))
        return
    hot = _hot_backup(url, dest)
    if as_json:
        render.echo_json(asdict(hot))
        return
    click.echo(f"backed up {url} into {dest} (hot backup of the journal)")
    click.echo(
        f"journal files {hot.files} ({hot.files_copied} copied, {hot.files_kept} already there,"
        f" {render.size(hot.bytes_copied)} copied, {hot.files_removed} removed)"
    )
    click.echo(f"manifest      {hot.manifest_id} in {hot.destination}")
    click.echo(f"took          {hot.seconds:.2f}s")


@click.command()
@click.argument("backup_url", metavar="BACKUP")
@click.argument("dest")
@click.option(
    "--checkpoint",
    default=None,
    metavar="ID",
    help="Restore this live checkpoint of BACKUP (writes nothing to BACKUP).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@shard_option
def restore(
    backup_url: str, dest: str, checkpoint: str | None, as_json: bool, shard: int | None
) -> None:
    """Make DEST (an empty location) a working database holding BACKUP's objects.

    Copies the files of BACKUP's latest state into DEST (hard links on one filesystem,
    server-side copies on S3), holding a short reader checkpoint on BACKUP meanwhile; the
    backup is otherwise left as it was and no writer of it is fenced. DEST is then opened once
    as a Bookie, which rebuilds its ledger from the journal, and closed. An interrupted restore
    resumes when run again. BACKUP may be any database, not only a backup.

    \b
    Example:
      inkpen restore ./backups/monday ./restored-db
      inkpen info ./restored-db

    A backup of a sharded data set is restored shard by shard into a new data set at DEST
    (--checkpoint ID: a data-set checkpoint); --shard I restores shard I alone into DEST, as a
    database.
    """
    chosen = target(backup_url, shard)
    backup_url = chosen.url
    pairs = None if chosen.shards is None else _copy_pairs(backup_url, dest, chosen.shards)
    if pairs is not None:
        pinned = _pinned(backup_url, checkpoint)
        restored = one_by_one_pairs(pairs, lambda a, b: _restore_one(a, b, pinned)[0])
        if as_json:
            render.echo_json({"backup": backup_url, "dest": dest, "shards": restored})
            return
        click.echo(f"restored the {len(pairs)} shards of {backup_url} into {dest}")
        for index, done in enumerate(restored):
            click.echo(
                f"shard {index}: {done['files']} files, ledger up to SQN {done['sqn']}, "
                f"{done['total_seconds']:.2f}s"
            )
        return
    result, report = _restore_one(backup_url, dest, checkpoint)
    if as_json:
        render.echo_json(result)
        return
    click.echo(f"restored {backup_url} into {dest}")
    click.echo("\n".join(line for line in _copy_lines(report) if not line.startswith("took")))
    click.echo(f"ledger        up to SQN {result['sqn']}; buckets: {', '.join(result['buckets'])}")
    click.echo(
        f"took          {result['total_seconds']:.2f}s: {report.seconds:.2f}s copying, "
        f"{result['rebuild_seconds']:.2f}s rebuilding the ledger"
    )


def _pinned(url: str, checkpoint: str | None) -> str | None:
    """A data-set checkpoint's id (the same in every shard), given its id or name."""
    if checkpoint is None:
        return None
    found = shards.resolve_checkpoint(url, checkpoint)
    if not found.complete:
        raise UsageError(
            f"the data-set checkpoint {found.id} of {url} is held by some shards only (an "
            "interrupted create or delete): delete it and make another"
        )
    return found.id


def _copy_pairs(url: str, dest: str, urls: list[str]) -> list[tuple[str, str]]:
    """For the data set at ``url`` (shards ``urls``): ``dest`` made a data set of the same
    descriptor, and the (source, destination) URL of every shard."""
    checked_url(dest, must_exist=False)
    check_distinct_locations(url, dest, what="copy")
    adopt_descriptor(dest, shards.read_descriptor(url))
    return [(shard, shards.shard_url(dest, i)) for i, shard in enumerate(urls)]


def one_by_one_pairs(
    pairs: list[tuple[str, str]], work: Callable[[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``work(source, dest)`` for every shard in turn (each copy shows its own progress)."""
    return [work(source, target) for source, target in pairs]


def _restore_one(
    backup_url: str, dest: str, checkpoint: str | None
) -> tuple[dict[str, Any], CopyReport]:
    started = time.monotonic()
    report = _copy(
        backup_url, dest, checkpoint=checkpoint, fresh=True, description=f"restoring {backup_url}"
    )
    with existing_store(dest) as store:  # a head-only copy opens in its mode
        latest = ManifestStore(store).latest()
        mode = None if latest is None else latest.manifest.head_only
        names = () if latest is None else latest.manifest.merge_operators
    with progress("restore", "rebuilding the ledger: replaying the journal", total=2) as bar:
        rebuild_started = time.monotonic()
        with inkpen.open(dest, head_only=mode, merge_operators=stand_in_operators(names)) as book:
            bar.advance()
            bar.phase("rebuilding the ledger: writing it to SSTs")
            stats = book.stats()
            buckets = [render.text(b) for b in book.buckets()]
        bar.advance()
    finished = time.monotonic()
    result: dict[str, Any] = {
        **asdict(report),
        "sqn": stats["sqn"],
        "buckets": buckets,
        "ledger_files": stats["level_files"],
        "rebuild_seconds": round(finished - rebuild_started, 3),
        "total_seconds": round(finished - started, 3),
    }
    return result, report
