"""Reads ahead of a fold: the next blocks and files fetched on a shared pool while the fold
decodes the current ones, with at most a window of bytes read and not yet used.

A fold that reads ahead (key-order folds of a handle, a Spark partition; option
``read_ahead_bytes``) makes one :class:`ReadAhead`. Each source it merges hands it a
:class:`Stream` of the reads it will make, in the order it will make them: an L0 file's planned
reads, one level's files in key order (so the next file's first blocks are read while the
current file's last ones are decoded), the batches of a window's journal reads. The read-ahead
submits planned reads to a pool of :data:`READ_AHEAD_THREADS` threads the process shares,
taking the streams in turn, while the bytes submitted and not yet taken stay within the window;
a source takes each read when it gets there, waiting for it if it is still under way. A read a
source wants that is not under way yet (the window was full, or the source is ahead of its
plan) is made at once in the fold's own thread: a fold takes one read at a time, so at most one
read beyond the window is ever in flight, and the window never holds a fold up. A planned read
whose blocks the block cache holds when its turn comes is skipped (a warm scan reads nothing).

Closing the read-ahead (the fold is exhausted, closed or collected) cancels the reads not
started and drops the answers of those under way (their bytes leave the window as each ends);
no thread is made per fold. No lock is held while a read runs: the lock guards the streams'
bookkeeping only.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from inkpen.formats.fetching import Piece
from inkpen.formats.sst import SstReader

READ_AHEAD_THREADS = 16
"""Threads of the process's read-ahead pool: reads of every fold in flight at once."""
SEARCH_LIMIT = 1024
"""Planned reads a source may be ahead of its stream before it reads for itself."""

_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    """The process's read-ahead pool, made on first use (and again in a forked child, whose
    copy of the parent's pool has no threads)."""
    global _pool
    found = _pool
    pid = os.getpid()
    if found is None or found[0] != pid:
        with _pool_lock:
            found = _pool
            if found is None or found[0] != pid:
                pool = ThreadPoolExecutor(READ_AHEAD_THREADS, thread_name_prefix="inkpen-ahead")
                found = (pid, pool)
                _pool = found
    return found[1]


class Planned:
    """One planned read: who planned it (``owner``), what it covers (``piece``), how to make it
    (``read``), its size in bytes, and ``skip`` (true when its bytes are cached already)."""

    __slots__ = ("dropped", "future", "issued", "owner", "piece", "read", "size", "skip", "window")

    def __init__(
        self,
        owner: object,
        piece: Piece,
        read: Callable[[], Any],
        size: int,
        skip: Callable[[], bool] | None = None,
    ) -> None:
        self.owner = owner
        self.piece = piece
        self.read = read
        self.size = size
        self.skip = skip
        self.future: Future[Any] | None = None
        """Set once submitted; None while planned or skipped."""
        self.issued = False
        """Submitted, or skipped (its blocks were cached when its turn came)."""
        self.window = False
        """Whether its bytes count in the window now."""
        self.dropped = False


def sst_plan(
    files: Iterable[SstReader], lo: bytes | None, hi: bytes | None, reverse: bool
) -> Iterator[Planned]:
    """The planned reads of a scan of ``[lo, hi)`` over ``files`` (in the order the scan visits
    them: key order, or descending with ``reverse``), file after file."""
    for reader in files:
        for piece in reader.scan_plan(lo, hi, reverse=reverse):
            yield Planned(
                reader,
                piece,
                partial(reader.read_piece, piece),
                piece[1] - piece[0],
                partial(reader.holds_runs, piece),
            )


class Stream:
    """The planned reads of one source, in the order it takes them (see the module
    docstring); a source takes them with :meth:`take` (by owner and offset: an SST scan) or
    :meth:`take_next` (strictly in order: a window's journal reads)."""

    __slots__ = ("_ahead", "_cursor", "_plan", "_queue")

    def __init__(self, ahead: ReadAhead, plan: Iterator[Planned]) -> None:
        self._ahead = ahead
        self._plan: Iterator[Planned] | None = plan
        self._queue: deque[Planned] = deque()
        """Reads pulled from the plan, in order: submitted, skipped, or planned still."""
        self._cursor = 0
        """Every read of the queue before this place is submitted or skipped."""

    def _pull(self) -> Planned | None:
        """The next read of the plan, now at the end of the queue; None when it is spent."""
        plan = self._plan
        if plan is None:
            return None
        found = next(plan, None)
        if found is None:
            self._plan = None
            return None
        self._queue.append(found)
        return found

    def _next_to_issue(self) -> Planned | None:
        """The first read neither submitted nor skipped (pulled from the plan if needed)."""
        queue = self._queue
        cursor = self._cursor
        while cursor < len(queue) and queue[cursor].issued:
            cursor += 1
        self._cursor = cursor
        return queue[cursor] if cursor < len(queue) else self._pull()

    def _popleft(self) -> Planned:
        self._cursor = max(0, self._cursor - 1)
        return self._queue.popleft()

    def take(self, owner: object, offset: int) -> tuple[Piece, Any] | None:
        """The planned read of ``owner`` whose piece holds byte ``offset`` and its answer
        (waiting for it), dropping the reads planned before it; None when no read planned
        within :data:`SEARCH_LIMIT` holds it (the source then reads for itself)."""
        ahead = self._ahead
        with ahead.lock:
            queue = self._queue
            found = None
            for at, planned in enumerate(queue):
                piece = planned.piece
                if planned.owner is owner and piece[0] <= offset < piece[1]:
                    found = at
                    break
            while found is None and len(queue) < SEARCH_LIMIT:
                planned = self._pull()  # type: ignore[assignment]
                if planned is None:
                    break
                piece = planned.piece
                if planned.owner is owner and piece[0] <= offset < piece[1]:
                    found = len(queue) - 1
            if found is None:
                return None
            for _ in range(found):
                ahead.drop(self._popleft())
            wanted = self._popleft()
        return wanted.piece, ahead.answer(wanted)

    def take_next(self) -> Any:
        """The answer of the next planned read, in plan order (waiting for it)."""
        ahead = self._ahead
        with ahead.lock:
            wanted = self._popleft() if self._queue else self._pull_alone()
        return ahead.answer(wanted)

    def _pull_alone(self) -> Planned:
        found = self._pull()
        if found is None:
            raise IndexError("every planned read of this stream was taken")
        return self._popleft()

    def close(self) -> None:
        """Drop every read still planned or under way."""
        ahead = self._ahead
        with ahead.lock:
            while self._queue:
                ahead.drop(self._popleft())
            self._plan = None


class ReadAhead:
    """One fold's reads ahead, within ``window`` bytes (see the module docstring). Use as a
    context manager, or :meth:`close` it when the fold ends."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.lock = threading.RLock()
        self.held = 0
        """Bytes submitted and not yet taken or, dropped, not yet ended."""
        self._streams: list[Stream] = []
        self._closed = False

    def stream(self, plan: Iterable[Planned]) -> Stream:
        """A stream of ``plan`` (planned reads in the order its source takes them). Its reads
        start at :meth:`start`, or with the first read any stream takes, the streams in turn (a
        fold makes all its streams first, so that each source's first read is among the first
        made)."""
        found = Stream(self, iter(plan))
        with self.lock:
            if self._closed:
                raise RuntimeError("this read-ahead is closed")
            self._streams.append(found)
        return found

    def start(self) -> None:
        """Start the planned reads the window has room for (the streams in turn); taking a read
        does this too."""
        with self.lock:
            self._fill()

    def sst_stream(
        self, files: Iterable[SstReader], lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Stream:
        """A stream of the reads of a scan of ``[lo, hi)`` over ``files`` (:func:`sst_plan`)."""
        return self.stream(sst_plan(files, lo, hi, reverse))

    def answer(self, planned: Planned) -> Any:
        """The answer of a read just taken from its stream, waiting for it; a read not under
        way (the window was full, or the source got ahead of the plan) is made here and now,
        window or not, past the pool's queue. Its bytes leave the window."""
        with self.lock:
            future = planned.future
            if future is None:  # wanted now and not under way: read here, past the queue
                planned.issued = planned.window = True
                self.held += planned.size
            self._fill()  # the reads the window has room for go on meanwhile
        try:
            result = future.result() if future is not None else planned.read()
        except CancelledError:
            result = planned.read()  # cancelled by a close racing this take: read it here
        finally:
            with self.lock:
                self._release(planned)
                self._fill()
        return result

    def drop(self, planned: Planned) -> None:
        """Forget a read no one will take: cancel it, or let its bytes leave the window when it
        ends (called with the lock held)."""
        planned.dropped = True
        future = planned.future
        if future is None or future.cancel() or future.done():
            self._release(planned)
        # else: a read under way; its done callback releases it

    def close(self) -> None:
        """Cancel every read not started, drop the answers of those under way."""
        with self.lock:
            self._closed = True
            streams, self._streams = self._streams, []
            for found in streams:
                found.close()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (the lock held) --------------------------------------------------------------

    def _release(self, planned: Planned) -> None:
        if planned.window:
            planned.window = False
            self.held -= planned.size

    def _ended(self, planned: Planned, _: Future[Any]) -> None:
        with self.lock:
            if planned.dropped:
                self._release(planned)
                self._fill()

    def _submit(self, planned: Planned) -> None:
        planned.issued = True
        try:
            future = _shared_pool().submit(planned.read)
        except RuntimeError:  # the interpreter is shutting down: read when taken, here
            return
        planned.window = True
        self.held += planned.size
        planned.future = future
        future.add_done_callback(partial(self._ended, planned))

    def _fill(self) -> None:
        """Submit planned reads, the streams in turn, while the window has room."""
        if self._closed:
            return
        progress = True
        while progress and self.held < self.window:
            progress = False
            for found in self._streams:
                planned = found._next_to_issue()
                if planned is None:
                    continue
                skip = planned.skip
                if skip is not None and skip():
                    planned.issued = True  # skipped: its blocks are cached; taken, it is read
                    progress = True
                    continue
                if self.held + planned.size > self.window:
                    continue
                self._submit(planned)
                progress = True


__all__ = ["READ_AHEAD_THREADS", "Planned", "ReadAhead", "Stream", "sst_plan"]
