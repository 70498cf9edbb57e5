"""inkpen for asyncio: the Bookie's and the Reader's methods as coroutines, on the same engine.

``inkpen.aio.open(url, **options)`` opens a database as :func:`inkpen.open` does and answers an
:class:`AsyncBookie`; ``inkpen.aio.open_reader(url, ...)`` answers an :class:`AsyncReader`. Both
can be awaited or used with ``async with``::

    async with inkpen.aio.open("/var/lib/myapp/db") as book:
        await book.put("users", "alice", b"...")
        value = await book.get("users", "alice")
        async for key in book.keys("users"):
            ...

Writes wait without a thread. A put or delete is checked and encoded in the event loop's thread,
joins the open batch of the engine's write intake (group commit, as a threaded put does) and then
awaits an ``asyncio`` future that the batch settles: the engine thread that makes the batch durable
and visible hands the news to the loop with one ``call_soon_threadsafe`` per batch and loop,
however many coroutines wait on it. So 10,000 puts awaited at once park 10,000 coroutines and no
thread, and share journal segments exactly as 10,000 threads would. Backpressure is honoured the
same way as for threads: at the slow level a put sleeps asynchronously for a moment, at the stop
level it waits for room in one of the handle's few worker threads.

Everything else (point reads, folds, snapshots, checkpoints, maintenance, open and close) may
read the store or wait for an actor, so it runs in the handle's own small thread pool
(``workers`` threads, 4 by default), never in the loop's thread. Folds are async iterators that
fetch ``fold_chunk`` items per step; argument errors of a fold surface on its first step.
Cancelling a put's ``await`` does not withdraw the put: it may still become durable.

The async handles have every method of :class:`~inkpen.Bookie`, :class:`~inkpen.Reader`,
:class:`~inkpen.Snapshot` and :class:`~inkpen.Transaction`, by the same names and with the same
arguments: what returns a value there is a coroutine here, what returns a fold or an iterator is
an :class:`AsyncFold`, and what is a context manager there is an async one here (``async with
book.snapshot() as snap``; ``await book.snapshot()`` answers the snapshot itself; ``async with
book.transaction() as txn`` commits at the block's end, or rolls back on an exception, and
``await inkpen.aio.retrying(fn)`` reruns a coroutine function on conflict). ``backup = await
book.hot_backup()`` answers an :class:`AsyncHotBackup`, and ``await backup(dest)`` copies. A
following Reader's or the writer's own ``changes(since, wait=...)`` tails in the loop: between the
changes it reads in a worker thread, it waits for news (the follower's refreshes, the writer's
applied batches) as the puts wait for their batch, holding no thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import re
import time
import warnings
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from time import perf_counter
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

from inkpen.actors.engine.bookie_actor import Stats
from inkpen.actors.engine.engine import Engine, put_timed_out
from inkpen.actors.engine.hot_backup import BackupReport, HotBackup
from inkpen.actors.journal.changes import PendingChange
from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.actors.journal.intake import WriteGroup
from inkpen.actors.kernel.meter import Metrics
from inkpen.actors.kernel.news import News
from inkpen.actors.read.feed import CaughtUp, Change, GapPolicy
from inkpen.actors.read.path import Head
from inkpen.batch import Batch
from inkpen.formats.tictac import TicTacTree
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import FeedCursor
from inkpen.objectstore import ObjectStore

from .. import bookie as _bookie
from .. import reader as _reader
from ..bookie import Bookie, IndexSpecs, merge_operators_of, value_bytes
from ..checks import check_count
from ..errors import ConflictError, UsageError
from ..options import Options
from ..read_api import ReadAPI
from ..reader import Reader
from ..snapshot import Snapshot
from ..transaction import NESTED, RETRY_DEADLINE, Backoff, Transaction

__all__ = [
    "AsyncBookie",
    "AsyncFold",
    "AsyncHotBackup",
    "AsyncReader",
    "AsyncSnapshot",
    "AsyncTransaction",
    "open",
    "open_reader",
    "retrying",
    "shards",
]

T = TypeVar("T")
H = TypeVar("H", bound="_Closable")
R = TypeVar("R", bound=ReadAPI)
S = TypeVar("S")

DEFAULT_WORKERS = 4
FOLD_CHUNK = 256
MAX_WORKERS = 256
MAX_FOLD_CHUNK = 1_000_000


class AsyncFold(Generic[T]):
    """An async iterator over one fold; ``aclose()`` (or ``async with``) releases it early."""

    def __init__(
        self, start: Callable[[], Iterator[T]], run: Callable[..., Awaitable[Any]], chunk: int
    ) -> None:
        self._start = start
        self._run = run
        self._chunk = chunk
        self._items: Iterator[Any] | None = None
        self._buffer: list[T] = []
        self._pos = 0
        self._done = False

    def __aiter__(self) -> AsyncFold[T]:
        return self

    async def __anext__(self) -> T:
        if self._pos < len(self._buffer):
            item = self._buffer[self._pos]
            self._pos += 1
            return item
        if self._done:
            raise StopAsyncIteration
        self._buffer = await self._refill()
        self._pos = 0
        if not self._buffer:
            self._done = True
            raise StopAsyncIteration
        self._pos = 1
        return self._buffer[0]

    async def _refill(self) -> list[T]:
        """The next items (none: the fold is over)."""
        items: list[T] = await self._run(self._next_chunk)
        return items

    def _next_chunk(self) -> list[T]:
        if self._items is None:
            self._items = self._start()
        out: list[T] = []
        for item in self._items:
            out.append(item)
            if len(out) >= self._chunk:
                return out
        self._close_items()
        return out

    def _close_items(self) -> None:
        items, self._items = self._items, None
        self._done = True
        close = getattr(items, "close", None)
        if close is not None:
            close()

    async def aclose(self) -> None:
        """Release the fold's snapshot now (a fold read to its end releases it by itself)."""
        if self._items is not None:
            await self._run(self._close_items)
        self._done = True

    async def __aenter__(self) -> AsyncFold[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _AsyncTail(AsyncFold[Change]):
    """A tail, ``changes(since, wait=...)`` of a following Reader or of the writer: chunks of the
    changes readable now, read in a worker thread; between them, a wait for news (the follower's
    refreshes, the writer's applied batches) in the loop."""

    def __init__(
        self,
        start: Callable[[], tuple[Iterator[Change | CaughtUp], float]],
        run: Callable[..., Awaitable[Any]],
        chunk: int,
    ) -> None:
        super().__init__(lambda: iter(()), run, chunk)
        self._start_tail = start
        self._wait = 0.0
        self._pause: CaughtUp | None = None

    async def _refill(self) -> list[Change]:
        while True:
            pause, self._pause = self._pause, None
            if pause is not None and not await _changed(pause.news, pause.version, self._wait):
                # ``wait`` seconds and nothing new, or the Reader closed: the tail ends. Its steps
                # stand at a CaughtUp, between scans: closing them here reads nothing.
                self._close_items()
                return []
            changes: list[Change] = await self._run(self._next_chunk)
            if changes or self._done:
                return changes

    def _next_chunk(self) -> list[Change]:
        if self._items is None:
            self._items, self._wait = self._start_tail()
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
    past ``version`` (:meth:`News.wait_for_change` for a coroutine)."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # in the publisher's thread
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


class _AsyncOver(Generic[S]):
    """An async handle over a synchronous one: its calls run in the handle's worker threads,
    its folds come in chunks from them."""

    def __init__(
        self, sync: S, pool: concurrent.futures.ThreadPoolExecutor, fold_chunk: int
    ) -> None:
        self._sync = sync
        self._pool = pool
        self._fold_chunk = fold_chunk

    @property
    def sync(self) -> S:
        """The synchronous handle underneath (for code that runs in threads of its own)."""
        return self._sync

    def _refuse_closed(self) -> None:
        """Raise the synchronous handle's own error for a call after it closed."""
        raise NotImplementedError

    async def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        except RuntimeError:  # the pool is shut down: the handle is closed, so say that
            self._refuse_closed()
            raise
        return await future

    def _fold(self, start: Callable[[], Iterator[T]]) -> AsyncFold[T]:
        return AsyncFold(start, self._call, self._fold_chunk)


class _AsyncReads(_AsyncOver[R]):
    """The read methods of an async handle over a synchronous one (Bookie, Reader, Snapshot)."""

    def _refuse_closed(self) -> None:
        self._sync._check_open()

    async def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The object's value, or None (see :meth:`inkpen.Bookie.get`)."""
        return await self._call(self._sync.get, bucket, key)

    async def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata, or None (see :meth:`inkpen.Bookie.head`)."""
        return await self._call(self._sync.head, bucket, key)

    async def get_many(
        self, bucket: str | bytes, keys: Iterable[str | bytes]
    ) -> list[bytes | None]:
        """Many values from one consistent state (see :meth:`inkpen.Bookie.get_many`)."""
        return await self._call(self._sync.get_many, bucket, keys)

    def keys(
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reverse: bool = False,
    ) -> AsyncFold[bytes]:
        """``async for key in handle.keys(bucket, start, end)``: keys in key order."""
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
        """``async for bucket, key, head in handle.heads(...)``: metadata in key order (see
        :meth:`inkpen.Bookie.heads`)."""
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

    def changes(
        self, since: int = 0, *, bucket: str | bytes | None = None, gaps: GapPolicy = "raise"
    ) -> AsyncFold[Change]:
        """``async for change in handle.changes(since)``: the change feed, in SQN order."""
        return self._fold(lambda: self._sync.changes(since, bucket=bucket, gaps=gaps))

    async def tictac_tree(
        self,
        bucket: str | bytes | None = None,
        *,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        segments: Iterable[int] | None = None,
        modified_range: tuple[float | None, float | None] | None = None,
    ) -> TicTacTree:
        """The tictac tree of the ledger (see :meth:`inkpen.Bookie.tictac_tree`)."""
        return await self._call(
            self._sync.tictac_tree,
            bucket,
            start=start,
            end=end,
            segments=segments,
            modified_range=modified_range,
        )

    async def head_only_get(
        self, bucket: str | bytes, key: str | bytes, subkey: str | bytes = b""
    ) -> bytes | None:
        """A head-only object's value (see :meth:`inkpen.Bookie.head_only_get`)."""
        return await self._call(self._sync.head_only_get, bucket, key, subkey)

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
        reverse: bool = False,
    ) -> AsyncFold[tuple[bytes, bytes, bytes]]:
        """``async for bucket, key, value in handle.objects(...)``, in key or write order."""
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
        """``async for key in handle.index_query(...)`` (see :meth:`inkpen.Bookie.index_query`)."""
        return self._fold(
            lambda: self._sync.index_query(
                bucket, field, start, end, regex=regex, return_terms=return_terms, reverse=reverse
            )
        )

    def buckets(self) -> AsyncFold[bytes]:
        """``async for bucket in handle.buckets()``: buckets holding a live object."""
        return self._fold(self._sync.buckets)

    async def is_empty(self) -> bool:
        """True when no bucket holds a live object."""
        return await self._call(self._sync.is_empty)


class AsyncSnapshot(_AsyncReads[Snapshot]):
    """An isolated view (see :class:`inkpen.Snapshot`); ``async with`` releases it."""

    @property
    def ledger_only(self) -> bool:
        return self._sync.ledger_only

    async def close(self) -> None:
        """Release the snapshot's registrations. Idempotent."""
        await self._call(self._sync.close)

    async def __aenter__(self) -> AsyncSnapshot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncHotBackup:
    """What ``await book.hot_backup()`` answers: ``await backup(dest)`` copies the journal as it
    was then into ``dest`` (see :meth:`inkpen.Bookie.hot_backup`); ``await backup.close()``
    gives the journal snapshot back without copying."""

    def __init__(self, sync: HotBackup, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self._sync = sync
        self._pool = pool

    @property
    def sync(self) -> HotBackup:
        """The synchronous :class:`inkpen.HotBackup` underneath."""
        return self._sync

    async def __call__(self, destination: str | ObjectStore) -> BackupReport:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._sync, destination)

    async def close(self) -> None:
        """Release the snapshot without (further) copying. Idempotent."""
        await asyncio.get_running_loop().run_in_executor(self._pool, self._sync.close)

    async def __aenter__(self) -> AsyncHotBackup:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncTransaction(_AsyncOver[Transaction]):
    """A transaction for asyncio code (see :class:`inkpen.Transaction`): reads and the commit
    run in the handle's worker threads; ``async with`` commits, or rolls back on an exception."""

    def _refuse_closed(self) -> None:
        self._sync._check_usable()

    @property
    def isolation(self) -> str:
        return self._sync.isolation

    @property
    def snapshot_sqn(self) -> int:
        return self._sync.snapshot_sqn

    @property
    def state(self) -> str:
        return self._sync.state

    async def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The value as the transaction sees it (see :meth:`inkpen.Transaction.get`)."""
        return await self._call(self._sync.get, bucket, key)

    async def get_many(
        self, bucket: str | bytes, keys: Iterable[str | bytes]
    ) -> list[bytes | None]:
        """Many values as the transaction sees them (see :meth:`inkpen.Transaction.get_many`)."""
        return await self._call(self._sync.get_many, bucket, keys)

    async def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The metadata as the transaction sees it (see :meth:`inkpen.Transaction.head`)."""
        return await self._call(self._sync.head, bucket, key)

    def keys(
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reverse: bool = False,
    ) -> AsyncFold[bytes]:
        """``async for key in txn.keys(bucket, start, end)``: keys as the transaction sees them."""
        return self._fold(lambda: self._sync.keys(bucket, start, end, reverse=reverse))

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
        reverse: bool = False,
    ) -> AsyncFold[tuple[bytes, bytes, bytes]]:
        """``async for bucket, key, value in txn.objects(...)`` (see
        :meth:`inkpen.Transaction.objects`)."""
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
        """``async for key in txn.index_query(...)`` (see
        :meth:`inkpen.Transaction.index_query`)."""
        return self._fold(
            lambda: self._sync.index_query(
                bucket, field, start, end, regex=regex, return_terms=return_terms, reverse=reverse
            )
        )

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
        """Buffer a put (see :meth:`inkpen.Transaction.put`); nothing waits."""
        self._sync.put(bucket, key, value, indexes=indexes, ttl=ttl, if_sqn=if_sqn)

    async def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a delete (see :meth:`inkpen.Transaction.delete`); nothing waits."""
        self._sync.delete(bucket, key, indexes=indexes, if_sqn=if_sqn)

    async def commit(self) -> None:
        """Write the buffered changes atomically (see :meth:`inkpen.Transaction.commit`)."""
        await self._call(self._sync.commit)

    async def rollback(self) -> None:
        """Discard the buffered changes and end the transaction."""
        await self._call(self._sync.rollback)

    async def close(self) -> None:
        """Roll back if still open. Idempotent."""
        await self._call(self._sync.close)

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if self._sync.state != "open":
            return
        if exc_type is not None:
            await self.close()
        else:
            await self.commit()


async def retrying(
    fn: Callable[[], Awaitable[T]],
    attempts: int | None = None,
    *,
    deadline: float | None = RETRY_DEADLINE,
    base_delay: float = 0.001,
    max_delay: float = 0.1,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """:func:`inkpen.retrying` for coroutines: ``await retrying(fn)`` awaits ``fn()`` again on
    :class:`~inkpen.ConflictError`, waiting (without a thread) a jittered, growing delay, until
    ``deadline`` seconds (10 by default) have passed since the first call, or ``attempts``
    calls when that is given; then the last conflict is raised."""
    backoff = Backoff(fn, attempts, deadline, base_delay, max_delay, sleep, clock)
    started = clock()
    attempt = 0
    while True:
        pending = fn()
        if not inspect.isawaitable(pending):
            raise UsageError(
                f"retrying awaits what fn() returns; fn returned {pending!r:.80} (pass an async "
                "function, or use inkpen.retrying for plain ones)"
            )
        try:
            return await pending
        except ConflictError:
            wait = backoff.delay(attempt)
            attempt += 1
            if not backoff.goes_on(attempt, clock() - started + wait):
                raise
        if wait > 0:
            await sleep(wait)


class _Ending(Protocol):
    """What ``_Begun`` answers: a transaction that ends with its ``async with`` block."""

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None: ...


A = TypeVar("A", bound=_Ending)


class _Begun(Generic[A]):
    """What ``transaction`` answers: await it for the transaction, or use it with ``async
    with`` (which commits at the end, or rolls back on an exception)."""

    def __init__(
        self,
        make: Callable[[], Awaitable[A]],
        entered: dict[asyncio.Task[Any], list[A]] | None = None,
    ) -> None:
        self._make = make
        self._handle: A | None = None
        self._entered = entered
        """Per task, the transactions whose ``async with`` block it is in (the Bookie's)."""
        self._task: asyncio.Task[Any] | None = None

    def __await__(self) -> Generator[Any, None, A]:
        return self._make().__await__()

    async def __aenter__(self) -> A:
        self._handle = await self._make()
        task = asyncio.current_task()
        if self._entered is not None and task is not None:
            self._task = task
            self._entered.setdefault(task, []).append(self._handle)
        return self._handle

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._handle is not None:
                await self._handle.__aexit__(exc_type, exc, tb)
        finally:
            if self._entered is not None and self._task is not None:
                held = self._entered.get(self._task, [])
                if self._handle in held:
                    held.remove(self._handle)
                if not held:
                    self._entered.pop(self._task, None)


class _Waits:
    """The futures of the batches this handle's puts wait on, one per (loop, batch)."""

    def __init__(self) -> None:
        self._futures: dict[tuple[asyncio.AbstractEventLoop, WriteGroup], asyncio.Future[None]] = {}

    def future(self, loop: asyncio.AbstractEventLoop, batch: WriteGroup) -> asyncio.Future[None]:
        """The future ``batch`` settles in ``loop``; called in the loop's thread only."""
        slot = (loop, batch)
        fut = self._futures.get(slot)
        if fut is None:
            fut = loop.create_future()
            self._futures[slot] = fut
            batch.add_done_callback(
                lambda b: loop.call_soon_threadsafe(self._settle, loop, b)  # the one hand-off
            )
        return fut

    def _settle(self, loop: asyncio.AbstractEventLoop, batch: WriteGroup) -> None:
        fut = self._futures.pop((loop, batch))
        if fut.done():
            return
        if batch.error is not None:
            fut.set_exception(batch.error)
            fut.exception()  # waiters that were cancelled must not leave it "never retrieved"
        else:
            fut.set_result(None)


class AsyncBookie(_AsyncReads[Bookie]):
    """An open, writable database for asyncio code; get one with ``inkpen.aio.open``."""

    def __init__(
        self,
        sync: Bookie,
        engine: Engine,
        pool: concurrent.futures.ThreadPoolExecutor,
        fold_chunk: int = FOLD_CHUNK,
    ) -> None:
        super().__init__(sync, pool, fold_chunk)
        self._engine = engine
        """The engine ``sync`` writes through: puts join its group commit without a thread."""
        self._meter = engine.meter
        self._waits = _Waits()
        self._entered: dict[asyncio.Task[Any], list[AsyncTransaction]] = {}
        """Per task, the open transactions whose ``async with`` block it is in."""

    @property
    def url(self) -> str:
        return self._sync.url

    @property
    def options(self) -> Options:
        return self._sync.options

    @property
    def closed(self) -> bool:
        return self._sync.closed

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
        """Store ``value``; returns once it is durable (see :meth:`inkpen.Bookie.put`)."""
        started = perf_counter()
        self._sync._check_open()
        self._sync._check_not_head_only("put")
        change = self._sync._changes.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn)
        await self._write([change])
        self._meter.put.record(perf_counter() - started, len(change.value or b""))

    async def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """A durable tombstone (see :meth:`inkpen.Bookie.delete`)."""
        started = perf_counter()
        self._sync._check_open()
        self._sync._check_not_head_only("delete")
        await self._write([self._sync._changes.delete(bucket, key, indexes, if_sqn=if_sqn)])
        self._meter.delete.record(perf_counter() - started)

    async def merge(
        self,
        bucket: str | bytes,
        key: str | bytes,
        operand: bytes,
        *,
        operator: str,
    ) -> None:
        """Fold ``operand`` onto the key's value with the named merge operator; returns once
        durable (see :meth:`inkpen.Bookie.merge`)."""
        started = perf_counter()
        self._sync._check_open()
        self._sync._check_not_head_only("merge")
        change = self._sync._changes.merge(bucket, key, operand, operator)
        await self._write([change])
        await self._record_merge_operators((operator,))  # only a merge that landed names it
        self._meter.put.record(perf_counter() - started)  # the writer counts the folded bytes

    async def _record_merge_operators(self, names: Iterable[str]) -> None:
        """Record the names of merges that landed (the first time: one manifest commit, off
        the loop; see :meth:`Engine.record_merge_operators`)."""
        engine = self._engine
        missing = [name for name in names if not engine.merge_operator_recorded(name)]
        if missing:
            # The handle closing meanwhile leaves the names unrecorded; the merge stands.
            with contextlib.suppress(UsageError):
                await self._call(engine.record_merge_operators, missing)

    async def write(self, batch: Batch) -> None:
        """Apply ``batch`` atomically; returns once durable (see :meth:`inkpen.Bookie.write`)."""
        started = perf_counter()
        changes = self._sync._batch_changes(batch)
        if changes:
            await self._write(changes)
            await self._record_merge_operators(merge_operators_of(changes))
            self._meter.write.record_many(
                perf_counter() - started, len(changes), value_bytes(changes)
            )

    async def mput(self, specs: Iterable[tuple[str, Any, Any, Any, Any]]) -> None:
        """Apply head-only changes as one durable batch (see :meth:`inkpen.Bookie.mput`)."""
        started = perf_counter()
        changes = self._sync._mput_changes(specs)
        if changes:
            await self._write(changes)
            self._meter.write.record_many(
                perf_counter() - started, len(changes), value_bytes(changes)
            )

    async def trim_journal(self) -> CompactionReport:
        """Drop the journal files a head-only store no longer needs (see
        :meth:`inkpen.Bookie.trim_journal`)."""
        return await self._call(self._sync.trim_journal)

    async def _write(self, changes: list[PendingChange]) -> None:
        """Write ``changes`` as one unit; a refusal is counted (the caller records success)."""
        try:
            await self._write_unit(changes)
        except BaseException as exc:
            self._meter.refused(exc)
            raise

    async def _write_unit(self, changes: list[PendingChange]) -> None:
        engine = self._engine
        delay = engine.admission()
        if delay is None:  # backpressure at STOP: wait for room in a worker thread
            await self._call(engine.wait_for_room)
        elif delay:
            await asyncio.sleep(delay)
        batch, unit = engine.submit(changes)
        durable = asyncio.shield(self._waits.future(asyncio.get_running_loop(), batch))
        timeout = self._sync.options.put_timeout
        if timeout is None:
            await durable
        else:
            try:
                await asyncio.wait_for(durable, timeout)
            except TimeoutError:
                raise put_timed_out(self.url, timeout) from None
        batch.check_unit(unit)  # a failed if_sqn condition: ConflictError

    def transaction(self, isolation: str = "snapshot") -> _Begun[AsyncTransaction]:
        """An :class:`AsyncTransaction` (see :meth:`inkpen.Bookie.transaction`): ``async with
        book.transaction() as txn`` commits at the block's end (rolls back on an exception);
        ``txn = await book.transaction()`` leaves that to ``await txn.commit()``."""

        async def make() -> AsyncTransaction:
            task = asyncio.current_task()
            for held in self._entered.get(task, ()) if task is not None else ():
                if held.state == "open":
                    raise UsageError(f"this task is in an open transaction: {NESTED}")
            txn = await self._call(self._sync.transaction, isolation)
            return AsyncTransaction(txn, self._pool, self._fold_chunk)

        return _Begun(make, self._entered)

    def snapshot(
        self, *, long_running: bool = False, ledger_only: bool = False
    ) -> _Opening[AsyncSnapshot]:
        """An :class:`AsyncSnapshot`: ``async with book.snapshot() as snap`` releases it at the
        block's end; ``snap = await book.snapshot()`` leaves that to ``await snap.close()``."""

        async def make() -> AsyncSnapshot:
            snap = await self._call(
                self._sync.snapshot, long_running=long_running, ledger_only=ledger_only
            )
            return AsyncSnapshot(snap, self._pool, self._fold_chunk)

        return _Opening(make)

    async def checkpoint(self, lifetime: float | None = None, *, name: str | None = None) -> str:
        """Record a checkpoint; returns its id (see :meth:`inkpen.Bookie.checkpoint`)."""
        return await self._call(self._sync.checkpoint, lifetime, name=name)

    async def create_feed_cursor(
        self, name: str, sqn: int = 0, *, lifetime: float | None = None, owner: str | None = None
    ) -> FeedCursor:
        """Create the named feed cursor at ``sqn`` (see
        :meth:`inkpen.Bookie.create_feed_cursor`)."""
        return await self._call(
            self._sync.create_feed_cursor, name, sqn, lifetime=lifetime, owner=owner
        )

    async def advance_feed_cursor(self, name: str, sqn: int) -> FeedCursor:
        """Move the named cursor forward to ``sqn``, renewing its lifetime; never back."""
        return await self._call(self._sync.advance_feed_cursor, name, sqn)

    async def delete_feed_cursor(self, name: str) -> None:
        """Delete the named cursor (``NotFoundError`` if there is none)."""
        await self._call(self._sync.delete_feed_cursor, name)

    async def feed_cursors(self) -> tuple[FeedCursor, ...]:
        """Every feed cursor in the latest manifest (expired ones too: see ``is_live``)."""
        return await self._call(self._sync.feed_cursors)

    @overload
    async def hot_backup(self) -> AsyncHotBackup: ...

    @overload
    async def hot_backup(self, dest: str | ObjectStore) -> BackupReport: ...

    async def hot_backup(
        self, dest: str | ObjectStore | None = None
    ) -> AsyncHotBackup | BackupReport:
        """Prepare a hot backup: ``backup = await book.hot_backup()``, then ``await backup(dest)``
        (see :meth:`inkpen.Bookie.hot_backup`).

        ``await book.hot_backup(dest)``, both steps in one, is deprecated: it warns with a
        ``DeprecationWarning`` and will go.
        """
        if dest is not None:
            warnings.warn(
                "book.hot_backup(dest) is deprecated: use backup = await book.hot_backup(), then "
                "await backup(dest), as with the synchronous Bookie",
                DeprecationWarning,
                stacklevel=2,
            )
        backup = AsyncHotBackup(await self._call(self._sync.hot_backup), self._pool)
        if dest is None:
            return backup
        return await backup(dest)

    def changes(
        self,
        since: int = 0,
        *,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
        wait: float | None = None,
    ) -> AsyncFold[Change]:
        """``async for change in book.changes(since)``: the change feed, in SQN order. With
        ``wait``, the tail of :meth:`inkpen.Bookie.changes`: between the changes it reads in a
        worker thread, it waits in the loop, holding no thread, for this writer's next applied
        batch, and ends once ``wait`` seconds pass with nothing new."""
        if wait is None:
            return super().changes(since, bucket=bucket, gaps=gaps)
        sync = self._sync
        return _AsyncTail(
            lambda: sync._start_tail(since, bucket, gaps, wait), self._call, self._fold_chunk
        )

    async def compact_journal(self) -> CompactionReport:
        """Run one journal compaction (see :meth:`inkpen.Bookie.compact_journal`)."""
        return await self._call(self._sync.compact_journal)

    async def compact_ledger(self) -> None:
        """Run ledger merges now (see :meth:`inkpen.Bookie.compact_ledger`)."""
        await self._call(self._sync.compact_ledger)

    async def flush(self) -> None:
        """Persist the ledger now (see :meth:`inkpen.Bookie.flush`)."""
        await self._call(self._sync.flush)

    async def run_gc(self, *, min_age: float | None = None, dry_run: bool = False) -> GcReport:
        """Run this writer's GC now (see :meth:`inkpen.Bookie.run_gc`)."""
        return await self._call(self._sync.run_gc, min_age=min_age, dry_run=dry_run)

    async def stats(self) -> Stats:
        """The writer's counters (see :meth:`inkpen.Bookie.stats`)."""
        return await self._call(self._sync.stats)

    async def metrics(self) -> Metrics:
        """Typed metrics (see :meth:`inkpen.Bookie.metrics`); read in the loop's thread, since
        they wait for nothing."""
        return self._sync.metrics()

    async def close(self) -> None:
        """Persist what memory holds and stop (see :meth:`inkpen.Bookie.close`)."""
        try:
            await self._call(self._sync.close)
        finally:
            self._pool.shutdown(wait=False)

    async def abandon(self) -> None:
        """Stop at once, persisting nothing more (see :meth:`inkpen.Bookie.abandon`)."""
        try:
            await self._call(self._sync.abandon)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncBookie:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<inkpen.aio.AsyncBookie {self.url} {state}>"


class AsyncReader(_AsyncReads[Reader]):
    """A read-only handle on a checkpoint for asyncio code; see :class:`inkpen.Reader`."""

    @property
    def checkpoint_id(self) -> str:
        return self._sync.checkpoint_id

    @property
    def manifest_id(self) -> int:
        return self._sync.manifest_id

    @property
    def following(self) -> bool:
        """True for a following Reader (``open_reader(url, follow=True)``)."""
        return self._sync.following

    @property
    def last_sqn(self) -> int:
        """The highest SQN this Reader sees now (read from memory: no store request)."""
        return self._sync.last_sqn

    async def refresh(self) -> bool:
        """A following Reader: catch up with the writer now (see :meth:`inkpen.Reader.refresh`)."""
        return await self._call(self._sync.refresh)

    def changes(
        self,
        since: int = 0,
        *,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
        wait: float | None = None,
    ) -> AsyncFold[Change]:
        """``async for change in reader.changes(since)``: the change feed, in SQN order. With
        ``wait`` (a following Reader), the tail of :meth:`inkpen.Reader.changes`: it waits for
        the follower's news in the loop, holding no thread, and ends once ``wait`` seconds pass
        with nothing new."""
        if wait is None:
            return super().changes(since, bucket=bucket, gaps=gaps)
        sync = self._sync
        return _AsyncTail(
            lambda: sync._start_tail(since, bucket, gaps, wait), self._call, self._fold_chunk
        )

    async def metrics(self) -> Metrics:
        """Typed metrics (see :meth:`inkpen.Reader.metrics`); read in the loop's thread, since
        they wait for nothing."""
        return self._sync.metrics()

    async def close(self) -> None:
        """Release the Reader's own checkpoint and its store (see :meth:`inkpen.Reader.close`)."""
        try:
            await self._call(self._sync.close)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Closable(Protocol):
    """What ``_Opening`` answers: a handle its ``async with`` block closes."""

    async def close(self) -> None: ...


class _Opening(Generic[H]):
    """What ``open`` answers: await it for the handle, or use it with ``async with``."""

    def __init__(self, make: Callable[[], Awaitable[H]]) -> None:
        self._make = make
        self._handle: H | None = None

    def __await__(self) -> Generator[Any, None, H]:
        return self._make().__await__()

    async def __aenter__(self) -> H:
        self._handle = await self._make()
        return self._handle

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            await self._handle.close()


def _pool(workers: int, fold_chunk: int) -> concurrent.futures.ThreadPoolExecutor:
    check_count("workers", workers, minimum=1, maximum=MAX_WORKERS)
    check_count("fold_chunk", fold_chunk, minimum=1, maximum=MAX_FOLD_CHUNK)
    return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="inkpen-aio")


async def _start(pool: concurrent.futures.ThreadPoolExecutor, opener: Callable[[], T]) -> T:
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, opener)
    except BaseException:
        pool.shutdown(wait=False)
        raise


def open(
    url: str | ObjectStore,
    options: Options | None = None,
    /,
    *,
    workers: int = DEFAULT_WORKERS,
    fold_chunk: int = FOLD_CHUNK,
    **overrides: Any,
) -> _Opening[AsyncBookie]:
    """Open the database at ``url`` for writing, as :func:`inkpen.open` does (fencing any older
    writer): ``book = await inkpen.aio.open(url)`` or ``async with inkpen.aio.open(url) as book``.

    ``workers``: threads for reads and maintenance calls; ``fold_chunk``: items a fold fetches
    per step. Other keywords are :class:`~inkpen.Options`.
    """
    pool = _pool(workers, fold_chunk)

    async def make() -> AsyncBookie:
        engine, opts = await _start(pool, lambda: _bookie.start_engine(url, options, overrides))
        book = _bookie.Bookie(engine, opts)
        book._opener = "inkpen.aio.open"  # named by calls after close
        return AsyncBookie(book, engine, pool, fold_chunk)

    return _Opening(make)


def open_reader(
    url: str | ObjectStore,
    options: Options | None = None,
    /,
    *,
    checkpoint: str | None = None,
    follow: bool = False,
    refresh_interval: float = 1.0,
    workers: int = DEFAULT_WORKERS,
    fold_chunk: int = FOLD_CHUNK,
    **overrides: Any,
) -> _Opening[AsyncReader]:
    """A read-only :class:`AsyncReader`, as :func:`inkpen.open_reader` opens a Reader (with
    ``follow=True``, one that keeps up with the writer and whose ``changes(wait=...)`` tails)."""
    pool = _pool(workers, fold_chunk)

    async def make() -> AsyncReader:
        reader = await _start(
            pool,
            lambda: _reader.open_reader(
                url,
                options,
                checkpoint=checkpoint,
                follow=follow,
                refresh_interval=refresh_interval,
                **overrides,
            ),
        )
        reader._opener = "inkpen.aio.open_reader"  # named by calls after close
        return AsyncReader(reader, pool, fold_chunk)

    return _Opening(make)


# The asyncio handle of sharded data sets, inkpen.aio.shards: imported last, as it builds on the
# classes above.
from . import shards  # noqa: E402
