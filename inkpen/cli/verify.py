"""``inkpen verify``: read every object a database needs and check every checksum.

What is checked (each object with :mod:`.checks`):

- every manifest version the store holds (the latest, and those checkpoints pin, must be there);
- every SST and journal file named by the latest manifest and by the manifest of each live
  checkpoint, in whichever root holds it (a clone reads its parent's files);
- every journal segment those manifests have not rolled yet.

Verify pins what it reads with a reader checkpoint of its own (refreshed while it runs, deleted
after), so a live writer's merges and GC cannot delete a file under it; it never bumps the writer
epoch, so the writer keeps running. ``--checkpoint ID`` reads at an existing checkpoint instead,
and ``--no-pin`` writes nothing at all (for a stopped database on a store verify may not write).

``--against COPY`` then compares the database with COPY (a backup, restore or clone) the way
``inkpen diff`` does (:mod:`.diff`), each at a reader checkpoint of its own, and lists the keys
that differ.

The exit status is 3 when any object is damaged or missing, 1 when ``--against`` found keys that
differ, 0 when every check passed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import click

from inkpen import shards
from inkpen.errors import CorruptionError, NotFoundError, UsageError
from inkpen.manifest.checkpoints import CheckpointLease
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import judge_tail, scan_segments
from inkpen.manifest.model import KIND_WRITER, Manifest
from inkpen.manifest.paths import (
    MANIFEST_PREFIX,
    manifest_key,
    parse_manifest_key,
    segment_key,
)
from inkpen.manifest.store import ManifestStore, require_live
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.parallel import concurrency, run_bounded

from . import render
from .checks import Kind, Outcome, Status, Target, check
from .data_sets import one_by_one, shard_option, target
from .diff import EXIT_DIFFERENT, key_text, pairs_to_compare, run_diff
from .diff import report as diff_report
from .failures import EXIT_DAMAGED
from .progress import progress
from .targets import existing_store, latest_manifest, require_database
from .verify_report import summary, text_lines

CHECK_BYTES = 256 * 1024 * 1024
"""Bytes of objects verify reads at once at most (each is read whole; one alone may be larger)."""
PIN_LIFETIME = 600.0


@dataclass(frozen=True, slots=True)
class Pin:
    """The state verify reads: the manifest it treats as the latest, and how it is held."""

    manifest_id: int
    manifest: Manifest
    checkpoint_id: str | None


@dataclass(slots=True)
class Plan:
    """Every object to check, and the checkpoints that keep each one (for the missing rule)."""

    targets: dict[tuple[str | None, str], Target] = field(default_factory=dict)
    holders: dict[tuple[str | None, str], set[str]] = field(default_factory=dict)

    def add(self, target: Target, holder: str) -> None:
        where = (target.root, target.key)
        self.targets.setdefault(where, target)
        self.holders.setdefault(where, set()).add(holder)


LATEST = "latest"
"""Holder of the objects the pinned state needs: they can never legitimately go."""
STORED = "stored"
"""Holder of the manifest versions merely listed: GC may remove one while verify runs."""


@contextlib.contextmanager
def pinned(manifests: ManifestStore, checkpoint: str | None, no_pin: bool) -> Iterator[Pin]:
    """Hold the state verify reads (see the module docstring)."""
    if checkpoint is not None:
        latest = latest_manifest(manifests)
        found = latest.manifest.checkpoint(checkpoint)
        if found is None or not found.is_live(time.time()):
            raise NotFoundError(
                f"no live checkpoint {checkpoint} in {manifests.url}; "
                f"`inkpen checkpoint list {manifests.url}` shows the live ones"
            )
        yield Pin(found.manifest_id, manifests.read(found.manifest_id), found.id)
        return
    if no_pin:
        latest = latest_manifest(manifests)
        yield Pin(latest.id, latest.manifest, None)
        return
    # Missing segments are for verify to report, not to stop at: its pin covers what is left.
    lease = CheckpointLease.establish(
        manifests,
        lifetime=PIN_LIFETIME,
        metadata={"purpose": "verify"},
        allow_missing_segments=True,
    )
    try:
        yield Pin(lease.manifest_id, lease.manifest, lease.checkpoint.id)
    finally:
        lease.close()


def _add_files(plan: Plan, manifest: Manifest, holder: str) -> None:
    for sst in manifest.ledger.ssts():
        plan.add(Target(Kind.SST, sst.name, sst.root, sst, sst.size), holder)
    for f in manifest.journal.files:
        plan.add(Target(Kind.JOURNAL, f.name, f.root, f, f.size), holder)


def plan_checks(manifests: ManifestStore, pin: Pin, *, list_tail: bool) -> Plan:
    """Every object to check for ``pin`` (see the module docstring)."""
    store = manifests.store
    plan = Plan()
    for info in store.list(MANIFEST_PREFIX):
        if parse_manifest_key(info.key) is not None:
            plan.add(Target(Kind.MANIFEST, info.key, size=info.size), STORED)
    plan.add(Target(Kind.MANIFEST, manifest_key(pin.manifest_id)), LATEST)
    _add_files(plan, pin.manifest, LATEST)
    journal = pin.manifest.journal
    if list_tail:
        # Every segment present, and every id missing below one of them (reported missing)
        # but for the gaps of a torn tail (writes in flight, or cut off by a crash).
        scan = judge_tail(
            store,
            scan_segments(store, journal.last_rolled_segment, next_segment=journal.next_segment),
        )
        segments = sorted([ref.id for ref in scan.refs] + list(scan.missing))
    else:
        segments = list(journal.unrolled_segments())
    for segment_id in segments:
        plan.add(Target(Kind.SEGMENT, segment_key(segment_id)), LATEST)
    for cp in latest_manifest(manifests).manifest.live_checkpoints(time.time()):
        if cp.manifest_id == pin.manifest_id:
            continue
        if cp.kind != KIND_WRITER:  # a writer's pinned version may be superseded and collected
            plan.add(Target(Kind.MANIFEST, manifest_key(cp.manifest_id)), cp.id)
        try:
            manifest = manifests.read(cp.manifest_id)
        except (NotFoundError, CorruptionError):
            continue  # reported by the manifest's own check when it is needed
        _add_files(plan, manifest, cp.id)
        for segment_id in manifest.journal.unrolled_segments():
            plan.add(Target(Kind.SEGMENT, segment_key(segment_id)), cp.id)
    return plan


def _settle(outcome: Outcome, holders: set[str], manifests: ManifestStore) -> Outcome:
    """A missing object that neither the pinned state nor a live checkpoint needs is gone."""
    if outcome.status is not Status.MISSING or LATEST in holders:
        return outcome
    latest = manifests.latest()
    live = {cp.id for cp in latest.manifest.live_checkpoints(time.time())} if latest else set()
    if holders & live:
        return outcome
    return Outcome(outcome.target, Status.GONE, detail="removed by GC while verify ran")


def run_checks(manifests: ManifestStore, plan: Plan) -> list[Outcome]:
    """Check every planned object, up to the store's concurrency at once and at most
    :data:`CHECK_BYTES` of them (by size) read at once, with progress."""
    resolver = StoreResolver(manifests.store)
    tables = TableStore(manifests.store, resolver=resolver)
    outcomes: list[Outcome] = []
    total = sum(t.size for t in plan.targets.values())
    try:
        with progress("verify", f"verifying {manifests.url}", total=total, unit="bytes") as bar:

            def done(where: tuple[str | None, str], found: Outcome) -> None:
                outcome = _settle(found, plan.holders[where], manifests)
                outcomes.append(outcome)
                bar.advance(outcome.target.size)

            run_bounded(
                lambda where: check(tables, plan.targets[where]),
                list(plan.targets),
                limit=concurrency(manifests.store),
                weigh=lambda where: plan.targets[where].size,
                max_bytes=CHECK_BYTES,
                done=done,
            )
    finally:
        resolver.close()
    return sorted(outcomes, key=lambda o: (list(Kind).index(o.target.kind), o.target.name))


def _latest_or_damage(manifests: ManifestStore) -> Outcome | None:
    """None when the latest manifest reads; else the outcome reporting its damage."""
    try:
        require_live(latest_manifest(manifests), manifests.url)
    except CorruptionError as exc:
        target = Target(Kind.MANIFEST, exc.object_name)
        return Outcome(target, Status.DAMAGED, offset=exc.offset, detail=exc.detail)
    return None


def verify_one(url: str, checkpoint: str | None, no_pin: bool) -> dict[str, Any]:
    """The verify report of the database at ``url`` (see the module docstring)."""
    with existing_store(url) as store:
        manifests = ManifestStore(store)
        require_database(manifests)
        damaged_latest = _latest_or_damage(manifests)
        if damaged_latest is not None:
            report = summary(manifests.url, None, None, [damaged_latest])
            report["problems"][0]["detail"] += (
                " (the latest manifest is damaged, so the files it names cannot be checked; "
                "restore the database from a backup)"
            )
            return report
        with pinned(manifests, checkpoint, no_pin) as pin:
            plan = plan_checks(manifests, pin, list_tail=no_pin)
            return summary(
                manifests.url, pin.manifest_id, pin.checkpoint_id, run_checks(manifests, plan)
            )


def verify_data_set(
    ctx: click.Context,
    url: str,
    urls: list[str],
    checkpoint: str | None,
    no_pin: bool,
    against: str | None,
    as_json: bool,
) -> None:
    """``inkpen verify`` of a data set: every shard in turn (at its part of the data-set
    checkpoint ``checkpoint``, if given), then (with ``--against``) a diff with the copy: shard
    by shard if it is a data set of the same count, else whole."""
    pinned = None
    if checkpoint is not None:
        found_checkpoint = shards.resolve_checkpoint(url, checkpoint)
        if not found_checkpoint.complete:
            raise UsageError(
                f"the data-set checkpoint {found_checkpoint.id} of {url} is held by some shards "
                "only (an interrupted create or delete): delete it and make another"
            )
        pinned = found_checkpoint.id
    pairs = pairs_to_compare(url, against, None)[0] if against is not None else None
    reports = one_by_one(urls, lambda shard: verify_one(shard, pinned, no_pin))
    ok = all(r["ok"] for r in reports)
    document: dict[str, Any] = {"url": url, "ok": ok, "shards": reports}
    compared = []
    if pairs is not None and ok:
        compared = [(a.url, b.url, run_diff(a, b, None)) for a, b in pairs]
        document["against"] = [diff_report(a, b, None, found) for a, b, found in compared]
    if as_json:
        render.echo_json(document)
    else:
        lines = [f"data set {url}: {len(urls)} shards"]
        for index, report in enumerate(reports):
            lines.append(f"shard {index}: {'ok' if report['ok'] else 'DAMAGED'}")
            lines.extend(f"  {line}" for line in text_lines(report))
        for _a, _b, found in compared:
            lines.extend(
                f"{d.kind}\t{render.text(d.bucket)}\t{key_text(d)}" for d in found.differences
            )
        if compared:
            differing = sum(len(found.differences) for _a, _b, found in compared)
            lines.append(
                f"against {against}: the same objects"
                if not differing
                else f"against {against}: {differing} keys differ"
            )
        click.echo("\n".join(lines))
    if not ok:
        ctx.exit(EXIT_DAMAGED)
    if any(not found.same for _a, _b, found in compared):
        ctx.exit(EXIT_DIFFERENT)


@click.command()
@click.argument("url")
@click.option("--checkpoint", default=None, metavar="ID", help="Verify this live checkpoint.")
@click.option(
    "--no-pin",
    is_flag=True,
    help="Write nothing, not even a checkpoint (only for a database no writer is using).",
)
@click.option(
    "--against",
    default=None,
    metavar="COPY",
    help="Then prove that the database at COPY (a backup, restore or clone) holds the same "
    "objects, as `inkpen diff` does; exit 1 if it does not.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@shard_option
@click.pass_context
def verify(
    ctx: click.Context,
    url: str,
    checkpoint: str | None,
    no_pin: bool,
    against: str | None,
    as_json: bool,
    shard: int | None,
) -> None:
    """Check every checksum of every object the database needs; exit 3 if any is damaged.

    Reads every manifest, every SST block by block, every journal file and segment record by
    record, and reports each damaged or missing object with its key and the offset of the
    damage. Holds a reader checkpoint while it reads; never fences a live writer.

    With --against COPY it then compares the database with COPY by tictac trees (`inkpen diff`)
    and lists every key that differs: a backup or restore taken of a database no one wrote to
    since must show none.

    Given a sharded data set, verifies every shard (at a data-set checkpoint with
    --checkpoint), then compares it with --against COPY: shard by shard with a data set of its
    shard count, else whole (by merged trees); --shard I verifies shard I alone.

    \b
    Example:
      inkpen verify ./.inkpen-demo/db
      inkpen verify s3://backups/app --json
      inkpen verify ./db --against ./backups/monday
    """
    chosen = target(url, shard)
    if chosen.shards is not None:
        verify_data_set(ctx, url, chosen.shards, checkpoint, no_pin, against, as_json)
        return
    url = chosen.url
    report = verify_one(url, checkpoint, no_pin)
    compared = None
    if against is not None and report["ok"]:
        ((side, copy),) = pairs_to_compare(url, against, None)[0]
        compared = run_diff(side, copy, None)
        report["against"] = diff_report(url, against, None, compared)
    if as_json:
        render.echo_json(report)
    else:
        lines = text_lines(report)
        if compared is not None:
            lines.extend(
                f"{d.kind}\t{render.text(d.bucket)}\t{key_text(d)}" for d in compared.differences
            )
            lines.append(
                f"against {against}: the same objects"
                if compared.same
                else f"against {against}: {len(compared.differences)} keys differ"
            )
        click.echo("\n".join(lines))
    if not report["ok"]:
        ctx.exit(EXIT_DAMAGED)
    if compared is not None and not compared.same:
        ctx.exit(EXIT_DIFFERENT)
