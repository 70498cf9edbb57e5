"""What a ShardedBookie hands out: snapshots, transactions, hot backups, summed metrics.

- :class:`ShardedSnapshot`: one isolated view per shard, taken together (in parallel) when
  ``book.snapshot()`` is called: a Bookie snapshot of each shard the handle writes, a Reader at
  a checkpoint of its own of each other shard (``inkpen.shards.open_reader`` gives one of
  Readers alone: at a data-set checkpoint, or each at a checkpoint of its own). Each shard's view
  is one consistent state of that shard; together they are **not** one cut across the shards:
  the shards have no common clock,
  and a write acknowledged by one shard while the views were being taken may be in the snapshot
  while an earlier write to another shard is not. Reads span the shards as the handle's do.
- :class:`ShardedTransaction`: a transaction of the one shard its first key routes to (a
  Bookie transaction there, begun at that first key); a key routing to another shard is a
  :class:`~inkpen.UsageError` naming both shards, and the transaction goes on unchanged.
- :class:`ShardedHotBackup`: ``book.hot_backup()`` prepares every shard at once (a Bookie hot
  backup of each shard the handle writes, a checkpoint of each other shard) and ``backup(dest)``
  copies each into the same shard of a data set at ``dest`` with the source's descriptor, which
  ``inkpen.shards.open(dest)`` opens.
- :func:`sum_metrics`: the :class:`~inkpen.Metrics` of several shards as one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from inkpen.actors.engine.hot_backup import BackupReport, HotBackup
from inkpen.actors.journal.changes import ChangeMaker, as_bytes
from inkpen.actors.kernel.meter import LATENCY_BOUNDS, Histogram, Metrics
from inkpen.actors.read.feed import Change, GapPolicy
from inkpen.actors.read.path import Head
from inkpen.formats.keys import MAX_KEY_BYTES
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import create_checkpoint, delete_checkpoint
from inkpen.manifest.copies import copy_database
from inkpen.manifest.model import CHECKPOINT_KIND
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.objectstore.url import check_distinct_locations

from ._shard_layout import Descriptor, adopt_descriptor, shard_url
from ._shard_reads import ShardedReads, ShardPool
from ._shard_sets import ShardTotals, each_shard
from .batch import IndexSpecs
from .errors import NotFoundError, UsageError
from .read_api import FoldIterator, ReadAPI
from .reader import Reader
from .snapshot import Snapshot
from .transaction import Transaction

log = get_logger("inkpen.shards")

HOLD_SECONDS = 3600.0
"""How long a hot backup's checkpoint of a shard this handle does not write lives, should the
backup be neither taken nor closed (a crash): it is deleted as soon as the copy ends."""


# -- snapshots ------------------------------------------------------------------------------------


class ShardedSnapshot(ShardedReads):
    """An isolated read-only view of every shard (see the module docstring); a context manager.
    Close it (or leave its ``with`` block) to release what it holds."""

    def __init__(
        self,
        url: str,
        parts: Mapping[int, Snapshot | Reader],
        pool: ShardPool,
        *,
        ledger_only: bool,
        owns_pool: bool = False,
    ) -> None:
        self._url = url
        self._parts = dict(parts)
        self._n = len(self._parts)
        self._pool = pool
        self._owns_pool = owns_pool
        self._ledger_only = ledger_only
        self._closed = False

    @property
    def ledger_only(self) -> bool:
        """A snapshot of the ledger alone (``book.snapshot(ledger_only=True)``): keys, heads,
        index queries and buckets, no values."""
        return self._ledger_only

    @property
    def url(self) -> str:
        """The data set's root URL."""
        return self._url

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this snapshot is closed; take a new one with book.snapshot()")

    def _check_values(self, what: str) -> None:
        if self._ledger_only:
            raise UsageError(
                f"{what}: this snapshot is ledger_only: it has no journal; use keys, heads, "
                "index_query, buckets or is_empty, or take a full snapshot for get and objects"
            )

    def _reader(self, index: int) -> ReadAPI:
        self._check_open()
        return self._parts[index]

    def changes(
        self,
        since: int = 0,
        *,
        shard: int,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
    ) -> FoldIterator[Change]:
        """Shard ``shard``'s change feed as this snapshot sees it (SQNs are per shard)."""
        index = self._check_changes(since, shard, bucket, gaps)
        return self._reader(index).changes(since, bucket=bucket, gaps=gaps)

    def close(self) -> None:
        """Release every shard's view. Idempotent."""
        if self._closed:
            return
        self._closed = True
        first: BaseException | None = None
        for part in self._parts.values():
            try:
                part.close()
            except BaseException as exc:
                first = first or exc
        if self._owns_pool:
            self._pool.close()
        if first is not None:
            raise first

    def __enter__(self) -> ShardedSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<inkpen.shards.ShardedSnapshot {self._url} {self._n} shards {state}>"


# -- transactions ---------------------------------------------------------------------------------


class ShardedTransaction:
    """A transaction of the shard its first key routes to (see the module docstring); a
    context manager that commits at the end of its block, or rolls back on an exception.

    Reads (``get``, ``get_many``, ``head``) and writes (``put``, ``delete``) are those of
    :class:`inkpen.Transaction`. Folds are not offered: a fold spans every shard and a
    transaction lives in one; fold the data set (or a snapshot of it) instead."""

    def __init__(
        self,
        isolation: str,
        *,
        route: Callable[[bytes, bytes], int],
        begin: Callable[[int], Transaction],
        checker: ChangeMaker,
    ) -> None:
        self._isolation = isolation
        self._route = route
        self._begin = begin
        self._checker = checker
        self._lock = threading.RLock()
        self._inner: Transaction | None = None
        self._shard: int | None = None
        self._first: tuple[bytes, bytes] | None = None
        self._state = "open"

    @property
    def isolation(self) -> str:
        """``"snapshot"`` or ``"serializable"``."""
        return self._isolation

    @property
    def shard(self) -> int | None:
        """The shard this transaction is in: the one its first key routed to (None before)."""
        return self._shard

    @property
    def snapshot_sqn(self) -> int:
        """The SQN of the snapshot of the transaction's shard (SQNs are per shard). The
        snapshot is taken when the first key chooses the shard: before that there is none."""
        inner = self._inner
        if inner is None:
            raise UsageError(
                "this transaction has no snapshot yet: its first key chooses its shard, and the "
                "snapshot of that shard is taken then"
            )
        return inner.snapshot_sqn

    @property
    def state(self) -> str:
        """``"open"``, ``"committed"``, ``"rolled back"`` or ``"closed with its Bookie"``."""
        inner = self._inner
        return self._state if inner is None else inner.state

    def _check_usable(self) -> None:
        if self.state != "open":
            raise UsageError(
                f"this transaction is {self.state}; start a new one with book.transaction()"
            )

    def _at(self, bucket: str | bytes, key: str | bytes, what: str) -> Transaction:
        """The transaction of the shard (bucket, key) routes to, begun there at the first key."""
        with self._lock:
            self._check_usable()
            b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
            k = as_bytes("key", key, MAX_KEY_BYTES)
            index = self._route(b, k)
            if self._inner is None:
                self._inner = self._begin(index)
                self._shard, self._first = index, (b, k)
                return self._inner
            if index != self._shard:
                assert self._first is not None
                first_b, first_k = self._first
                raise UsageError(
                    f"{what} of {b!r}/{k!r} routes to shard {index}, but this transaction is in "
                    f"shard {self._shard} (chosen by its first key, {first_b!r}/{first_k!r}): a "
                    "transaction's keys all route to one shard. Keep the keys a transaction "
                    "spans together (ShardedBookie.shard_of tells where a key lives), or use "
                    "one transaction per shard"
                )
            return self._inner

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The value as this transaction sees it (see :meth:`inkpen.Transaction.get`)."""
        return self._at(bucket, key, "this get").get(bucket, key)

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The metadata as this transaction sees it (see :meth:`inkpen.Transaction.head`)."""
        return self._at(bucket, key, "this head").head(bucket, key)

    def get_many(self, bucket: str | bytes, keys: Iterable[str | bytes]) -> list[bytes | None]:
        """Values of keys that all route to this transaction's shard (see
        :meth:`inkpen.Transaction.get_many`)."""
        with self._lock:
            self._check_usable()
            if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
                raise UsageError("keys must be a sequence of keys (str or bytes), not one key")
            chosen = list(keys)
            if not chosen:
                as_bytes("bucket", bucket, MAX_KEY_BYTES)
                return []
            b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
            encoded = [as_bytes("key", k, MAX_KEY_BYTES) for k in chosen]
            target = self._shard if self._shard is not None else self._route(b, encoded[0])
            for k in encoded:  # every key checked before the first one begins anything
                if self._route(b, k) != target:
                    self._at(b, k, "this get_many")  # the refusal naming both shards
            inner = self._at(b, encoded[0], "this get_many")
            return inner.get_many(b, encoded)

    def put(
        self,
        bucket: str | bytes,
        key: str | bytes,
        value: bytes,
        *,
        indexes: IndexSpecs = (),
        ttl: float | None = None,
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a put (see :meth:`inkpen.Transaction.put`); written at commit."""
        if self._inner is None:
            indexes = list(indexes)
            self._checker.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn)
        self._at(bucket, key, "this put").put(
            bucket, key, value, indexes=indexes, ttl=ttl, if_sqn=if_sqn
        )

    def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a delete (see :meth:`inkpen.Transaction.delete`); written at commit."""
        if self._inner is None:
            indexes = list(indexes)
            self._checker.delete(bucket, key, indexes, if_sqn=if_sqn)
        self._at(bucket, key, "this delete").delete(bucket, key, indexes=indexes, if_sqn=if_sqn)

    def commit(self) -> None:
        """Write the buffered changes atomically in the transaction's shard (see
        :meth:`inkpen.Transaction.commit`); a transaction that touched no key commits nothing."""
        with self._lock:
            self._check_usable()
            inner = self._inner
            if inner is None:
                self._state = "committed"
                return
        inner.commit()

    def rollback(self) -> None:
        """Discard the buffered changes and end the transaction."""
        with self._lock:
            self._check_usable()
            inner = self._inner
            if inner is None:
                self._state = "rolled back"
                return
        inner.rollback()

    def close(self) -> None:
        """Roll back if still open; otherwise nothing. Idempotent."""
        with self._lock:
            inner = self._inner
            if inner is None:
                if self._state == "open":
                    self._state = "rolled back"
                return
        inner.close()

    def __enter__(self) -> ShardedTransaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if self.state != "open":
            return
        if exc_type is not None:
            self.close()
        else:
            self.commit()

    def __repr__(self) -> str:
        where = "no shard yet" if self._shard is None else f"shard {self._shard}"
        return f"<inkpen.shards.ShardedTransaction {self._isolation}, {where}, {self.state}>"


# -- hot backups ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataSetBackupReport(ShardTotals):
    """What one hot backup of a data set did: each shard's report, in shard order."""

    destination: str
    shards: tuple[BackupReport, ...]
    seconds: float
    """Wall time of the whole backup (the shards are copied in parallel)."""


class ShardedHotBackup:
    """A hot backup of every shard waiting to be copied: call it with a destination URL (once);
    ``close()`` (or the end of its ``with`` block) gives back what it holds without copying."""

    def __init__(
        self, url: str, descriptor: Descriptor, parts: Mapping[int, HotBackup | str]
    ) -> None:
        self._url = url
        self._descriptor = descriptor
        self._parts: dict[int, HotBackup | str] | None = dict(parts)
        """Each shard's HotBackup, or the id of the checkpoint held on a shard not written
        here; None once taken or closed."""
        self._lock = threading.Lock()

    def __call__(self, destination: str) -> DataSetBackupReport:
        with self._lock:
            parts, self._parts = self._parts, None
        if parts is None:
            raise UsageError("this backup was already taken; call book.hot_backup() again")
        try:
            if not isinstance(destination, str):
                raise UsageError(
                    "a data set's backup destination is a store URL (its shards go under it), "
                    f"got {type(destination).__name__}"
                )
            check_distinct_locations(self._url, destination, what="back up")
            started = time.monotonic()
            adopt_descriptor(destination, self._descriptor)
            indexes = sorted(parts)
            reports = each_shard(
                len(indexes), lambda p: self._copy(indexes[p], parts[indexes[p]], destination)
            )
            log.info("shards.backup.finished", url=self._url, dest=destination)
            return DataSetBackupReport(
                destination, tuple(reports), round(time.monotonic() - started, 3)
            )
        finally:
            _release(self._url, parts)

    def _copy(self, index: int, part: HotBackup | str, destination: str) -> BackupReport:
        dest = shard_url(destination, index)
        if isinstance(part, HotBackup):
            return part(dest)
        source, target = open_store(shard_url(self._url, index)), open_store(dest)
        try:
            copied = copy_database(source, target, checkpoint=part)
        finally:
            source.close()
            target.close()
        return BackupReport(
            destination=copied.destination,
            manifest_id=copied.manifest_id,
            files=copied.files,
            files_copied=copied.files_copied,
            bytes_copied=copied.bytes_copied,
            files_kept=copied.files_kept,
            files_removed=copied.files_removed,
            seconds=copied.seconds,
        )

    def close(self) -> None:
        """Give back what the backup holds, without (further) copying. Idempotent."""
        with self._lock:
            parts, self._parts = self._parts, None
        if parts is not None:
            _release(self._url, parts)

    def __enter__(self) -> ShardedHotBackup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold_shard(url: str, index: int) -> str:
    """A checkpoint of shard ``index`` for a hot backup (see :data:`HOLD_SECONDS`); its id."""
    store = open_store(shard_url(url, index))
    try:
        made = create_checkpoint(
            ManifestStore(store),
            lifetime=HOLD_SECONDS,
            name="hot-backup",
            metadata={CHECKPOINT_KIND: "hot-backup"},
        )
    finally:
        store.close()
    return made.id


def _release(url: str, parts: Mapping[int, HotBackup | str]) -> None:
    """Close each shard's HotBackup and delete each checkpoint held (which expires anyway)."""
    for index, part in parts.items():
        if isinstance(part, HotBackup):
            part.close()
            continue
        store = open_store(shard_url(url, index))
        try:
            delete_checkpoint(ManifestStore(store), part)
        except (NotFoundError, UsageError):
            pass  # gone already: nothing held
        except Exception as exc:
            log.warning("shards.backup.release_failed", url=url, shard=index, error=str(exc))
        finally:
            store.close()


# -- metrics --------------------------------------------------------------------------------------


def _zero(field: dataclasses.Field[Any]) -> Any:
    kind = field.type
    if kind in ("int", int):
        return 0
    if kind in ("float", float):
        return 0.0
    if kind in ("bool", bool):
        return False
    if kind in ("Histogram", Histogram):
        return Histogram(LATENCY_BOUNDS, (0,) * (len(LATENCY_BOUNDS) + 1), 0.0)
    if str(kind).startswith("Mapping"):
        return MappingProxyType({})
    if str(kind).startswith("tuple"):
        return ()
    raise AssertionError(f"no zero for the Metrics field {field.name} of type {kind}")


def _combine(name: str, values: Sequence[Any]) -> Any:
    first = values[0]
    if name == "enabled":
        return all(values)
    if name == "backpressure":
        return max(values)
    if isinstance(first, bool):
        return any(values)
    if isinstance(first, int | float):
        return sum(values)
    if isinstance(first, Histogram):
        counts = [sum(column) for column in zip(*(h.counts for h in values), strict=True)]
        return Histogram(first.bounds, tuple(counts), sum(h.sum for h in values))
    if isinstance(first, Mapping):
        total: dict[str, int] = {}
        for mapping in values:
            for key, value in mapping.items():
                total[key] = total.get(key, 0) + value
        return MappingProxyType(total)
    if isinstance(first, tuple):
        width = max(len(v) for v in values)
        return tuple(sum(v[i] for v in values if i < len(v)) for i in range(width))
    raise AssertionError(f"no sum for the Metrics field {name}: {first!r}")


def sum_metrics(parts: Sequence[Metrics]) -> Metrics:
    """Several shards' metrics as one: counts, bytes, seconds, files and histograms add up
    (``last_sqn`` too: the changes the shards hold together, SQNs being per shard);
    ``backpressure`` is the highest, ``fenced`` whether any shard is, ``enabled`` whether every
    one is. No shards: everything 0 (``enabled`` True)."""
    fields = dataclasses.fields(Metrics)
    if not parts:
        zeros = {f.name: _zero(f) for f in fields}
        zeros["enabled"] = True
        return Metrics(**zeros)
    return Metrics(
        **{f.name: _combine(f.name, [getattr(m, f.name) for m in parts]) for f in fields}
    )
