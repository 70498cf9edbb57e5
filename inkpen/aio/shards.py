"""Sharded data sets for asyncio: :class:`AsyncShardedBookie`, over a ShardedBookie.

``inkpen.aio.shards.open(url, shards=None, **options)`` opens a data set as
:func:`inkpen.shards.open` does and answers an :class:`AsyncShardedBookie`; await it or use it
with ``async with``::

    async with inkpen.aio.shards.open("myapp-set") as book:
        await book.put("users", "alice", b"...")
        async for key in book.keys("users"):
            ...

It has every method of :class:`~inkpen.shards.ShardedBookie`, by the same names and with the
same arguments, the way ``inkpen.aio``'s handles mirror theirs: what returns a value there is a
coroutine here, a fold is an :class:`~inkpen.aio.AsyncFold`, ``snapshot()`` and
``transaction()`` are awaitable and async context managers, and ``backup = await
book.hot_backup()`` then ``await backup(dest)``. ``shard_of``, a hash of its arguments, stays a
plain method.

Writes wait without a thread, as :class:`~inkpen.aio.AsyncBookie`'s do: a put, delete, merge,
batch or ``mput`` is routed in the loop's thread and joins the group commit of its shard's
writer through that shard's :class:`~inkpen.aio.AsyncBookie` (opening a shard, the first time,
runs in a worker thread). Everything else (reads, folds, snapshots, transactions, checkpoints,
maintenance) runs in the handle's own worker threads. ``changes(since, shard=i, wait=...)``
tails in the loop: between the changes it reads in a worker thread, it waits for the shard's
news (its writer's applied SQN, or its following Reader's) holding no thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

from inkpen import shards as _shards
from inkpen._shard_feed import Step
from inkpen._shard_handle import ShardedBookie
from inkpen._shard_layout import Descriptor, check_shard_number
from inkpen._shard_parts import (
    DataSetBackupReport,
    ShardedHotBackup,
    ShardedSnapshot,
    ShardedTransaction,
)
from inkpen._shard_reads import ShardedReads
from inkpen._shard_sets import DataSetCheckpoint
from inkpen.actors.engine.bookie_actor import Stats
from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.actors.kernel.meter import Metrics
from inkpen.actors.kernel.news import News
from inkpen.actors.read.feed import CaughtUp, Change, GapPolicy
from inkpen.actors.read.path import Head
from inkpen.batch import Batch, IndexSpecs
from inkpen.bookie import Bookie
from inkpen.checks import check_seconds
from inkpen.formats.tictac import TicTacTree
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import FeedCursor
from inkpen.options import Options

from . import (
    DEFAULT_WORKERS,
    FOLD_CHUNK,
    AsyncBookie,
    AsyncFold,
    AsyncReader,
    _AsyncOver,
    _Begun,
    _Opening,
    _pool,
    _start,
)

__all__ = [
    "AsyncShardedBookie",
    "AsyncShardedHotBackup",
    "AsyncShardedSnapshot",
    "AsyncShardedTransaction",
    "open",
    "open_reader",
]


class _AsyncStepsTail(AsyncFold[Change]):
    """``changes(since, shard=i, wait=...)``: chunks of the changes readable now, read in a
    worker thread; at each :class:`~inkpen.actors.read.feed.CaughtUp`, a wait in the loop."""

    def __init__(
        self,
        start: Callable[[], Iterator[Step]],
        wait: float,
        run: Callable[..., Any],
        chunk: int,
    ) -> None:
        super().__init__(lambda: iter(()), run, chunk)
        self._start_steps = start
        self._steps: Iterator[Step] | None = None
        self._wait = wait
        self._pause: CaughtUp | None = None

    async def _refill(self) -> list[Change]:
        while True:
            pause, self._pause = self._pause, None
            if pause is not None and not await _changed(pause.news, pause.version, self._wait):
                self._close_items()  # ``wait`` seconds and nothing new, or the shard closed
                return []
            changes: list[Change] = await self._run(self._next_chunk)
            if changes or self._done:
                return changes

    def _next_chunk(self) -> list[Change]:
        if self._items is None:
            self._items = self._start_steps()
        out: list[Change] = []
        for step in self._items:
            if isinstance(step, CaughtUp):
                self._pause = step
                return out
            out.append(step)
            if len(out) >= self._chunk:
                return out
        self._close_items()
        return out


async def _changed(news: News, version: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds, in the loop and holding no thread, for ``news`` to move
    past ``version``."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # in the writing (or following) thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(woken.set)

    remove = news.add_listener(wake)
    try:
        deadline = loop.time() + timeout
        while news.version == version and not news.stopped:
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), left)
            woken.clear()
        return news.version != version
    finally:
        remove()


SR = TypeVar("SR", bound=ShardedReads)


class _AsyncShardedReads(_AsyncOver[SR]):
    """The read methods of the async sharded handles, over a ShardedBookie or ShardedSnapshot."""

    def _refuse_closed(self) -> None:
        self._sync._check_open()

    def shard_of(self, bucket: str | bytes, key: str | bytes) -> int:
        """The shard holding (bucket, key): a hash of the arguments, so a plain method."""
        return self._sync.shard_of(bucket, key)

    async def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The object's value from its shard, or None."""
        return await self._call(self._sync.get, bucket, key)

    async def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata from its shard, or None."""
        return await self._call(self._sync.head, bucket, key)

    async def head_only_get(
        self, bucket: str | bytes, key: str | bytes, subkey: str | bytes = b""
    ) -> bytes | None:
        """A head-only object's value from its shard."""
        return await self._call(self._sync.head_only_get, bucket, key, subkey)

    async def get_many(
        self, bucket: str | bytes, keys: Iterable[str | bytes]
    ) -> list[bytes | None]:
        """Many values, each shard's read together, the shards in parallel."""
        return await self._call(self._sync.get_many, bucket, keys)

    def keys(
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reverse: bool = False,
    ) -> AsyncFold[bytes]:
        """``async for key in book.keys(bucket, start, end)``: every shard's, in key order."""
        return self._fold(lambda: self._sync.keys(bucket, start, end, reverse=reverse))

    def heads(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        segments: Iterable[int] | None = None,
        modified_range: tuple[float | None, float | None] | None = None,
        max_objects: int | None = None,
        reverse: bool = False,
    ) -> AsyncFold[tuple[bytes, bytes, Head]]:
        """``async for bucket, key, head in book.heads(...)``: every shard's, in key order."""
        return self._fold(
            lambda: self._sync.heads(
                bucket,
                start,
                end,
                segments=segments,
                modified_range=modified_range,
                max_objects=max_objects,
                reverse=reverse,
            )
        )

    async def tictac_tree(
        self,
        bucket: str | bytes | None = None,
        *,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        segments: Iterable[int] | None = None,
        modified_range: tuple[float | None, float | None] | None = None,
    ) -> TicTacTree:
        """The tictac tree of the whole data set (the shards' trees merged)."""
        return await self._call(
            self._sync.tictac_tree,
            bucket,
            start=start,
            end=end,
            segments=segments,
            modified_range=modified_range,
        )

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
        reverse: bool = False,
    ) -> AsyncFold[tuple[bytes, bytes, bytes]]:
        """``async for bucket, key, value in book.objects(...)``, in key order."""
        return self._fold(
            lambda: self._sync.objects(bucket, start, end, order=order, reverse=reverse)
        )

    def index_query(
        self,
        bucket: str | bytes,
        field: str | bytes,
        start: str | bytes,
        end: str | bytes,
        *,
        regex: str | bytes | re.Pattern[Any] | None = None,
        return_terms: bool = False,
        reverse: bool = False,
    ) -> AsyncFold[Any]:
        """``async for key in book.index_query(...)``: every shard's, in (term, key) order."""
        return self._fold(
            lambda: self._sync.index_query(
                bucket, field, start, end, regex=regex, return_terms=return_terms, reverse=reverse
            )
        )

    def buckets(self) -> AsyncFold[bytes]:
        """``async for bucket in book.buckets()``: buckets holding a live object in any shard."""
        return self._fold(self._sync.buckets)

    async def is_empty(self) -> bool:
        """True when no shard holds a live object."""
        return await self._call(self._sync.is_empty)


class AsyncShardedSnapshot(_AsyncShardedReads[ShardedSnapshot]):
    """A snapshot of every shard (see :class:`inkpen.shards.ShardedSnapshot`); ``async with``
    releases it."""

    def __init__(
        self,
        sync: ShardedSnapshot,
        pool: concurrent.futures.ThreadPoolExecutor,
        fold_chunk: int = FOLD_CHUNK,
        *,
        owns_pool: bool = False,
    ) -> None:
        super().__init__(sync, pool, fold_chunk)
        self._owns_pool = owns_pool

    @property
    def ledger_only(self) -> bool:
        return self._sync.ledger_only

    @property
    def url(self) -> str:
        return self._sync.url

    def changes(
        self,
        since: int = 0,
        *,
        shard: int,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
    ) -> AsyncFold[Change]:
        """``async for change in snap.changes(since, shard=i)``: shard ``i``'s feed as the
        snapshot sees it."""
        return self._fold(lambda: self._sync.changes(since, shard=shard, bucket=bucket, gaps=gaps))

    async def close(self) -> None:
        """Release every shard's view. Idempotent."""
        if self._sync._closed:
            return
        try:
            await self._call(self._sync.close)
        finally:
            if self._owns_pool:  # opened by open_reader: its threads are its own
                self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncShardedSnapshot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncShardedTransaction(_AsyncOver[ShardedTransaction]):
    """A transaction in the shard its first key routes to (see
    :class:`inkpen.shards.ShardedTransaction`): its calls run in the handle's worker threads;
    ``async with`` commits, or rolls back on an exception."""

    def _refuse_closed(self) -> None:
        self._sync._check_usable()

    @property
    def isolation(self) -> str:
        return self._sync.isolation

    @property
    def shard(self) -> int | None:
        return self._sync.shard

    @property
    def snapshot_sqn(self) -> int:
        return self._sync.snapshot_sqn

    @property
    def state(self) -> str:
        return self._sync.state

    async def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The value as the transaction sees it."""
        return await self._call(self._sync.get, bucket, key)

    async def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The metadata as the transaction sees it."""
        return await self._call(self._sync.head, bucket, key)

    async def get_many(
        self, bucket: str | bytes, keys: Iterable[str | bytes]
    ) -> list[bytes | None]:
        """Values of keys of the transaction's shard, as it sees them."""
        return await self._call(self._sync.get_many, bucket, keys)

    async def put(
        self,
        bucket: str | bytes,
        key: str | bytes,
        value: bytes,
        *,
        indexes: IndexSpecs = (),
        ttl: float | None = None,
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a put (the first key opens its shard's transaction, in a worker thread)."""
        await self._call(
            self._sync.put, bucket, key, value, indexes=indexes, ttl=ttl, if_sqn=if_sqn
        )

    async def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a delete."""
        await self._call(self._sync.delete, bucket, key, indexes=indexes, if_sqn=if_sqn)

    async def commit(self) -> None:
        """Write the buffered changes atomically in the transaction's shard."""
        await self._call(self._sync.commit)

    async def rollback(self) -> None:
        """Discard the buffered changes and end the transaction."""
        await self._call(self._sync.rollback)

    async def close(self) -> None:
        """Roll back if still open. Idempotent."""
        await self._call(self._sync.close)

    async def __aenter__(self) -> AsyncShardedTransaction:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if self._sync.state != "open":
            return
        if exc_type is not None:
            await self.close()
        else:
            await self.commit()


class AsyncShardedHotBackup:
    """What ``await book.hot_backup()`` answers: ``await backup(dest)`` copies every shard into a
    data set at ``dest``; ``await backup.close()`` gives back what it holds without copying."""

    def __init__(self, sync: ShardedHotBackup, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self._sync = sync
        self._pool = pool

    @property
    def sync(self) -> ShardedHotBackup:
        """The synchronous :class:`inkpen.shards.ShardedHotBackup` underneath."""
        return self._sync

    async def __call__(self, destination: str) -> DataSetBackupReport:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._sync, destination)

    async def close(self) -> None:
        """Give back what the backup holds without (further) copying. Idempotent."""
        await asyncio.get_running_loop().run_in_executor(self._pool, self._sync.close)

    async def __aenter__(self) -> AsyncShardedHotBackup:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncShardedBookie(_AsyncShardedReads[ShardedBookie]):
    """An open data set for asyncio code; get one with ``inkpen.aio.shards.open``."""

    def __init__(
        self,
        sync: ShardedBookie,
        pool: concurrent.futures.ThreadPoolExecutor,
        fold_chunk: int = FOLD_CHUNK,
    ) -> None:
        super().__init__(sync, pool, fold_chunk)
        self._writers: dict[int, AsyncBookie] = {}
        self._readers: dict[int, AsyncReader] = {}

    @property
    def url(self) -> str:
        return self._sync.url

    @property
    def descriptor(self) -> Descriptor:
        return self._sync.descriptor

    @property
    def owned_shards(self) -> frozenset[int]:
        return self._sync.owned_shards

    @property
    def opened_shards(self) -> frozenset[int]:
        return self._sync.opened_shards

    @property
    def options(self) -> Options:
        return self._sync.options

    @property
    def closed(self) -> bool:
        return self._sync.closed

    # -- shards ----------------------------------------------------------------------------------

    async def _writer(self, index: int, what: str) -> AsyncBookie:
        """Shard ``index``'s writer for asyncio (opened in a worker thread the first time)."""
        found = self._writers.get(index)
        if found is not None:
            return found
        book = await self._call(self._sync._writer, index, what)
        found = self._writers.get(index)
        if found is None:
            found = self._writers[index] = AsyncBookie(
                book, book._engine, self._pool, self._fold_chunk
            )
        return found

    async def shard(self, index: int) -> AsyncBookie | AsyncReader:
        """Shard ``index``'s own handle for asyncio: its :class:`~inkpen.aio.AsyncBookie` if this
        handle writes it, else its :class:`~inkpen.aio.AsyncReader` (closed with this handle:
        do not close it yourself)."""
        chosen = check_shard_number(index, self._sync.descriptor.shards)
        found = await self._call(self._sync._handle, chosen)
        if isinstance(found, Bookie):
            return await self._writer(chosen, "shard")
        reader = self._readers.get(chosen)
        if reader is None:
            reader = self._readers[chosen] = AsyncReader(found, self._pool, self._fold_chunk)
        return reader

    # -- writes: routed in the loop, joining the shard's group commit without a thread -----------

    def _checked_index(self, bucket: str | bytes, key: str | bytes, what: str) -> int:
        index = self._sync.shard_of(bucket, key)
        self._sync._check_writes(what)
        return index

    async def put(
        self,
        bucket: str | bytes,
        key: str | bytes,
        value: bytes,
        *,
        indexes: IndexSpecs = (),
        ttl: float | None = None,
        if_sqn: int | None = None,
    ) -> None:
        """Store ``value`` in the shard of (bucket, key); returns once durable there."""
        index = self._checked_index(bucket, key, "put")
        if not self._sync._opened(index):
            indexes = list(indexes)
            self._sync._checker.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn)
        writer = await self._writer(index, "this put")
        await writer.put(bucket, key, value, indexes=indexes, ttl=ttl, if_sqn=if_sqn)

    async def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """A durable tombstone in the shard of (bucket, key)."""
        index = self._checked_index(bucket, key, "delete")
        if not self._sync._opened(index):
            indexes = list(indexes)
            self._sync._checker.delete(bucket, key, indexes, if_sqn=if_sqn)
        writer = await self._writer(index, "this delete")
        await writer.delete(bucket, key, indexes=indexes, if_sqn=if_sqn)

    async def merge(
        self,
        bucket: str | bytes,
        key: str | bytes,
        operand: bytes,
        *,
        operator: str,
    ) -> None:
        """Fold ``operand`` onto the value of (bucket, key) in its shard; returns once durable."""
        index = self._checked_index(bucket, key, "merge")
        if not self._sync._opened(index):
            self._sync._checker.merge(bucket, key, operand, operator)
        writer = await self._writer(index, "this merge")
        await writer.merge(bucket, key, operand, operator=operator)

    async def write(self, batch: Batch) -> None:
        """Apply a batch whose keys all route to one shard, atomically there; returns once
        durable."""
        index = self._sync._batch_shard(batch)
        if index is not None:
            writer = await self._writer(index, "this batch")
            await writer.write(batch)

    async def mput(self, specs: Iterable[tuple[str, Any, Any, Any, Any]]) -> None:
        """Head-only changes of one shard, as one durable batch there."""
        found = self._sync._mput_shard(specs)
        if found is not None:
            index, chosen = found
            writer = await self._writer(index, "this mput")
            await writer.mput(chosen)

    def transaction(self, isolation: str = "snapshot") -> _Begun[AsyncShardedTransaction]:
        """An :class:`AsyncShardedTransaction`: ``async with book.transaction() as txn``
        commits at the block's end (rolls back on an exception)."""

        async def make() -> AsyncShardedTransaction:
            txn = await self._call(self._sync.transaction, isolation)
            return AsyncShardedTransaction(txn, self._pool, self._fold_chunk)

        return _Begun(make)

    def snapshot(
        self, *, long_running: bool = False, ledger_only: bool = False
    ) -> _Opening[AsyncShardedSnapshot]:
        """An :class:`AsyncShardedSnapshot`: ``async with book.snapshot() as snap`` releases it
        at the block's end; ``snap = await book.snapshot()`` leaves that to ``await
        snap.close()``."""

        async def make() -> AsyncShardedSnapshot:
            snap = await self._call(
                self._sync.snapshot, long_running=long_running, ledger_only=ledger_only
            )
            return AsyncShardedSnapshot(snap, self._pool, self._fold_chunk)

        return _Opening(make)

    def changes(
        self,
        since: int = 0,
        *,
        shard: int,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
        wait: float | None = None,
    ) -> AsyncFold[Change]:
        """``async for change in book.changes(since, shard=i)``: shard ``i``'s feed. With
        ``wait``, a tail that waits for the shard's news in the loop, holding no thread, and
        ends once ``wait`` seconds pass with nothing new."""
        sync = self._sync
        if wait is None:
            return self._fold(lambda: sync.changes(since, shard=shard, bucket=bucket, gaps=gaps))
        index = sync._check_changes(since, shard, bucket, gaps)
        seconds = check_seconds("wait", wait)
        return _AsyncStepsTail(
            lambda: sync._tail(index, since, bucket, gaps), seconds, self._call, self._fold_chunk
        )

    # -- checkpoints and feed cursors -------------------------------------------------------------

    async def checkpoint(self, lifetime: float | None = None, *, name: str | None = None) -> str:
        """Record a data-set checkpoint (one per shard, one id); returns its id."""
        return await self._call(self._sync.checkpoint, lifetime, name=name)

    async def checkpoints(self) -> tuple[DataSetCheckpoint, ...]:
        """The data set's data-set checkpoints, oldest first."""
        return await self._call(self._sync.checkpoints)

    async def delete_checkpoint(self, checkpoint: str) -> None:
        """Delete a data-set checkpoint (its id or name) from every shard."""
        await self._call(self._sync.delete_checkpoint, checkpoint)

    async def create_feed_cursor(
        self,
        name: str,
        sqn: int = 0,
        *,
        lifetime: float | None = None,
        owner: str | None = None,
        shard: int,
    ) -> FeedCursor:
        """Create shard ``shard``'s named feed cursor at ``sqn``."""
        return await self._call(
            self._sync.create_feed_cursor, name, sqn, lifetime=lifetime, owner=owner, shard=shard
        )

    async def advance_feed_cursor(self, name: str, sqn: int, *, shard: int) -> FeedCursor:
        """Move shard ``shard``'s named cursor forward to ``sqn``."""
        return await self._call(self._sync.advance_feed_cursor, name, sqn, shard=shard)

    async def delete_feed_cursor(self, name: str, *, shard: int) -> None:
        """Delete shard ``shard``'s named cursor."""
        await self._call(self._sync.delete_feed_cursor, name, shard=shard)

    async def feed_cursors(self, *, shard: int) -> tuple[FeedCursor, ...]:
        """Every feed cursor of shard ``shard``."""
        return await self._call(self._sync.feed_cursors, shard=shard)

    # -- backups and maintenance ----------------------------------------------------------------

    async def hot_backup(self) -> AsyncShardedHotBackup:
        """Prepare a hot backup of every shard: ``backup = await book.hot_backup()``, then
        ``await backup(dest)``."""
        return AsyncShardedHotBackup(await self._call(self._sync.hot_backup), self._pool)

    async def run_gc(
        self, *, min_age: float | None = None, dry_run: bool = False
    ) -> dict[int, GcReport]:
        """GC of every shard this handle writes; reports by shard."""
        return await self._call(self._sync.run_gc, min_age=min_age, dry_run=dry_run)

    async def compact_journal(self) -> dict[int, CompactionReport]:
        """A journal compaction of every shard this handle writes; reports by shard."""
        return await self._call(self._sync.compact_journal)

    async def trim_journal(self) -> dict[int, CompactionReport]:
        """Trim the journal of every head-only shard this handle writes; reports by shard."""
        return await self._call(self._sync.trim_journal)

    async def compact_ledger(self) -> None:
        """Ledger merges of every shard this handle writes, now."""
        await self._call(self._sync.compact_ledger)

    async def flush(self) -> None:
        """Persist the ledger of every shard this handle has opened for writing."""
        await self._call(self._sync.flush)

    async def refresh(self) -> None:
        """Bring the Readers of the shards this handle does not write up to date now."""
        await self._call(self._sync.refresh)

    async def metrics(self, *, shard: int | None = None) -> Metrics:
        """The metrics summed over the shards opened so far, or shard ``shard``'s; read in the
        loop's thread when they wait for nothing (a shard not open yet opens in a worker)."""
        if shard is not None:
            check_shard_number(shard, self._sync.descriptor.shards)
        if shard is None or shard in self._sync.opened_shards:
            return self._sync.metrics(shard=shard)
        return await self._call(self._sync.metrics, shard=shard)

    async def stats(self) -> dict[int, Stats]:
        """The counters of every shard this handle writes, by shard."""
        return await self._call(self._sync.stats)

    async def close(self) -> None:
        """Close every shard (see :meth:`inkpen.shards.ShardedBookie.close`)."""
        try:
            await self._call(self._sync.close)
        finally:
            self._pool.shutdown(wait=False)

    async def abandon(self) -> None:
        """Stop every shard at once, persisting nothing more."""
        try:
            await self._call(self._sync.abandon)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncShardedBookie:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<inkpen.aio.shards.AsyncShardedBookie {self.url} {state}>"


def open(
    url: str,
    shards: Iterable[int] | None = None,
    *,
    workers: int = DEFAULT_WORKERS,
    fold_chunk: int = FOLD_CHUNK,
    **options: Any,
) -> _Opening[AsyncShardedBookie]:
    """Open the data set at ``url`` as :func:`inkpen.shards.open` does: ``book = await
    inkpen.aio.shards.open(url)`` or ``async with inkpen.aio.shards.open(url) as book``.

    ``workers``: threads for reads, maintenance and the first opening of each shard;
    ``fold_chunk``: items a fold fetches per step. ``shards`` and the other keywords are
    :func:`inkpen.shards.open`'s.
    """
    pool = _pool(workers, fold_chunk)

    async def make() -> AsyncShardedBookie:
        sync = await _start(pool, lambda: _shards.open(url, shards, **options))
        return AsyncShardedBookie(sync, pool, fold_chunk)

    return _Opening(make)


def open_reader(
    url: str,
    *,
    checkpoint: str | None = None,
    workers: int = DEFAULT_WORKERS,
    fold_chunk: int = FOLD_CHUNK,
    **options: Any,
) -> _Opening[AsyncShardedSnapshot]:
    """A read-only view of every shard, as :func:`inkpen.shards.open_reader` opens one (at a
    data-set checkpoint, or each shard at a checkpoint of its own): ``snap = await
    inkpen.aio.shards.open_reader(url)`` or ``async with``."""
    pool = _pool(workers, fold_chunk)

    async def make() -> AsyncShardedSnapshot:
        sync = await _start(
            pool, lambda: _shards.open_reader(url, checkpoint=checkpoint, **options)
        )
        return AsyncShardedSnapshot(sync, pool, fold_chunk, owns_pool=True)

    return _Opening(make)
