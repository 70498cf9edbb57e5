"""Operations on whole databases that need no open Bookie: backup, restore, destroy, listing.

These are the public names of what the ``inkpen`` command does for ``backup --no-fence``,
``restore`` and ``destroy``, for applications and scripts (a cron job, an admin endpoint):

- :func:`backup` copies a database at a checkpoint into another root (an empty one, or an earlier
  backup, which is then brought up to date copying only new files). It opens no writer, so the
  application writing the source keeps running; it writes only a short-lived reader checkpoint
  to the source (nothing with ``checkpoint=ID``).
- :func:`restore` is such a copy into a fresh root, which it then opens once as a Bookie so its
  ledger is rebuilt: the destination is a working database.
- :func:`destroy` removes a database now (hard) or marks it for GC (soft).
- :func:`list_databases` names the databases directly under a root (dated backups, say).
- :func:`recorded_merge_operators` names the merge operators a database records, and
  :func:`forget_merge_operator` retires one, so the database opens without it again.

Each takes store URLs (a directory, ``file://``, ``s3://...``, ``memory://``) or
:class:`~inkpen.objectstore.ObjectStore` instances. A local directory that does not exist is "no
database": looking at it does not create it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from inkpen.logs import get_logger
from inkpen.manifest.copies import CopyReport, copy_database
from inkpen.manifest.destroy import destroy as _destroy
from inkpen.manifest.model import KIND_WRITER, Manifest, VersionedManifest, decode
from inkpen.manifest.paths import MANIFEST_PREFIX, manifest_key, parse_manifest_key
from inkpen.manifest.store import ManifestStore, require_live
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.url import backend_of, check_distinct_locations, parse_store_url

from . import bookie as _bookie
from .checks import check_flag, check_text
from .errors import NotFoundError, UsageError
from .options import MergeOperator, check_operator_name

__all__ = [
    "CopyReport",
    "backup",
    "destroy",
    "forget_merge_operator",
    "list_databases",
    "recorded_merge_operators",
    "restore",
]

log = get_logger("inkpen.manifest")


@contextlib.contextmanager
def _store(url: str | ObjectStore, *, must_exist: bool, what: str) -> Iterator[ObjectStore]:
    if isinstance(url, ObjectStore):
        yield url
        return
    if not isinstance(url, str):
        raise UsageError(f"{what} must be a store URL or an ObjectStore, got {type(url).__name__}")
    parsed = parse_store_url(url)
    if must_exist and backend_of(parsed).local and not os.path.isdir(parsed.location):
        what = (
            "is a file, not a directory" if os.path.lexists(parsed.location) else ("does not exist")
        )
        raise NotFoundError(f"no inkpen database at {url}: {parsed.location} {what}")
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def backup(
    url: str | ObjectStore, dest: str | ObjectStore, checkpoint: str | None = None
) -> CopyReport:
    """Copy the database at ``url`` into ``dest`` without opening a writer; returns the report.

    ``dest`` is an empty location or an earlier backup (then only new files are copied and files
    it no longer needs are removed). The copy reads a checkpoint of its own, held while it runs,
    or the live checkpoint ``checkpoint`` (then nothing at all is written to ``url``). Fences
    nobody: an application writing ``url`` keeps running. Files are hard links on one local
    filesystem and server-side copies on S3. The backup is a database: open it with
    ``inkpen.open_reader`` or make a working copy of it with :func:`restore`.
    """
    check_text("checkpoint", checkpoint, optional=True)
    check_distinct_locations(url, dest, what="back up")
    with (
        _store(url, must_exist=True, what="url") as source,
        _store(dest, must_exist=False, what="dest") as target,
    ):
        return copy_database(source, target, checkpoint=checkpoint)


def _refuse_merges(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    raise UsageError(
        "this writer stands in for the database's recorded merge operators and merges nothing; "
        "open the database with inkpen.open(url, merge_operators={...}) to merge"
    )


def stand_in_operators(names: Iterable[str]) -> dict[str, MergeOperator]:
    """Merge operators for the recorded ``names`` that refuse every merge, for a writer that
    merges nothing (restore's rebuild, the command line's writers): values in the journal are
    folded already, so such a writer needs none of the application's operators."""
    return dict.fromkeys(names, _refuse_merges)


def recorded_merge_operators(url: str | ObjectStore) -> tuple[str, ...]:
    """The names of the merge operators the database at ``url`` records (in name order): a
    writer must be opened with an operator of each name. A name is recorded by the first merge
    with it that lands."""
    with _store(url, must_exist=True, what="url") as store:
        latest = ManifestStore(store).latest()
        if latest is None:
            raise NotFoundError(f"no inkpen database at {store.url}")
        return require_live(latest, store.url).manifest.merge_operators


def forget_merge_operator(url: str | ObjectStore, name: str) -> None:
    """Retire the merge operator ``name`` that the database at ``url`` records, so that
    ``inkpen.open(url)`` no longer asks for it.

    Safe whenever no writer is open: stored values are folded already (the journal holds no
    operands), so nothing written needs the operator. Refused with :class:`UsageError`,
    changing nothing, when the database does not record ``name``, and while a writer holds the
    database (its writer checkpoint is in the manifest: a writer that is open, or one that
    crashed and has not been followed by another open and close), since that writer may go on
    merging with it. A later merge with the name records it again.
    """
    check_operator_name(name, "merge operator name")
    with _store(url, must_exist=True, what="url") as store:
        manifests = ManifestStore(store)
        where = store.url

        def change(versioned: VersionedManifest) -> Manifest:
            manifest = require_live(versioned, where).manifest
            if name not in manifest.merge_operators:
                recorded = ", ".join(repr(n) for n in manifest.merge_operators) or "none"
                raise UsageError(
                    f"the database at {where} records no merge operator {name!r} (recorded: "
                    f"{recorded}); nothing was changed"
                )
            writers = [cp for cp in manifest.checkpoints if cp.kind == KIND_WRITER]
            if writers:
                epoch = writers[0].metadata.get("epoch", "?")
                raise UsageError(
                    f"a writer holds the database at {where} (writer epoch {epoch}), and may "
                    f"merge with {name!r}; nothing was changed. Close it and try again. If "
                    "that writer crashed, open the database for writing once and close it (any "
                    "inkpen.open, or a command that writes such as `inkpen compact URL`), "
                    "which clears its mark"
                )
            kept = tuple(n for n in manifest.merge_operators if n != name)
            return replace(manifest, merge_operators=kept)

        manifests.update_landed(
            change,
            lambda latest: name not in latest.merge_operators,
            event="merge.operator_forget_landed_below_latest",
            subject=f"forgetting merge operator {name!r}",
            operator=name,
        )
    log.info("merge.operator_forgotten", url=where, operator=name)


def restore(
    backup: str | ObjectStore,
    dest: str | ObjectStore,
    checkpoint: str | None = None,
    **options: Any,
) -> CopyReport:
    """Make the empty ``dest`` a working database holding ``backup``'s objects.

    Copies ``backup`` as :func:`backup` does (refusing a ``dest`` that already holds a database:
    restore never merges into one), then opens ``dest`` once as a Bookie, which rebuilds its
    ledger from the journal, and closes it. ``options`` go to that open (see
    :class:`~inkpen.Options`). An interrupted restore resumes when called again.
    """
    check_text("checkpoint", checkpoint, optional=True)
    check_distinct_locations(backup, dest, what="restore")
    with (
        _store(backup, must_exist=True, what="backup") as source,
        _store(dest, must_exist=False, what="dest") as target,
    ):
        report = copy_database(source, target, checkpoint=checkpoint, fresh=True)
        latest = ManifestStore(target).latest()
        if latest is not None and latest.manifest.head_only is not None:
            options.setdefault("head_only", latest.manifest.head_only)  # a copy keeps its mode
        given = options.get("merge_operators", {})
        if latest is not None and latest.manifest.merge_operators and isinstance(given, Mapping):
            # The open only rebuilds the ledger and merges nothing: the recorded operators
            # need not be given (values in the journal are folded already).
            standing_in = stand_in_operators(latest.manifest.merge_operators)
            options["merge_operators"] = {**standing_in, **given}
        with _bookie.open(target, None, **options):
            pass
    return report


def destroy(url: str | ObjectStore, *, soft: bool = False) -> None:
    """Destroy the database at ``url``; cannot be undone. Fences any live writer.

    Hard (``soft=False``, the default, as for ``inkpen destroy``) removes every object now and is
    refused (:class:`UsageError`, nothing changed) while live checkpoints exist, so no holder of
    one loses its files. ``soft=True`` marks the database destroyed at once and leaves the
    removal to GC, after ``destroy_grace`` and once no checkpoint is live. Destroying a destroyed
    database again is allowed (a hard call finishes an interrupted one).
    """
    check_flag("soft", soft)
    with _store(url, must_exist=True, what="url") as store:
        manifests = ManifestStore(store)
        latest = manifests.latest()
        now = time.time()
        if not soft and latest is not None and latest.manifest.destroyed_at is None:
            live = latest.manifest.live_checkpoints(now)
            if live:
                listed = "; ".join(
                    f"{cp.id} ({cp.kind or 'named'}, {_expires(cp.expire_time, now)})"
                    for cp in live
                )
                raise UsageError(
                    f"the database at {store.url} has live checkpoints: {listed}. A hard destroy "
                    f"would pull their files from under their holders: delete them (`inkpen "
                    f"checkpoint delete URL ID`), wait for them to expire, or destroy softly "
                    "(soft=True, `inkpen destroy --soft`)"
                )
        _destroy(store, soft=soft, now=now)


def _expires(at: float | None, now: float) -> str:
    if at is None:
        return "never expires"
    seconds = at - now
    if seconds < 120:
        return f"expires in {max(0, int(seconds))}s"
    if seconds < 7200:
        return f"expires in {int(seconds // 60)}m"
    return f"expires in {seconds / 3600:.1f}h"


def list_databases(url: str | ObjectStore, *, include_destroyed: bool = False) -> list[str]:
    """The names of the live databases directly under ``url`` (``url/<name>`` holds a manifest),
    in name order. A missing local directory holds none.

    A database destroyed softly (``destroy(soft=True)``, ``inkpen destroy --soft``) keeps its
    manifest until GC removes it, but it is no longer a database one can open: it is left out,
    unless ``include_destroyed=True`` asks for it too.
    """
    check_flag("include_destroyed", include_destroyed)
    if isinstance(url, str):
        parsed = parse_store_url(url)
        if backend_of(parsed).local and not os.path.isdir(parsed.location):
            return []
    names: list[str] = []
    with _store(url, must_exist=False, what="url") as root:
        token: str | None = None
        while True:
            page = root.list_page("", token=token, limit=1)
            if not page.objects:
                return names
            name = page.objects[0].key.split("/", 1)[0]
            state = "none" if name == page.objects[0].key else _child_state(root, name)
            if state == "live" or (include_destroyed and state == "destroyed"):
                names.append(name)
            token = name + "0"  # "0" follows "/": the next page starts after this name's keys


def _child_state(root: ObjectStore, name: str) -> str:
    """``"live"``, ``"destroyed"`` or ``"none"`` (no manifest) for the database ``root/name``."""
    for _ in range(3):
        prefix = f"{name}/"
        ids = [
            found
            for info in root.list(f"{prefix}{MANIFEST_PREFIX}")
            if (found := parse_manifest_key(info.key[len(prefix) :])) is not None
        ]
        if not ids:
            return "none"
        key = prefix + manifest_key(max(ids))
        try:
            manifest = decode(root.get(key), key)
        except NotFoundError:
            continue  # collected by GC since the listing: list again
        return "live" if manifest.destroyed_at is None else "destroyed"
    return "none"
