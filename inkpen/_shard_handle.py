"""ShardedBookie: one handle on every database of a sharded data set.

``inkpen.shards.open(url, shards=None, **options)`` gives a :class:`ShardedBookie`: every method
of the Bookie that has a meaning over shards, with the Bookie's arguments. It routes each object
to its shard with :func:`~inkpen._shard_layout.shard_of` and speaks to that shard's database: a
:class:`~inkpen.Bookie` for the shards this process writes, a following
:class:`~inkpen.Reader` for the others.

Shard handles open on first use (under a lock per shard, so threads racing to the same shard
open it once) and stay open until :meth:`ShardedBookie.close`. Each shard's Bookie claims and
fences its own database exactly as ``inkpen.open`` does: two processes that both write shard 3
fence each other, while processes writing disjoint shards run side by side.

Owned shards (``shards=``): a process that writes only some shards names them; a put, delete,
merge, batch or transaction routed to another shard is refused with :class:`UsageError` before
anything is written. Reads of a shard it does not own go through a following Reader
(``inkpen.open_reader(url, follow=True)``): they see the other writer's acknowledged writes
within the Reader's refresh interval (a second by default), or at once after
:meth:`ShardedBookie.refresh`.

What spans shards, and how (the reads in :mod:`inkpen._shard_reads`, the rest in
:mod:`inkpen._shard_parts` and :mod:`inkpen._shard_sets`):

- ``write(batch)``, ``mput`` and a ``transaction()`` are atomic within one database, so they
  take keys that all route to one shard (a transaction's first key chooses it);
- ``snapshot()`` is one snapshot per shard, taken together: not one cut across the shards;
- ``checkpoint()`` is one checkpoint per shard under one id, listed and deleted together;
- ``hot_backup()`` copies every shard, and the descriptor, into a data set at the destination;
- ``changes``, the feed cursors and ``metrics(shard=i)`` are per shard, SQNs being per shard;
  ``metrics()`` sums the shards this handle has opened;
- maintenance (``flush``, ``compact_journal``, ``compact_ledger``, ``trim_journal``,
  ``run_gc``, ``stats``) acts on the shards this handle writes, the others being their own
  writers' business; those that answer a report answer one per shard, by shard number.

State machine: open (shard handles open lazily) -> closed (every handle closed; any later call
is a :class:`UsageError`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from inkpen.actors.engine.bookie_actor import Stats
from inkpen.actors.engine.hot_backup import HotBackup
from inkpen.actors.journal.changes import ChangeMaker, as_bytes
from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.actors.kernel.meter import Metrics
from inkpen.actors.read.feed import Change, GapPolicy
from inkpen.formats.keys import MAX_KEY_BYTES
from inkpen.logs import get_logger
from inkpen.manifest import feed_cursors as cursors
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import FeedCursor
from inkpen.manifest.store import ManifestStore

from ._shard_feed import Step, tail, waiting
from ._shard_layout import Descriptor, check_shard_number, shard_url
from ._shard_parts import (
    ShardedHotBackup,
    ShardedSnapshot,
    ShardedTransaction,
    hold_shard,
    sum_metrics,
)
from ._shard_reads import ShardedReads, ShardPool, shards_listed
from ._shard_sets import DataSetCheckpoint, create_checkpoint, list_checkpoints
from ._shard_sets import delete_checkpoint as delete_data_set_checkpoint
from .batch import Batch, IndexSpecs
from .bookie import Bookie
from .bookie import open as open_bookie
from .checks import check_flag, check_seconds
from .errors import UsageError
from .options import Options
from .read_api import FoldIterator, ReadAPI
from .reader import Reader, open_reader
from .snapshot import Snapshot
from .transaction import Transaction, check_isolation

log = get_logger("inkpen.shards")

T = TypeVar("T")


class ShardedBookie(ShardedReads):
    """An open sharded data set: the Bookie's API over its N databases (see the module
    docstring). Use ``inkpen.shards.open`` to get one; close it when done (or use it as a
    context manager)."""

    def __init__(
        self, url: str, descriptor: Descriptor, owned: frozenset[int], options: Options
    ) -> None:
        self._url = url
        self._descriptor = descriptor
        self._n = descriptor.shards
        self._owned = owned
        self._options = options
        self._locks = [threading.Lock() for _ in range(self._n)]
        self._handles: dict[int, Bookie | Reader] = {}
        self._state_lock = threading.Lock()
        self._pool = ShardPool(self._n)
        self._closed = False
        self._checker = ChangeMaker(options)

    # -- what it is -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The data set's root URL."""
        return self._url

    @property
    def descriptor(self) -> Descriptor:
        """The data set's descriptor (its shard count, hash and format version)."""
        return self._descriptor

    @property
    def owned_shards(self) -> frozenset[int]:
        """The shards this handle writes (all of them unless ``shards=`` said otherwise)."""
        return self._owned

    @property
    def opened_shards(self) -> frozenset[int]:
        """The shards whose handles are open so far (a shard opens at its first use)."""
        return frozenset(self._handles)

    @property
    def options(self) -> Options:
        """The options every shard was opened with."""
        return self._options

    @property
    def closed(self) -> bool:
        return self._closed

    # -- shard handles ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this ShardedBookie is closed; open the data set again")

    def _handle(self, index: int) -> Bookie | Reader:
        """Shard ``index``'s handle, opened on first use: a Bookie if owned, else a Reader."""
        self._check_open()
        found = self._handles.get(index)
        if found is not None:
            return found
        with self._locks[index]:
            found = self._handles.get(index)
            if found is not None:
                return found
            url = shard_url(self._url, index)
            opened: Bookie | Reader
            if index in self._owned:
                opened = open_bookie(url, self._options)
            else:
                opened = open_reader(url, self._options, follow=True)
            with self._state_lock:
                if self._closed:  # closed while this one opened: do not leak it
                    opened.close()
                    raise UsageError("this ShardedBookie is closed; open the data set again")
                self._handles[index] = opened
            log.debug("shards.opened", url=url, shard=index, writer=index in self._owned)
            return opened

    def _reader(self, index: int) -> ReadAPI:
        return self._handle(index)

    def _opened(self, index: int) -> bool:
        """Whether shard ``index``'s handle is open already. A call whose shard is not open yet
        checks its arguments before opening it, so that a refused call opens (claims) nothing."""
        return index in self._handles

    def _check_owned(self, index: int, what: str) -> None:
        """Refuse, opening nothing, what would write shard ``index`` if this handle does not."""
        if index not in self._owned:
            raise UsageError(
                f"{what} routes to shard {index}, which this handle does not write (it writes "
                f"shards {shards_listed(self._owned)}); open the data set with a shards= that "
                f"includes {index}, or send the write to the process that owns it"
            )

    def _writer(self, index: int, what: str) -> Bookie:
        """Shard ``index``'s Bookie (opened on first use); a shard not written here: refused."""
        self._check_owned(index, what)
        handle = self._handle(index)
        assert isinstance(handle, Bookie)
        return handle

    def _check_writes(self, what: str) -> None:
        """Refuse object writes in a head-only data set, as each shard's Bookie would."""
        self._check_open()
        if self._options.head_only is not None:
            raise UsageError(
                f"{what} is not available in a head-only store (head_only="
                f'{self._options.head_only!r}); write with mput([("add" | "remove", bucket, '
                "key, subkey, value), ...])"
            )

    def shard(self, index: int) -> ReadAPI:
        """Shard ``index``'s own handle (its Bookie if this handle writes it, else its Reader),
        for what only one database has: ``objects(order="sqn")``, its own snapshot..."""
        return self._handle(check_shard_number(index, self._n))

    def _owned_map(self, call: Callable[[Bookie], T], what: str) -> dict[int, T]:
        """``call`` on the Bookie of every shard this handle writes, in parallel; by shard."""
        self._check_open()
        return self._pool.map(self._owned, lambda i: call(self._writer(i, what)))

    # -- writes ----------------------------------------------------------------------------------

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
        """``Bookie.put`` on the shard of (bucket, key); returns once durable there."""
        index = self.shard_of(bucket, key)
        self._check_writes("put")
        if not self._opened(index):
            indexes = _replayable(indexes)
            self._checker.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn)
        self._writer(index, "this put").put(
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
        """``Bookie.delete`` on the shard of (bucket, key)."""
        index = self.shard_of(bucket, key)
        self._check_writes("delete")
        if not self._opened(index):
            indexes = _replayable(indexes)
            self._checker.delete(bucket, key, indexes, if_sqn=if_sqn)
        self._writer(index, "this delete").delete(bucket, key, indexes=indexes, if_sqn=if_sqn)

    def merge(
        self,
        bucket: str | bytes,
        key: str | bytes,
        operand: bytes,
        *,
        operator: str,
    ) -> None:
        """``Bookie.merge`` on the shard of (bucket, key): the operator named ``operator`` (given
        to ``inkpen.shards.open`` in ``merge_operators``, which every shard's Bookie gets) folds
        ``operand`` onto the value there; returns once durable."""
        index = self.shard_of(bucket, key)
        self._check_writes("merge")
        if not self._opened(index):
            self._checker.merge(bucket, key, operand, operator)
        self._writer(index, "this merge").merge(bucket, key, operand, operator=operator)

    def write(self, batch: Batch) -> None:
        """``Bookie.write`` of a batch whose keys all route to one shard (atomic there).

        A batch whose keys route to several shards is refused with :class:`UsageError` naming
        them, and nothing is written: split it by :meth:`shard_of` (a batch is atomic within one
        database only). An empty batch is a no-op."""
        index = self._batch_shard(batch)
        if index is not None:
            self._writer(index, "this batch").write(batch)

    def _batch_shard(self, batch: Batch) -> int | None:
        """The shard of ``batch`` once its changes are checked (None: an empty batch, marked
        written); a batch of several shards is refused."""
        self._check_writes("write")
        if not isinstance(batch, Batch):
            raise UsageError(f"write takes an inkpen.Batch, got {type(batch).__name__}")
        index = self._one_shard(
            [(op.bucket, op.key) for op in batch._pending()], "this batch", "a batch"
        )
        if index is None:
            batch._mark_written()
            return None
        if not self._opened(index):
            for op in batch._pending():
                if op.delete:
                    self._checker.delete(op.bucket, op.key, op.indexes, if_sqn=op.if_sqn)
                elif op.operator is not None:
                    self._checker.merge(op.bucket, op.key, op.value, op.operator)
                else:
                    self._checker.put(
                        op.bucket, op.key, op.value, op.indexes, op.ttl, if_sqn=op.if_sqn
                    )
        self._check_owned(index, "this batch")
        return index

    def _one_shard(self, keys: list[tuple[bytes, bytes]], what: str, unit: str) -> int | None:
        """The one shard ``keys`` route to (None for no keys); several: a UsageError."""
        by_shard: dict[int, bytes] = {}
        for bucket, key in keys:
            by_shard.setdefault(self._route(bucket, key), key)
        if not by_shard:
            return None
        if len(by_shard) > 1:
            shown = ", ".join(f"{i} (key {k!r})" for i, k in sorted(by_shard.items())[:8])
            raise UsageError(
                f"{what}'s keys route to {len(by_shard)} shards: {shown}; {unit} is atomic "
                "within one shard only: split it by ShardedBookie.shard_of(bucket, key)"
            )
        (index,) = by_shard
        return index

    def mput(self, specs: Iterable[tuple[str, Any, Any, Any, Any]]) -> None:
        """``Bookie.mput`` of head-only changes whose (bucket, key) all route to one shard
        (one durable batch there); specs of several shards are refused, as ``write`` refuses
        such a batch. Only in a data set opened with ``head_only``."""
        found = self._mput_shard(specs)
        if found is not None:
            index, chosen = found
            self._writer(index, "this mput").mput(chosen)

    def _mput_shard(
        self, specs: Iterable[tuple[str, Any, Any, Any, Any]]
    ) -> tuple[int, list[tuple[str, Any, Any, Any, Any]]] | None:
        """The shard of an ``mput``'s specs, once checked, and the specs (None: no specs)."""
        self._check_open()
        if self._options.head_only is None:
            raise UsageError(
                "mput writes head-only objects; open a new data set with "
                "head_only='with_lookup' or 'no_lookup' to use it"
            )
        if isinstance(specs, str | bytes) or not isinstance(specs, Iterable):
            raise UsageError("mput takes a sequence of (op, bucket, key, subkey, value) specs")
        chosen = list(specs)
        changes = [self._checker.head_only(spec) for spec in chosen]
        index = self._one_shard([(c.bucket, c.key) for c in changes], "this mput", "an mput")
        return None if index is None else (index, chosen)

    def transaction(self, isolation: str = "snapshot") -> ShardedTransaction:
        """A transaction in one shard: the one its first key routes to (see
        :class:`ShardedTransaction`). A key of another shard is a :class:`UsageError` naming
        both shards; the transaction goes on. Commits at the end of its ``with`` block."""
        self._check_writes("transaction")
        level = check_isolation(isolation)

        def begin(index: int) -> Transaction:
            return self._writer(index, "this transaction's first key").transaction(level)

        return ShardedTransaction(
            level,
            route=self._route,
            begin=begin,
            checker=self._checker,
        )

    # -- snapshots and the feed ------------------------------------------------------------------

    def snapshot(self, *, long_running: bool = False, ledger_only: bool = False) -> ShardedSnapshot:
        """A snapshot of every shard, taken together (see :class:`ShardedSnapshot`): a Bookie
        snapshot of each shard this handle writes, a Reader at a checkpoint of its own of each
        other. Each shard's view is one consistent state of that shard; together they are not
        one cut across the shards (they have no common clock): a write acknowledged by one shard
        while the views were taken may be in the snapshot while an earlier write to another
        shard is not. ``long_running`` and ``ledger_only`` as for ``Bookie.snapshot``."""
        self._check_open()
        check_flag("long_running", long_running)
        check_flag("ledger_only", ledger_only)

        def take(index: int) -> Snapshot | Reader:
            handle = self._handle(index)
            if isinstance(handle, Bookie):
                return handle.snapshot(long_running=long_running, ledger_only=ledger_only)
            return open_reader(shard_url(self._url, index), self._options)

        parts = self._pool.gather(range(self._n), take, lambda _i, part: part.close())
        return ShardedSnapshot(self._url, parts, self._pool, ledger_only=ledger_only)

    def changes(
        self,
        since: int = 0,
        *,
        shard: int,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
        wait: float | None = None,
    ) -> FoldIterator[Change]:
        """Shard ``shard``'s change feed (SQNs are per shard, so each shard has its own feed
        and its consumer keeps one position per shard).

        With ``wait`` (seconds) it tails: having given every change readable so far, it waits
        for more and goes on, and ends once ``wait`` seconds pass with nothing new. A shard this
        handle writes wakes it at once on every write its Bookie acknowledges; another shard's
        following Reader wakes it when it finds its writer's news (within a second, or at once
        after ``refresh()``)."""
        index = self._check_changes(since, shard, bucket, gaps)
        if wait is None:
            return self._handle(index).changes(since, bucket=bucket, gaps=gaps)
        seconds = check_seconds("wait", wait)
        return FoldIterator(waiting(self._tail(index, since, bucket, gaps), seconds), lambda: None)

    def _tail(
        self, index: int, since: int, bucket: str | bytes | None, gaps: GapPolicy
    ) -> Iterator[Step]:
        """The steps of a tail of shard ``index``'s feed (see :mod:`inkpen._shard_feed`), for
        :meth:`changes` and ``inkpen.aio``; the arguments are checked already."""
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        return tail(self._handle(index), since, b, gaps)

    # -- checkpoints ---------------------------------------------------------------------------

    def checkpoint(self, lifetime: float | None = None, *, name: str | None = None) -> str:
        """Record a data-set checkpoint: one checkpoint in every shard, under one id (returned)
        and ``name``, each covering everything its shard acknowledged before it. Made in
        parallel; not one cut across the shards (see :mod:`inkpen._shard_sets`). Read a shard
        at it with ``inkpen.open_reader(shard_url(url, i), checkpoint=ID)``, copy the data set
        at it with ``inkpen.backup(url, dest, checkpoint=ID)``; it lives ``lifetime`` seconds
        (None: until deleted with :meth:`delete_checkpoint` or ``inkpen checkpoint delete``)."""
        self._check_open()
        return create_checkpoint(self._url, lifetime, name=name).id

    def checkpoints(self) -> tuple[DataSetCheckpoint, ...]:
        """The data set's data-set checkpoints (expired ones too), oldest first."""
        self._check_open()
        return list_checkpoints(self._url)

    def delete_checkpoint(self, checkpoint: str) -> None:
        """Delete the data-set checkpoint ``checkpoint`` (its id or name) from every shard."""
        self._check_open()
        delete_data_set_checkpoint(self._url, checkpoint)

    # -- feed cursors (per shard) ----------------------------------------------------------------

    def _cursor_store(self, shard: int) -> ManifestStore:
        """Shard ``shard``'s manifests (opening the shard: its arguments are checked first)."""
        index = check_shard_number(shard, self._n)
        handle = self._handle(index)
        if isinstance(handle, Bookie):
            return handle._manifests()
        return ManifestStore(handle._store)

    def create_feed_cursor(
        self,
        name: str,
        sqn: int = 0,
        *,
        lifetime: float | None = None,
        owner: str | None = None,
        shard: int,
    ) -> FeedCursor:
        """Create the named feed cursor of shard ``shard`` at ``sqn`` (see
        ``Bookie.create_feed_cursor``; a consumer of a data set keeps one per shard, SQNs being
        per shard). A manifest update: it fences nobody, so any shard may have one."""
        self._check_open()
        cursors.check_name(name)
        cursors.check_sqn(sqn)
        cursors.check_lifetime(lifetime)
        cursors.check_owner(owner)
        return cursors.create_feed_cursor(
            self._cursor_store(shard), name, sqn, lifetime=lifetime, owner=owner
        )

    def advance_feed_cursor(self, name: str, sqn: int, *, shard: int) -> FeedCursor:
        """Move shard ``shard``'s named cursor forward to ``sqn`` (renewing its lifetime)."""
        self._check_open()
        cursors.check_name(name)
        cursors.check_sqn(sqn)
        return cursors.advance_feed_cursor(self._cursor_store(shard), name, sqn)

    def delete_feed_cursor(self, name: str, *, shard: int) -> None:
        """Delete shard ``shard``'s named cursor (``NotFoundError`` if there is none)."""
        self._check_open()
        cursors.check_name(name)
        cursors.delete_feed_cursor(self._cursor_store(shard), name)

    def feed_cursors(self, *, shard: int) -> tuple[FeedCursor, ...]:
        """Every feed cursor of shard ``shard`` (expired ones too: see ``is_live``)."""
        self._check_open()
        return cursors.list_feed_cursors(self._cursor_store(shard))

    # -- backups and maintenance -----------------------------------------------------------------

    def hot_backup(self) -> ShardedHotBackup:
        """Prepare a hot backup of the whole data set: returns ``backup``, a function.

        ``backup(dest_url)`` copies every shard into the same shard of a data set at
        ``dest_url`` (given the source's descriptor first), which ``inkpen.shards.open``
        opens: each shard this handle writes as ``Bookie.hot_backup`` copies it, as it was at
        this call; each other shard at a checkpoint made at this call (held until the copy or
        ``backup.close()``). Into an earlier backup of the same data set, only new files are
        copied. Writes may go on meanwhile."""
        self._check_open()

        def prepare(index: int) -> HotBackup | str:
            if index in self._owned:
                return self._writer(index, "hot_backup").hot_backup()
            return hold_shard(self._url, index)

        def undo(index: int, part: HotBackup | str) -> None:
            ShardedHotBackup(self._url, self._descriptor, {index: part}).close()

        parts = self._pool.gather(range(self._n), prepare, undo)
        return ShardedHotBackup(self._url, self._descriptor, parts)

    def run_gc(self, *, min_age: float | None = None, dry_run: bool = False) -> dict[int, GcReport]:
        """``Bookie.run_gc`` on every shard this handle writes, in parallel; reports by shard."""
        age = None if min_age is None else check_seconds("min_age", min_age)
        check_flag("dry_run", dry_run)
        return self._owned_map(lambda b: b.run_gc(min_age=age, dry_run=dry_run), "run_gc")

    def compact_journal(self) -> dict[int, CompactionReport]:
        """``Bookie.compact_journal`` on every shard this handle writes; reports by shard."""
        return self._owned_map(lambda b: b.compact_journal(), "compact_journal")

    def trim_journal(self) -> dict[int, CompactionReport]:
        """``Bookie.trim_journal`` (head-only data sets) on every shard this handle writes."""
        self._check_open()
        if self._options.head_only is None:
            raise UsageError(
                "trim_journal is for head-only stores, whose journal only serves recovery; "
                "a normal store's journal holds its values: use compact_journal()"
            )
        return self._owned_map(lambda b: b.trim_journal(), "trim_journal")

    def compact_ledger(self) -> None:
        """``Bookie.compact_ledger`` on every shard this handle writes, in parallel."""
        self._owned_map(lambda b: b.compact_ledger(), "compact_ledger")

    def flush(self) -> None:
        """``Bookie.flush`` on every shard this handle has opened for writing, in parallel."""
        self._check_open()
        writers = [i for i, h in list(self._handles.items()) if isinstance(h, Bookie)]
        self._pool.map(writers, lambda i: self._writer(i, "flush").flush())

    def refresh(self) -> None:
        """Bring the Readers of shards this handle does not write up to date now (they follow
        their writers by themselves every ``refresh_interval`` otherwise)."""
        self._check_open()
        readers = {i: h for i, h in list(self._handles.items()) if isinstance(h, Reader)}
        self._pool.map(readers, lambda i: readers[i].refresh())

    def metrics(self, *, shard: int | None = None) -> Metrics:
        """Typed metrics (see :class:`inkpen.Metrics`): the sum over the shards opened so far
        (a shard this handle has not used recorded nothing), or shard ``shard``'s own. Summed,
        ``last_sqn`` counts the changes of every shard together and ``backpressure`` is the
        highest. Read at once, waiting for no actor."""
        self._check_open()
        if shard is not None:
            return self._handle(check_shard_number(shard, self._n)).metrics()
        handles = sorted(self._handles.items())
        return sum_metrics([handle.metrics() for _i, handle in handles])

    def stats(self) -> dict[int, Stats]:
        """``Bookie.stats`` of every shard this handle writes, by shard number."""
        return self._owned_map(lambda b: b.stats(), "stats")

    # -- life cycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every shard handle (each Bookie as ``Bookie.close`` does); idempotent."""
        self._end(lambda handle: handle.close())

    def abandon(self) -> None:
        """Stop every shard at once, persisting nothing more (``Bookie.abandon``: what a crash
        would leave; nothing acknowledged is lost). Idempotent."""
        self._end(lambda h: h.abandon() if isinstance(h, Bookie) else h.close())

    def _end(self, stop: Callable[[Bookie | Reader], object]) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        handles = list(self._handles.values())
        first: BaseException | None = None
        for handle in handles:
            try:
                stop(handle)
            except BaseException as exc:
                first = first or exc
        self._pool.close()
        if first is not None:
            raise first

    def __enter__(self) -> ShardedBookie:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<inkpen.shards.ShardedBookie {self._url} {self._n} shards {state}>"


def _replayable(indexes: IndexSpecs) -> IndexSpecs:
    """Index specs that can be read twice (checked here, then by the shard's Bookie)."""
    return list(indexes) if isinstance(indexes, Iterator) else indexes
