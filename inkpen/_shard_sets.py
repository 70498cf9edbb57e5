"""A data set's checkpoints, through the manifest layer of each shard (no handle needed).

A **data-set checkpoint** is one checkpoint in every shard, all with the same id (and name, if
given), metadata ``{"kind": "data-set", "shards": N}``. Each pins its shard as an ordinary
checkpoint does: every write that shard acknowledged before its checkpoint landed, and no file
it needs is collected while it lives. The shards' checkpoints are made in parallel, each by one
compare-and-swap update of its shard's manifest; they fence nobody. They are **not** one cut
across the shards: the shards have no common clock, so a write acknowledged by shard 2 while the
checkpoints were being made may be in it while an earlier write to shard 5 is not. What a
data-set checkpoint gives is a state of each shard that stays readable (``inkpen.open_reader(
shard_url(url, i), checkpoint=ID)``), copyable (``inkpen.backup(url, dest, checkpoint=ID)``)
and protected from GC, under one id, listed and deleted together.

:func:`create_checkpoint` makes one (removing the shards' checkpoints it made if any shard
refuses, so none is left half made by an error it saw); :func:`list_checkpoints` groups the
shards' data-set checkpoints by id (a checkpoint missing from some shards, which a crash during
create or delete leaves, is listed with the shards that hold it); :func:`refresh_checkpoint`
and :func:`delete_checkpoint` act on every shard holding it; :func:`resolve_checkpoint` finds a
data-set checkpoint by id or by name.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import delete_checkpoint as _delete_one
from inkpen.manifest.checkpoints import ensure_checkpoint
from inkpen.manifest.checkpoints import refresh_checkpoint as _refresh_one
from inkpen.manifest.model import CHECKPOINT_KIND, Checkpoint
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store

from ._shard_layout import read_descriptor, shard_url
from .checks import check_seconds, check_text
from .errors import NotFoundError, UsageError

log = get_logger("inkpen.shards")

KIND_DATA_SET = "data-set"
"""The ``kind`` of a data-set checkpoint's checkpoints (see the module docstring)."""
SHARD_WORKERS = 8
"""Shards worked on at once by the functions here."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DataSetCheckpoint:
    """One data-set checkpoint: its id and name, and each shard's checkpoint by shard number.

    ``complete`` is False when some shards lack it (an interrupted create or delete): such a
    checkpoint pins only the shards listed; delete it and make another."""

    id: str
    name: str | None
    shards: int
    """The data set's shard count."""
    checkpoints: tuple[tuple[int, Checkpoint], ...]
    """(shard number, that shard's checkpoint), in shard order."""

    @property
    def complete(self) -> bool:
        return len(self.checkpoints) == self.shards

    @property
    def create_time(self) -> float:
        """When the first shard's checkpoint was made (seconds since the epoch)."""
        return min(cp.create_time for _i, cp in self.checkpoints)

    @property
    def expire_time(self) -> float | None:
        """When the first shard's checkpoint expires (None: none of them ever does)."""
        times = [cp.expire_time for _i, cp in self.checkpoints if cp.expire_time is not None]
        return min(times) if times else None

    def is_live(self, now: float) -> bool:
        """Whether every shard's checkpoint is live at ``now``."""
        return self.complete and all(cp.is_live(now) for _i, cp in self.checkpoints)


class _CopyFigures(Protocol):
    """What a shard's copy report (a backup's or a restore's) counts."""

    @property
    def files(self) -> int: ...
    @property
    def files_copied(self) -> int: ...
    @property
    def bytes_copied(self) -> int: ...
    @property
    def files_kept(self) -> int: ...
    @property
    def files_removed(self) -> int: ...


class ShardTotals:
    """The totals of a data set's copy report over its ``shards`` (a base of the frozen report
    classes; it holds no state of its own)."""

    __slots__ = ()
    shards: tuple[_CopyFigures, ...]

    @property
    def files(self) -> int:
        return sum(r.files for r in self.shards)

    @property
    def files_copied(self) -> int:
        return sum(r.files_copied for r in self.shards)

    @property
    def bytes_copied(self) -> int:
        return sum(r.bytes_copied for r in self.shards)

    @property
    def files_kept(self) -> int:
        return sum(r.files_kept for r in self.shards)

    @property
    def files_removed(self) -> int:
        return sum(r.files_removed for r in self.shards)


def each_shard(shards: int, work: Callable[[int], T]) -> list[T]:
    """``work(i)`` for every shard, :data:`SHARD_WORKERS` at a time; the answers in shard order.
    The first failure is raised once every shard has finished."""
    if shards <= 1:
        return [work(i) for i in range(shards)]
    with concurrent.futures.ThreadPoolExecutor(
        min(SHARD_WORKERS, shards), thread_name_prefix="inkpen-shards"
    ) as pool:
        futures = [pool.submit(work, i) for i in range(shards)]
        concurrent.futures.wait(futures)
    first = next((f.exception() for f in futures if f.exception() is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]


@contextlib.contextmanager
def shard_store(url: str, index: int) -> Iterator[ObjectStore]:
    """The store of shard ``index`` of the data set at ``url``."""
    store = open_store(shard_url(url, index))
    try:
        yield store
    finally:
        store.close()


def create_checkpoint(
    url: str, lifetime: float | None = None, *, name: str | None = None
) -> DataSetCheckpoint:
    """Make a data-set checkpoint of the data set at ``url`` (see the module docstring):
    ``lifetime`` seconds (None: until deleted), under ``name`` if given."""
    life = None if lifetime is None else check_seconds("lifetime", lifetime, above_minimum=True)
    check_text("checkpoint name", name, optional=True)
    count = read_descriptor(url).shards
    checkpoint_id = str(uuid.uuid4())
    metadata = {CHECKPOINT_KIND: KIND_DATA_SET, "shards": str(count)}

    def one(index: int) -> Checkpoint:
        with shard_store(url, index) as store:
            return ensure_checkpoint(
                ManifestStore(store), checkpoint_id, lifetime=life, name=name, metadata=metadata
            )

    made: dict[int, Checkpoint] = {}
    failures: list[BaseException] = []

    def attempt(index: int) -> None:
        try:
            made[index] = one(index)
        except BaseException as exc:
            failures.append(exc)

    each_shard(count, attempt)
    if failures:
        _undo(url, checkpoint_id, sorted(made))
        raise failures[0]
    log.info("shards.checkpoint.created", url=url, checkpoint=checkpoint_id, shards=count)
    return DataSetCheckpoint(checkpoint_id, name, count, tuple(sorted(made.items())))


def _undo(url: str, checkpoint_id: str, indexes: list[int]) -> None:
    """Delete the shards' checkpoints a failed create made (best effort: a checkpoint that
    cannot be deleted now is listed as incomplete, and expires if it was given a lifetime)."""
    for index in indexes:
        try:
            with shard_store(url, index) as store:
                _delete_one(ManifestStore(store), checkpoint_id)
        except Exception as exc:  # the create's own failure is what the caller needs to see
            log.warning(
                "shards.checkpoint.undo_failed",
                url=url,
                checkpoint=checkpoint_id,
                shard=index,
                error=str(exc),
            )


def list_checkpoints(url: str) -> tuple[DataSetCheckpoint, ...]:
    """The data-set checkpoints of the data set at ``url``, expired ones too, oldest first."""
    count = read_descriptor(url).shards

    def held(index: int) -> tuple[Checkpoint, ...]:
        with shard_store(url, index) as store:
            latest = ManifestStore(store).latest()
        if latest is None:
            return ()
        return tuple(cp for cp in latest.manifest.checkpoints if cp.kind == KIND_DATA_SET)

    by_id: dict[str, list[tuple[int, Checkpoint]]] = {}
    for index, found in enumerate(each_shard(count, held)):
        for cp in found:
            by_id.setdefault(cp.id, []).append((index, cp))
    listed = [
        DataSetCheckpoint(cp_id, held_by[0][1].name, count, tuple(held_by))
        for cp_id, held_by in by_id.items()
    ]
    return tuple(sorted(listed, key=lambda c: (c.create_time, c.id)))


def resolve_checkpoint(url: str, given: str) -> DataSetCheckpoint:
    """The data-set checkpoint whose id, or else whose name, is ``given``."""
    check_text("checkpoint", given)
    found = list_checkpoints(url)
    for checkpoint in found:
        if checkpoint.id == given:
            return checkpoint
    named = [cp for cp in found if cp.name == given]
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(cp.id for cp in named)
        raise UsageError(f"{len(named)} data-set checkpoints of {url} are named {given!r} ({ids})")
    raise NotFoundError(
        f"no data-set checkpoint with the id or name {given!r} in {url}; `inkpen checkpoint list "
        f"{url}` lists them"
    )


def refresh_checkpoint(url: str, checkpoint: str, lifetime: float | None) -> DataSetCheckpoint:
    """Move the expiry of every shard's part of the data-set checkpoint ``checkpoint`` (id or
    name) to now + ``lifetime`` (None: never)."""
    life = None if lifetime is None else check_seconds("lifetime", lifetime, above_minimum=True)
    found = resolve_checkpoint(url, checkpoint)
    now = time.time()

    def one(pair: tuple[int, Checkpoint]) -> tuple[int, Checkpoint]:
        index, _old = pair
        with shard_store(url, index) as store:
            return index, _refresh_one(ManifestStore(store), found.id, lifetime=life, now=now)

    pairs = list(found.checkpoints)
    done = each_shard(len(pairs), lambda i: one(pairs[i]))
    return DataSetCheckpoint(found.id, found.name, found.shards, tuple(done))


def delete_checkpoint(url: str, checkpoint: str) -> DataSetCheckpoint:
    """Delete the data-set checkpoint ``checkpoint`` (id or name) from every shard holding it;
    answers what was deleted. A shard that no longer holds it is left as it is."""
    found = resolve_checkpoint(url, checkpoint)
    pairs = list(found.checkpoints)

    def one(position: int) -> None:
        index = pairs[position][0]
        with shard_store(url, index) as store, contextlib.suppress(NotFoundError):
            _delete_one(ManifestStore(store), found.id)

    each_shard(len(pairs), one)
    log.info("shards.checkpoint.deleted", url=url, checkpoint=found.id)
    return found
