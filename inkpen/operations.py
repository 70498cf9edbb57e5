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

Each also takes the URL of a sharded data set (:mod:`inkpen.shards`) and works on every shard,
several at once: a backup or restore gives the destination the source's descriptor and copies
shard ``i`` into the destination's shard ``i`` (at a data-set checkpoint with ``checkpoint=``,
each shard at its part of it), answering a :class:`DataSetCopyReport`; a destroy destroys every
shard, and a hard one then the descriptor (after a soft one, ``inkpen gc`` of the data set
removes the descriptor once GC has removed every shard); :func:`list_databases` lists data sets
beside databases, as :class:`DatabaseName` values whose ``shards`` says which they are.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from inkpen.logs import get_logger
from inkpen.manifest.copies import CopyReport, copy_database
from inkpen.manifest.destroy import destroy as _destroy
from inkpen.manifest.destroy import remove_empty_directories
from inkpen.manifest.model import KIND_WRITER, Manifest, VersionedManifest, decode
from inkpen.manifest.paths import DATA_SET_KEY, MANIFEST_PREFIX, manifest_key, parse_manifest_key
from inkpen.manifest.store import ManifestStore, RootState, require_live
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.url import backend_of, check_distinct_locations, parse_store_url

from . import bookie as _bookie
from ._shard_layout import (
    Descriptor,
    adopt_descriptor,
    is_data_set,
    read_descriptor,
    shard_name,
    shard_url,
)
from ._shard_sets import ShardTotals, each_shard, resolve_checkpoint
from .checks import check_flag, check_text
from .errors import CorruptionError, NotFoundError, UsageError
from .options import MergeOperator, check_operator_name

__all__ = [
    "CopyReport",
    "DataSetCopyReport",
    "DatabaseName",
    "backup",
    "destroy",
    "forget_merge_operator",
    "list_databases",
    "recorded_merge_operators",
    "restore",
]

log = get_logger("inkpen.manifest")


@dataclass(frozen=True, slots=True)
class DataSetCopyReport(ShardTotals):
    """What one copy of a data set did (:func:`backup`, :func:`restore`): each shard's
    :class:`CopyReport`, in shard order, and the totals."""

    source: str
    destination: str
    checkpoint: str | None
    """The data-set checkpoint the copy was read at (None: each shard at one of its own)."""
    shards: tuple[CopyReport, ...]
    seconds: float
    """Wall time of the whole copy (the shards are copied several at once)."""


class DatabaseName(str):
    """A name :func:`list_databases` answers: a ``str`` (the child's name), marked with what it
    is: ``shards`` is the shard count of a sharded data set, None for a plain database."""

    __slots__ = ("shards",)
    shards: int | None

    def __new__(cls, name: str, shards: int | None = None) -> DatabaseName:
        made = super().__new__(cls, name)
        made.shards = shards
        return made

    @property
    def is_data_set(self) -> bool:
        """Whether the name is a sharded data set's (open it with ``inkpen.shards.open``)."""
        return self.shards is not None

    def __repr__(self) -> str:
        if self.shards is None:
            return str.__repr__(self)
        return f"DatabaseName({str.__repr__(self)}, shards={self.shards})"


def _data_set(url: str | ObjectStore) -> Descriptor | None:
    """The descriptor of the data set at ``url``; None when ``url`` is not one (a database,
    nothing, or an ObjectStore: data sets are named by URL, their shards under it)."""
    if not isinstance(url, str) or not is_data_set(url):
        return None
    return read_descriptor(url)


def _data_set_url(url: str | ObjectStore, what: str) -> str:
    if not isinstance(url, str):
        raise UsageError(
            f"{what} is a sharded data set's destination: give it as a store URL (the shards "
            f"go under it), not an {type(url).__name__}"
        )
    return url


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
) -> CopyReport | DataSetCopyReport:
    """Copy the database at ``url`` into ``dest`` without opening a writer; returns the report.

    ``dest`` is an empty location or an earlier backup (then only new files are copied and files
    it no longer needs are removed). The copy reads a checkpoint of its own, held while it runs,
    or the live checkpoint ``checkpoint`` (then nothing at all is written to ``url``). Fences
    nobody: an application writing ``url`` keeps running. Files are hard links on one local
    filesystem and server-side copies on S3. The backup is a database: open it with
    ``inkpen.open_reader`` or make a working copy of it with :func:`restore`.

    A data set's URL: every shard is copied (several at once) into a data set at ``dest``
    (``inkpen.shards.open`` opens it), each at a checkpoint of its own or at its part of the
    data-set checkpoint ``checkpoint`` (id or name); answers a :class:`DataSetCopyReport`.
    """
    check_text("checkpoint", checkpoint, optional=True)
    check_distinct_locations(url, dest, what="back up")
    descriptor = _data_set(url)
    if descriptor is not None:
        assert isinstance(url, str)
        return _copy_data_set(url, _data_set_url(dest, "dest"), descriptor, checkpoint)
    with (
        _store(url, must_exist=True, what="url") as source,
        _store(dest, must_exist=False, what="dest") as target,
    ):
        return copy_database(source, target, checkpoint=checkpoint)


def _copy_data_set(
    url: str,
    dest: str,
    descriptor: Descriptor,
    checkpoint: str | None,
    *,
    fresh: bool = False,
    after: Callable[[str], object] | None = None,
) -> DataSetCopyReport:
    """Copy every shard of the data set at ``url`` into the same shard of ``dest``, which is
    given the descriptor first; at the data-set checkpoint ``checkpoint`` (id or name) if given.
    ``after(shard_url)``: called once a shard is copied (a restore rebuilds it)."""
    found = None if checkpoint is None else resolve_checkpoint(url, checkpoint)
    if found is not None and not found.complete:
        held = ", ".join(str(i) for i, _cp in found.checkpoints)
        raise UsageError(
            f"the data-set checkpoint {found.id} of {url} is held by shards {held} only (an "
            "interrupted create or delete): delete it and make another"
        )
    started = time.monotonic()
    skip: set[int] = set()
    if fresh:
        skip = _restored_shards(dest, descriptor)
    adopt_descriptor(dest, descriptor)

    def one(index: int) -> CopyReport | None:
        if index in skip:
            return None
        target_url = shard_url(dest, index)
        with (
            _store(shard_url(url, index), must_exist=True, what="url") as source,
            _store(target_url, must_exist=False, what="dest") as target,
        ):
            copied = copy_database(
                source, target, checkpoint=None if found is None else found.id, fresh=fresh
            )
        if after is not None:
            after(target_url)
        return copied

    reports = each_shard(descriptor.shards, one)
    return DataSetCopyReport(
        source=url,
        destination=dest,
        checkpoint=None if found is None else found.id,
        shards=tuple(r for r in reports if r is not None),
        seconds=round(time.monotonic() - started, 3),
    )


def _restored_shards(dest: str, descriptor: Descriptor) -> set[int]:
    """The shards an interrupted restore of a data set into ``dest`` finished (each holds a
    database); a data set whose every shard holds one is not an interrupted restore: refused."""
    if not is_data_set(dest):
        return set()
    if read_descriptor(dest).shards != descriptor.shards:
        return set()  # adopt_descriptor refuses it, naming both counts

    def holds(index: int) -> bool:
        with _store(shard_url(dest, index), must_exist=False, what="dest") as store:
            return ManifestStore(store).check_root_state() is RootState.DATABASE

    held = each_shard(descriptor.shards, holds)
    if all(held):
        raise UsageError(
            f"{dest} already holds a data set; restore into an empty location, or destroy that "
            f"data set first (inkpen destroy {dest} --yes)"
        )
    return {i for i, done in enumerate(held) if done}


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
    with it that lands. Given a sharded data set, the names any of its shards records."""
    descriptor = _data_set(url)
    if descriptor is not None:
        assert isinstance(url, str)
        per_shard = each_shard(
            descriptor.shards, lambda i: recorded_merge_operators(shard_url(url, i))
        )
        return tuple(sorted({name for names in per_shard for name in names}))
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

    Given a sharded data set, the name is retired in every shard that records it; the shards
    are checked first (refused, changing nothing, when none records it or a writer holds one
    that does), then changed one by one.
    """
    check_operator_name(name, "merge operator name")
    descriptor = _data_set(url)
    if descriptor is None:
        _forget_in_database(url, name)
        return
    assert isinstance(url, str)
    urls = [shard_url(url, i) for i in range(descriptor.shards)]
    latest = each_shard(descriptor.shards, lambda i: _live_manifest(urls[i]))
    holding = [i for i, m in enumerate(latest) if name in m.merge_operators]
    if not holding:
        raise UsageError(
            f"no shard of the data set at {url} records a merge operator {name!r}; nothing "
            "was changed"
        )
    held = [i for i in holding if any(cp.kind == KIND_WRITER for cp in latest[i].checkpoints)]
    if held:
        raise UsageError(
            f"a writer holds shard {held[0]} of the data set at {url} ({urls[held[0]]}), and "
            f"may merge with {name!r}; nothing was changed. Close it and try again"
        )
    for i in holding:
        _forget_in_database(urls[i], name)


def _live_manifest(url: str) -> Manifest:
    with _store(url, must_exist=True, what="url") as store:
        latest = ManifestStore(store).latest()
        if latest is None:
            raise NotFoundError(f"no inkpen database at {store.url}")
        return require_live(latest, store.url).manifest


def _forget_in_database(url: str | ObjectStore, name: str) -> None:
    """Retire ``name`` in one database (see :func:`forget_merge_operator`)."""
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
) -> CopyReport | DataSetCopyReport:
    """Make the empty ``dest`` a working database holding ``backup``'s objects.

    Copies ``backup`` as :func:`backup` does (refusing a ``dest`` that already holds a database:
    restore never merges into one), then opens ``dest`` once as a Bookie, which rebuilds its
    ledger from the journal, and closes it. ``options`` go to that open (see
    :class:`~inkpen.Options`). An interrupted restore resumes when called again.

    A data set's URL (a backup of one, or any data set): a new data set at ``dest`` with its
    descriptor, every shard restored so (several at once; at the data-set checkpoint
    ``checkpoint`` if given); answers a :class:`DataSetCopyReport`.
    """
    check_text("checkpoint", checkpoint, optional=True)
    check_distinct_locations(backup, dest, what="restore")
    descriptor = _data_set(backup)
    if descriptor is not None:
        assert isinstance(backup, str)
        return _copy_data_set(
            backup,
            _data_set_url(dest, "dest"),
            descriptor,
            checkpoint,
            fresh=True,
            after=lambda shard: _rebuild(shard, dict(options)),
        )
    with (
        _store(backup, must_exist=True, what="backup") as source,
        _store(dest, must_exist=False, what="dest") as target,
    ):
        report = copy_database(source, target, checkpoint=checkpoint, fresh=True)
        _rebuild(target, options)
    return report


def _rebuild(target: str | ObjectStore, options: dict[str, Any]) -> None:
    """Open a restored copy once as a Bookie, which rebuilds its ledger, and close it."""
    with _store(target, must_exist=False, what="dest") as store:
        latest = ManifestStore(store).latest()
        if latest is not None and latest.manifest.head_only is not None:
            options.setdefault("head_only", latest.manifest.head_only)  # a copy keeps its mode
        given = options.get("merge_operators", {})
        if latest is not None and latest.manifest.merge_operators and isinstance(given, Mapping):
            # The open only rebuilds the ledger and merges nothing: the recorded operators
            # need not be given (values in the journal are folded already).
            standing_in = stand_in_operators(latest.manifest.merge_operators)
            options["merge_operators"] = {**standing_in, **given}
        with _bookie.open(store, None, **options):
            pass


def destroy(url: str | ObjectStore, *, soft: bool = False) -> None:
    """Destroy the database at ``url``; cannot be undone. Fences any live writer.

    Hard (``soft=False``, the default, as for ``inkpen destroy``) removes every object now and is
    refused (:class:`UsageError`, nothing changed) while live checkpoints exist, so no holder of
    one loses its files. ``soft=True`` marks the database destroyed at once and leaves the
    removal to GC, after ``destroy_grace`` and once no checkpoint is live. Destroying a destroyed
    database again is allowed (a hard call finishes an interrupted one).

    A data set's URL: every shard is destroyed so; a hard destroy is refused (nothing changed)
    while any shard has live checkpoints, and removes the descriptor last. After a soft one,
    ``inkpen gc URL`` of the data set removes the descriptor once GC has removed every shard.
    """
    check_flag("soft", soft)
    descriptor = _data_set(url)
    if descriptor is not None:
        assert isinstance(url, str)
        _destroy_data_set(url, descriptor.shards, soft=soft)
        return
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


def _destroy_data_set(url: str, shards: int, *, soft: bool) -> None:
    now = time.time()

    def live(index: int) -> list[str]:
        with _store(shard_url(url, index), must_exist=False, what="url") as store:
            latest = ManifestStore(store).latest()
        if latest is None or latest.manifest.destroyed_at is not None:
            return []
        return [
            f"shard {index}: {cp.id} ({cp.kind or 'named'}, {_expires(cp.expire_time, now)})"
            for cp in latest.manifest.live_checkpoints(now)
        ]

    if not soft:
        held = [line for lines in each_shard(shards, live) for line in lines]
        if held:
            raise UsageError(
                f"the data set at {url} has live checkpoints: {'; '.join(held[:8])}"
                f"{'' if len(held) <= 8 else f' (and {len(held) - 8} more)'}. A hard destroy "
                "would pull their files from under their holders: delete them (`inkpen "
                "checkpoint delete URL ID`), wait for them to expire, or destroy softly "
                "(soft=True, `inkpen destroy --soft`)"
            )

    def one(index: int) -> None:
        with _store(shard_url(url, index), must_exist=False, what="url") as store:
            if ManifestStore(store).check_root_state() is RootState.EMPTY:
                return  # removed already (an interrupted hard destroy, or GC after a soft one)
            _destroy(store, soft=soft, now=now)

    each_shard(shards, one)
    if not soft:
        remove_descriptor(url)


def remove_descriptor(url: str) -> bool:
    """Remove the descriptor of a data set whose every shard is gone (a hard destroy, or GC
    after a soft one), and the root's empty directories; True if it did. A data set with a
    shard left is kept as it is."""
    count = read_descriptor(url).shards

    def gone(index: int) -> bool:
        with _store(shard_url(url, index), must_exist=False, what="url") as store:
            return not store.list_page("", limit=1).objects

    if not all(each_shard(count, gone)):
        return False
    with _store(url, must_exist=False, what="url") as root:
        with contextlib.suppress(NotFoundError):
            root.delete(DATA_SET_KEY)
        remove_empty_directories(root)
    return True


def _expires(at: float | None, now: float) -> str:
    if at is None:
        return "never expires"
    seconds = at - now
    if seconds < 120:
        return f"expires in {max(0, int(seconds))}s"
    if seconds < 7200:
        return f"expires in {int(seconds // 60)}m"
    return f"expires in {seconds / 3600:.1f}h"


def list_databases(
    url: str | ObjectStore, *, include_destroyed: bool = False
) -> list[DatabaseName]:
    """The names of the live databases and data sets directly under ``url`` (``url/<name>``
    holds a manifest, or a data set's descriptor), in name order. A missing local directory
    holds none.

    Each name is a :class:`DatabaseName`, a ``str`` whose ``shards`` is the shard count of a
    sharded data set (open it with ``inkpen.shards.open``) and None for a plain database.

    A database destroyed softly (``destroy(soft=True)``, ``inkpen destroy --soft``) keeps its
    manifest until GC removes it, but it is no longer a database one can open: it is left out,
    unless ``include_destroyed=True`` asks for it too; so is a data set any of whose shards is
    destroyed or gone.
    """
    check_flag("include_destroyed", include_destroyed)
    if isinstance(url, str):
        parsed = parse_store_url(url)
        if backend_of(parsed).local and not os.path.isdir(parsed.location):
            return []
    names: list[DatabaseName] = []
    with _store(url, must_exist=False, what="url") as root:
        token: str | None = None
        while True:
            page = root.list_page("", token=token, limit=1)
            if not page.objects:
                return names
            first = page.objects[0].key
            name = first.split("/", 1)[0]
            shards: int | None = None
            if name == first:
                state = "none"
            elif first == f"{name}/{DATA_SET_KEY}":  # sorts before the shards' keys
                state, shards = _data_set_state(root, name)
            else:
                state = _child_state(root, name)
            if state == "live" or (include_destroyed and state == "destroyed"):
                names.append(DatabaseName(name, shards))
            token = name + "0"  # "0" follows "/": the next page starts after this name's keys


def _data_set_state(root: ObjectStore, name: str) -> tuple[str, int | None]:
    """``("live" | "destroyed" | "none", shard count)`` of the data set ``root/name``: live when
    every shard is; destroyed when any shard is destroyed or gone (a destroy under way)."""
    key = f"{name}/{DATA_SET_KEY}"
    try:
        descriptor = Descriptor.decode(root.get(key), f"{root.url} ({key})")
    except (NotFoundError, CorruptionError):
        return "none", None
    states = each_shard(descriptor.shards, lambda i: _child_state(root, f"{name}/{shard_name(i)}"))
    if all(state == "live" for state in states):
        return "live", descriptor.shards
    return "destroyed", descriptor.shards


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
