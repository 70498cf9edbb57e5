"""Many independent store requests at once, up to a bound: the one way inkpen runs them.

A path that reads, writes, copies or deletes many objects that do not depend on each other (the
files a backup copies, the segments an open reads back, the manifests GC reads, the requests of a
``delete_many``) hands them to :func:`run_bounded`, which runs a function over them with at most
``limit`` calls in flight, and, when items are weighed, at most ``max_bytes`` of their weights
(a pipeline of reads holds what is in flight, never all of it), answering the results in the
items' order.

**How many at once.** Each store says how many requests are worth having in flight on it:
:func:`concurrency`, its class's ``concurrency`` constant (S3: the connection pool,
:data:`~inkpen.objectstore.s3_common.MAX_POOL_CONNECTIONS`; a local directory:
:data:`~inkpen.objectstore.local.LOCAL_CONCURRENCY`; memory: :data:`MEMORY_CONCURRENCY`), which a
wrapper passes on from the store it wraps unless it is given its own.

**Threads.** The calls run on one process-wide pool of up to :data:`MAX_THREADS` threads
(created as needed). A call made from one of those threads (a copy that itself deletes in a
batch, say) runs its items one after another in that thread: the outer call already holds the
concurrency, and a pool thread that waited on work queued behind it could deadlock the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from inkpen.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CONCURRENCY = 8
"""What :func:`concurrency` answers for a store that names no bound of its own."""
MEMORY_CONCURRENCY = 4
"""The memory store's bound: its requests take one lock, so more buys nothing, but more than one
keeps the concurrent paths exercised where unit tests run them."""
MAX_THREADS = 256
"""Threads of the shared pool at most (several paths, each within its own bound, at once)."""

_local = threading.local()
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def concurrency(store: object) -> int:
    """How many requests are worth having in flight at once on ``store`` (its ``concurrency``,
    :data:`DEFAULT_CONCURRENCY` when it names none)."""
    value = getattr(store, "concurrency", DEFAULT_CONCURRENCY)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return DEFAULT_CONCURRENCY
    return value


def _initializer() -> None:
    _local.worker = True


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=MAX_THREADS, thread_name_prefix="inkpen-io", initializer=_initializer
            )
        return _pool


def in_pool_thread() -> bool:
    """Whether the calling thread is one of the shared pool's."""
    return bool(getattr(_local, "worker", False))


def submit(function: Callable[..., R], *args: object) -> Future[R]:
    """Start ``function(*args)`` on the shared pool: a read ahead, whose caller bounds how many
    it has in flight (one run per input of a merge, the bytes of the files following the one
    being read). From a pool thread it runs at once, in that thread."""
    if in_pool_thread():
        future: Future[R] = Future()
        try:
            future.set_result(function(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future
    return _shared_pool().submit(function, *args)


def run_bounded(
    function: Callable[[T], R],
    items: Iterable[T],
    *,
    limit: int,
    weigh: Callable[[T], int] | None = None,
    max_bytes: int | None = None,
    done: Callable[[T, R], None] | None = None,
) -> list[R]:
    """``[function(item) for item in items]``, with at most ``limit`` calls in flight.

    ``weigh`` and ``max_bytes``: an item is started only while the weights of the items in
    flight and its own stay within ``max_bytes`` (one item alone is always started, whatever it
    weighs). ``done(item, result)`` is called as each call succeeds, one at a time (never two at
    once), in the order they finish. When a call raises, no more are started, the ones in
    flight are waited for, and the error of the first item (in ``items``' order) that failed is
    raised.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"limit must be an int >= 1, got {limit!r}")
    listed: Sequence[T] = items if isinstance(items, list | tuple) else list(items)
    if limit == 1 or len(listed) <= 1 or in_pool_thread():
        results: list[R] = []
        for item in listed:
            result = function(item)
            if done is not None:
                done(item, result)
            results.append(result)
        return results
    return _Run(function, listed, limit, weigh, max_bytes, done).run()


class _Run(Generic[T, R]):
    """One :func:`run_bounded` call over the shared pool."""

    def __init__(
        self,
        function: Callable[[T], R],
        items: Sequence[T],
        limit: int,
        weigh: Callable[[T], int] | None,
        max_bytes: int | None,
        done: Callable[[T, R], None] | None,
    ) -> None:
        self._function = function
        self._items = items
        self._limit = limit
        self._weigh = weigh
        self._max_bytes = max_bytes
        self._done = done
        self._cond = threading.Condition()
        self._flying = 0
        self._bytes = 0
        self._failed: dict[int, BaseException] = {}
        self._results: list[R | None] = [None] * len(items)

    def _room(self, weight: int) -> bool:
        if self._failed:
            return True
        if self._flying >= self._limit:
            return False
        if self._flying == 0 or self._max_bytes is None:
            return True
        return self._bytes + weight <= self._max_bytes

    def run(self) -> list[R]:
        pool = _shared_pool()
        for index, item in enumerate(self._items):
            weight = self._weigh(item) if self._weigh is not None else 0
            with self._cond:
                while not self._room(weight):
                    self._cond.wait()
                if self._failed:
                    break
                self._flying += 1
                self._bytes += weight
            future: Future[None] = pool.submit(self._one, index, item, weight)
            future.add_done_callback(_nothing)
        with self._cond:
            self._cond.wait_for(lambda: self._flying == 0)
            if self._failed:
                raise self._failed[min(self._failed)]
        return self._results  # type: ignore[return-value]

    def _one(self, index: int, item: T, weight: int) -> None:
        try:
            result = self._function(item)
        except BaseException as exc:
            with self._cond:
                self._failed[index] = exc
                self._flying -= 1
                self._bytes -= weight
                self._cond.notify_all()
            return
        with self._cond:
            self._results[index] = result
            try:
                if self._done is not None and not self._failed:
                    self._done(item, result)
            except BaseException as exc:
                self._failed[index] = exc
            finally:
                self._flying -= 1
                self._bytes -= weight
                self._cond.notify_all()


def _nothing(_: Future[None]) -> None:
    """A pool future's errors are the run's to report, never the pool's."""
