"""``inkpen lsm``: the shape of a database, as a text picture or a self-contained HTML page.

What it shows, all read from the latest manifest (the figures of ``inkpen info`` come from
:func:`.info.describe`, the checkpoint and feed cursor summaries from the same helpers as
``inkpen checkpoint list`` and ``inkpen feed list``):

- the ledger's levels, L0 first, each SST placed by its key range over the database's key span
  (:class:`KeyAxis`) and sized by its bytes, and L0's depth (the most L0 files one key can be in);
- the journal files with their live and dead bytes (:func:`journal_liveness`) and the unrolled
  segments after them;
- each checkpoint with what it pins (the manifest it names and that manifest's files, of which
  some may be gone from the latest), each feed cursor with the journal it holds (the files above
  its SQN, which journal compaction keeps while it lives);
- the writer and compactor epochs.

Reads only, like ``inkpen info``: it opens the manifest layer (never bumping an epoch, so a live
writer is not fenced) and the SST and journal files the liveness sample needs, and writes nothing
to the database. A file a live writer's GC removes meanwhile leaves its liveness unknown.
"""

from __future__ import annotations

import bisect
import itertools
import random
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from inkpen.actors.journal.retention import Judgement
from inkpen.actors.kernel.views import LedgerView, SstHandle
from inkpen.errors import CorruptionError, InkpenError, NotFoundError
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.levels import Levels
from inkpen.manifest.model import Checkpoint, JournalFileDescriptor, Manifest, SstDescriptor
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.options import Options

from . import render
from .data_sets import one_by_one, refused, shard_option, target
from .feed import cursor_summary
from .info import checkpoint_summary, describe
from .lsm_page import page
from .progress import progress
from .targets import database, latest_manifest

KEY_POSITIONS = 256
"""Bytes of a key past the common prefix that :class:`KeyAxis` reads at most."""
KEY_PRECISION = 1e-9
"""The weight of a key's digit below which :class:`KeyAxis` reads no further."""
STRIP_COLUMNS = 48
"""Columns of a level's strip in the text picture."""
SHADES = " ░▒▓█"
SAMPLE_WORKERS = 8
"""Journal files sampled at once."""
TICKS = 5
"""Keys named along the page's key axis (both ends included)."""


class KeyAxis:
    """Where a key sits between the first and the last key of a set, as a fraction 0..1.

    Keys are bytes. A key's place is its bytes read as the digits of a fraction whose base at
    each position is the number of different bytes the set's keys have there: a position where
    all the keys agree takes no room, numbered keys such as ``key0001234`` spread as their
    numbers do whatever prefix they share, and random binary keys spread as their first bytes
    would. The places keep the order of the keys (a key and a longer one it begins may share a
    place). Positions are read until a digit's weight falls below what a drawing shows, and at
    most :data:`KEY_POSITIONS` of them past the set's common prefix.
    """

    def __init__(self, keys: Iterable[bytes]) -> None:
        known = sorted(set(keys))
        self.first = known[0] if known else b""
        self.last = known[-1] if known else b""
        prefix = 0
        for a, b in zip(self.first, self.last, strict=False):
            if a != b:
                break
            prefix += 1
        self._digits: list[tuple[int, list[int]]] = []
        """(position, the bytes the keys have there), for the positions where they differ."""
        weight = 1.0
        longest = max((len(k) for k in known), default=0)
        for i in range(prefix, min(longest, prefix + KEY_POSITIONS)):
            values = sorted({k[i] for k in known if len(k) > i})
            if len(values) > 1:
                self._digits.append((i, values))
                weight /= len(values)
                if weight < KEY_PRECISION:
                    break
        self._low = self._value(self.first)
        self._width = self._value(self.last) - self._low

    def _value(self, key: bytes) -> float:
        value, weight = 0.0, 1.0
        for i, values in self._digits:
            if len(key) <= i:
                break
            weight /= len(values)
            value += weight * bisect.bisect_left(values, key[i])
        return value

    def position(self, key: bytes) -> float:
        """``key``'s place between the first key (0.0) and the last (1.0), clamped."""
        if self._width <= 0:
            return 0.0
        return min(1.0, max(0.0, (self._value(key) - self._low) / self._width))


def l0_shape(files: Sequence[SstDescriptor]) -> tuple[list[int], int]:
    """(a lane for each L0 file, L0's depth). Files are taken newest first, each into the first
    lane where it overlaps no file already there; the depth is the most files one key is in."""
    lanes: list[list[SstDescriptor]] = []
    placed: list[int] = []
    for sst in files:
        for lane, held in enumerate(lanes):
            if all(sst.last_key < o.first_key or o.last_key < sst.first_key for o in held):
                held.append(sst)
                placed.append(lane)
                break
        else:
            lanes.append([sst])
            placed.append(len(lanes) - 1)
    events = sorted(
        itertools.chain(((s.first_key, 0) for s in files), ((s.last_key, 1) for s in files))
    )
    depth = deepest = 0
    for _, kind in events:  # at one key, a file's start comes before another's end
        depth += 1 if kind == 0 else -1
        deepest = max(deepest, depth)
    return placed, deepest


@dataclass(frozen=True, slots=True)
class Liveness:
    """What a sample of one journal file says: bytes journal compaction would keep, of all."""

    live_bytes: int
    dead_bytes: int
    sampled: int
    """Records judged (0: the file was not sampled, its bytes are counted live or dead whole)."""


def journal_liveness(
    manifests: ManifestStore, manifest: Manifest, *, sample: int
) -> tuple[dict[str, Liveness], str | None]:
    """(each journal file's :class:`Liveness` by name, why some are unknown or None).

    Live means what journal compaction would keep: up to ``sample`` records of each file
    (compaction's own ``compaction_sample_size``) are judged by its rules
    (:mod:`inkpen.actors.journal.retention`) against the ledger as the manifest's SSTs hold it,
    as the compactor judges them; a record above the manifest's persisted SQN counts as live
    (the SSTs cannot judge it yet). A file's live bytes are its size times the kept share of its
    sample's bytes. In a head-only store the journal only serves recovery: a file whose records
    the SSTs all hold is dead whole, any other live whole.
    """
    files = manifest.journal.files
    persisted = manifest.ledger.persisted_sqn
    if manifest.head_only is not None:
        return {
            f.name: Liveness(f.size, 0, 0) if f.max_sqn > persisted else Liveness(0, f.size, 0)
            for f in files
        }, None
    if not files:
        return {}, None
    options = replace(Options(), compaction_sample_size=sample)
    resolver = StoreResolver(manifests.store)
    try:
        tables = TableStore.for_options(resolver, options)
        try:
            levels = Levels(
                tuple(
                    tuple(SstHandle(d, tables.open_sst(d)) for d in level)
                    for level in manifest.ledger.levels
                )
            )
        except InkpenError as exc:
            return {}, f"the ledger's SSTs could not be read ({exc})"
        ledger = LedgerView(files=levels, persisted_sqn=persisted)
        judgement = Judgement(
            ledger.get, options, max_sqn=persisted, now_ms=int(time.time() * 1000)
        )

        def one(descriptor: JournalFileDescriptor) -> tuple[str, Liveness | None]:
            try:
                reader = tables.open_journal(descriptor)
                kept = judgement.score(reader, random.Random(descriptor.name))
            except InkpenError:
                return descriptor.name, None
            live = round(descriptor.size * kept / 100.0)
            return descriptor.name, Liveness(
                live, descriptor.size - live, min(sample, descriptor.entry_count)
            )

        found: dict[str, Liveness] = {}
        with (
            progress("lsm", "sampling journal files", total=len(files), unit="files") as bar,
            ThreadPoolExecutor(max_workers=SAMPLE_WORKERS, thread_name_prefix="lsm") as pool,
        ):
            for name, liveness in pool.map(one, files):
                bar.advance()
                if liveness is not None:
                    found[name] = liveness
    finally:
        resolver.close()
    missing = len(files) - len(found)
    why = f"{missing} journal file(s) could not be read (removed meanwhile?)" if missing else None
    return found, why


def _pins(
    manifests: ManifestStore, latest: Manifest, checkpoint: Checkpoint
) -> dict[str, Any] | None:
    """What ``checkpoint`` holds: its manifest's SQNs and files, and which of those files the
    latest manifest no longer names (GC keeps them for the checkpoint); None when its manifest
    cannot be read (an expired checkpoint's, collected)."""
    try:
        pinned = manifests.read(checkpoint.manifest_id)
    except (NotFoundError, CorruptionError):
        return None
    current = latest.referenced_objects()
    ssts = list(pinned.ledger.ssts())
    journal = pinned.journal.files
    everything: list[SstDescriptor | JournalFileDescriptor] = [*ssts, *journal]
    gone = [f for f in everything if (f.root, f.name) not in current]
    segments = pinned.journal.unrolled_segments()
    return {
        "persisted_sqn": pinned.ledger.persisted_sqn,
        "journal_max_sqn": journal[-1].max_sqn if journal else None,
        "segments": [segments.start, segments.stop - 1] if segments else None,
        "ssts": len(ssts),
        "journal_files": len(journal),
        "bytes": sum(f.size for f in everything),
        "gone_files": len(gone),
        "gone_bytes": sum(f.size for f in gone),
        "sst_names": [s.name for s in ssts if (s.root, s.name) in current],
        "journal_names": [f.name for f in journal if (f.root, f.name) in current],
    }


def _sst(sst: SstDescriptor, axis: KeyAxis, lane: int) -> dict[str, Any]:
    return {
        "name": sst.name,
        "size": sst.size,
        "entries": sst.entry_count,
        "tombstones": sst.tombstone_count,
        "first": render.ledger_key(sst.first_key),
        "last": render.ledger_key(sst.last_key),
        "min_sqn": sst.min_sqn,
        "max_sqn": sst.max_sqn,
        "x0": axis.position(sst.first_key),
        "x1": axis.position(sst.last_key),
        "lane": lane,
        "inherited": sst.root is not None,
    }


def _ticks(axis: KeyAxis, keys: Sequence[bytes]) -> list[dict[str, Any]]:
    """Up to :data:`TICKS` keys to name along the axis: the SST bounds nearest evenly spaced
    places."""
    if not keys:
        return []
    placed = sorted((axis.position(k), k) for k in set(keys))
    where = [p for p, _ in placed]
    ticks: list[dict[str, Any]] = []
    for step in range(TICKS):
        i = min(bisect.bisect_left(where, step / (TICKS - 1)), len(placed) - 1)
        x, key = placed[i]
        if not ticks or ticks[-1]["x"] != x:
            ticks.append({"x": x, "key": render.ledger_key(key)})
    return ticks


def survey(manifests: ManifestStore, manifest_id: int, manifest: Manifest) -> dict[str, Any]:
    """Everything ``inkpen lsm`` shows, as a JSON-friendly dict (the page's data)."""
    now = time.time()
    found = describe(manifests, manifest_id, manifest)
    bounds = [k for s in manifest.ledger.ssts() for k in (s.first_key, s.last_key)]
    axis = KeyAxis(bounds)
    levels: list[dict[str, Any]] = []
    for depth, level in enumerate(manifest.ledger.levels):
        lanes, l0_depth = l0_shape(level) if depth == 0 else ([0] * len(level), min(1, len(level)))
        levels.append(
            {
                **found["ledger"]["levels"][depth],
                "depth": l0_depth,
                "lanes": max(lanes, default=0) + 1,
                "min_sqn": min((s.min_sqn for s in level), default=None),
                "max_sqn": max((s.max_sqn for s in level), default=None),
                "ssts": [_sst(s, axis, lane) for s, lane in zip(level, lanes, strict=True)],
            }
        )
    sample = Options().compaction_sample_size
    liveness, unknown = journal_liveness(manifests, manifest, sample=sample)
    files = []
    for f in manifest.journal.files:
        known = liveness.get(f.name)
        files.append(
            {
                "name": f.name,
                "min_sqn": f.min_sqn,
                "max_sqn": f.max_sqn,
                "size": f.size,
                "entries": f.entry_count,
                "in_ledger": f.in_ledger,
                "inherited": f.root is not None,
                "live_bytes": None if known is None else known.live_bytes,
                "dead_bytes": None if known is None else known.dead_bytes,
                "sampled": None if known is None else known.sampled,
            }
        )
    journal = found["journal"]
    live_cursors = [c for c in manifest.feed_cursors if c.is_live(now)]
    floor = manifest.feed_floor(now)
    cursors = []
    for cursor in manifest.feed_cursors:
        held = [f for f in manifest.journal.files if f.max_sqn > cursor.sqn]
        cursors.append(
            {
                **cursor_summary(cursor, now),
                "floor": cursor in live_cursors and cursor.sqn == floor,
                "holds": {
                    "journal_files": len(held),
                    "bytes": sum(f.size for f in held),
                    "journal_names": [f.name for f in held],
                    "segments": journal["segments"],
                    "segment_bytes": journal["segment_bytes"],
                },
            }
        )
    checkpoints = []
    for cp in manifest.checkpoints:
        checkpoints.append({**checkpoint_summary(cp, now), "pins": _pins(manifests, manifest, cp)})
    return {
        "url": found["url"],
        "manifest_id": manifest_id,
        "format_version": found["format_version"],
        "looked_at": render.timestamp(now),
        "writer_epoch": manifest.writer_epoch,
        "compactor_epoch": manifest.compactor_epoch,
        "writer_compaction": manifest.writer_compaction,
        "head_only": manifest.head_only,
        "destroyed_at": found["destroyed_at"],
        "parent": found["parent"],
        "persisted_sqn": manifest.ledger.persisted_sqn,
        "key_span": {
            "first": render.ledger_key(axis.first) if bounds else None,
            "last": render.ledger_key(axis.last) if bounds else None,
            "ticks": _ticks(axis, bounds),
        },
        "ledger": {k: v for k, v in found["ledger"].items() if k != "levels"},
        "levels": levels,
        "journal": {
            **journal,
            "sample": sample,
            "live_unknown": unknown,
            "live_bytes": sum(f["live_bytes"] or 0 for f in files),
            "dead_bytes": sum(f["dead_bytes"] or 0 for f in files),
            "file_list": files,
        },
        "checkpoints": checkpoints,
        "cursors": cursors,
        "feed_floor": floor,
    }


def strip(level: dict[str, Any], most: float) -> str:
    """A level as :data:`STRIP_COLUMNS` characters over the key span: each SST's bytes spread
    over the columns its key range covers, shaded against ``most`` (the densest column)."""
    columns = [0.0] * STRIP_COLUMNS
    for sst in level["ssts"]:
        _spread(columns, sst["x0"], sst["x1"], sst["size"])
    top = len(SHADES) - 1
    return "".join(
        SHADES[0] if c <= 0 else SHADES[max(1, min(top, round(top * c / most)))] for c in columns
    )


def _spread(columns: list[float], x0: float, x1: float, size: float) -> None:
    n = len(columns)
    first = min(n - 1, int(x0 * n))
    last = min(n - 1, int(x1 * n))
    share = size / (last - first + 1)
    for c in range(first, last + 1):
        columns[c] += share


def densest(levels: Sequence[dict[str, Any]]) -> float:
    """The most bytes in one strip column of any level."""
    most = 0.0
    for level in levels:
        columns = [0.0] * STRIP_COLUMNS
        for sst in level["ssts"]:
            _spread(columns, sst["x0"], sst["x1"], sst["size"])
        most = max(most, *columns)
    return most


def _sqns(low: int | None, high: int | None) -> str:
    return "-" if low is None else f"{low:,}-{high:,}"


def text_lines(found: dict[str, Any]) -> list[str]:
    """The text picture."""
    journal, ledger = found["journal"], found["ledger"]
    lines = [
        f"database      {found['url']}",
        f"manifest      {found['manifest_id']} (format {found['format_version']})",
        f"epochs        writer {found['writer_epoch']} ({found['writer_compaction']} "
        f"compaction), compactor {found['compactor_epoch']}",
        f"ledger        {ledger['files']} SSTs, {render.size(ledger['bytes'])}, "
        f"{ledger['entries']:,} entries, persisted SQN {found['persisted_sqn']:,}",
    ]
    span = found["key_span"]
    if span["first"] is not None:
        lines.append(f"key span      {span['first']}  ..  {span['last']}")
    most = densest(found["levels"]) or 1.0
    rows = [["level", "files", "size", "depth", "SQNs", "first key" + " " * 30 + "last key"]]
    for level in found["levels"]:
        rows.append(
            [
                f"L{level['level']}",
                str(level["files"]),
                render.size(level["bytes"]),
                str(level["depth"]) if level["level"] == 0 else "",
                _sqns(level["min_sqn"], level["max_sqn"]),
                f"|{strip(level, most)}|",
            ]
        )
    if found["levels"]:
        lines.extend(render.table(rows))
    total = journal["bytes"]
    live = journal["live_bytes"]
    share = f" ({100.0 * live / total:.0f}%)" if total else ""
    lines.append(
        f"journal       {journal['files']} files, {render.size(total)}, live "
        f"~{render.size(live)}{share}, dead ~{render.size(journal['dead_bytes'])}; "
        f"{journal['segments']} segments after {journal['last_rolled_segment']}, "
        f"{render.size(journal['segment_bytes'])}"
    )
    if journal["live_unknown"]:
        lines.append(f"              live unknown: {journal['live_unknown']}")
    lines.append(f"checkpoints   {len(found['checkpoints'])}")
    for cp in found["checkpoints"]:
        pins = cp["pins"]
        held = (
            "its manifest is gone"
            if pins is None
            else f"{pins['ssts']} SSTs + {pins['journal_files']} journal files, "
            f"{render.size(pins['bytes'])} ({pins['gone_files']} gone from the latest), "
            f"SQN <= {pins['persisted_sqn']:,} in the ledger"
        )
        state = "live" if cp["live"] else "EXPIRED"
        lines.append(
            f"  {cp['id']}  {cp['kind'] or '-'}  {cp['name'] or '-'}  manifest "
            f"{cp['manifest_id']}  {state}: {held}"
        )
    lines.append(f"feed cursors  {len(found['cursors'])}")
    for cursor in found["cursors"]:
        holds = cursor["holds"]
        state = "live" if cursor["live"] else "EXPIRED"
        floor = ", the journal's floor" if cursor["floor"] else ""
        lines.append(
            f"  {cursor['name']}  SQN {cursor['sqn']:,}  {state}{floor}: holds "
            f"{holds['journal_files']} journal files, {render.size(holds['bytes'])} "
            f"+ {holds['segments']} segments"
        )
    return lines


def _survey_url(url: str) -> dict[str, Any]:
    with database(url, live=False) as manifests:
        latest = latest_manifest(manifests)
        return survey(manifests, latest.id, latest.manifest)


@click.command("lsm")
@click.argument("url")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write a self-contained HTML page drawing the database to FILE (it needs no network "
    "to view).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what the page draws as JSON.")
@shard_option
def lsm(url: str, html_file: Path | None, as_json: bool, shard: int | None) -> None:
    """Draw a database: its levels, L0 depth, journal, checkpoints, feed cursors and epochs.

    Without --html, prints a compact text picture: one line per level with its SSTs' bytes
    shaded over the key span. Reads only (the latest manifest, the manifests checkpoints pin,
    and a sample of each journal file to tell live bytes from dead): it never fences a live
    writer and writes nothing to the database.

    Given a sharded data set, prints each shard's picture in turn (--json: a list of them);
    a page draws one database, so --html needs --shard I.

    \b
    Example:
      inkpen lsm ./.inkpen-demo/db
      inkpen lsm ./.inkpen-demo/db --html lsm.html
    """
    if html_file is not None and not html_file.absolute().parent.is_dir():
        raise click.BadParameter(
            f"{html_file.parent} is not a directory to write the page in", param_hint="--html"
        )
    chosen = target(url, shard)
    if chosen.shards is not None:
        if html_file is not None:
            raise refused(
                url,
                len(chosen.shards),
                f"a page draws one database: run `inkpen lsm {url} --shard I --html FILE` "
                f"(I from 0 to {len(chosen.shards) - 1})",
            )
        surveys = one_by_one(chosen.shards, _survey_url)
        if as_json:
            render.echo_json({"url": url, "shards": surveys})
            return
        for index, found in enumerate(surveys):
            click.echo(f"shard {index}: {found['url']}")
            click.echo("\n".join(f"  {line}" for line in text_lines(found)))
        return
    found = _survey_url(chosen.url)
    if html_file is not None:
        html_file.write_text(page(found), encoding="utf-8")
        counts = ", ".join(f"L{level['level']} {level['files']}" for level in found["levels"])
        click.echo(
            f"wrote {html_file}: {found['ledger']['files']} SSTs ({counts or 'no levels'}), "
            f"{found['journal']['files']} journal files, checkpoints "
            f"{len(found['checkpoints'])}, feed cursors {len(found['cursors'])}"
        )
    if as_json:
        render.echo_json(found)
    elif html_file is None:
        click.echo("\n".join(text_lines(found)))
