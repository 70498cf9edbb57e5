"""Tailing one shard's change feed: ``ShardedBookie.changes(since, shard=i, wait=...)``.

A tail gives every change readable now, then waits for news and goes on; it ends once ``wait``
seconds pass with nothing new. It is a sequence of *steps*: the changes, and a :class:`Pause`
whenever it has caught up, naming what to wait on (a :class:`Waker`) and the version it has
seen. The caller does the waiting: :func:`waiting` in its own thread, ``inkpen.aio`` in its
event loop (through :meth:`Waker.add_listener`, holding no thread).

What wakes a tail depends on who writes the shard:

- a shard this handle does not write is read through a following Reader, whose follower
  publishes new views when it finds the writer's new segments (every ``refresh_interval``, or
  at once after ``refresh()``): the Reader's own tail, whose waits are on its follower;
- a shard this handle writes is read through its Bookie, and its :class:`CommitWaker` is told
  of every write acknowledged through this handle (``put``, ``delete``, ``merge``, ``write``,
  ``mput``, a transaction's commit) as it returns: the tail wakes at once, with no polling.
  A write made through ``shard(i)``'s own Bookie directly is not announced; the tail finds it
  at its next wake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from inkpen.actors.read.feed import Change, GapPolicy, changes_in
from inkpen.logs import get_logger

from .bookie import Bookie
from .read_api import FoldIterator
from .reader import CaughtUp, Reader

log = get_logger("inkpen.shards")


class Waker(Protocol):
    """What a tail waits on: a version that goes up with news (a follower, a commit waker)."""

    @property
    def version(self) -> int: ...

    @property
    def stopped(self) -> bool: ...

    def wait_for_change(self, version: int, timeout: float) -> bool: ...

    def add_listener(self, callback: Callable[[], object]) -> Callable[[], None]: ...


class CommitWaker:
    """The news of one shard's writes made through one handle (see the module docstring)."""

    def __init__(self) -> None:
        self._version = 0
        self._stopped = False
        self._changed = threading.Condition()
        self._listeners: list[Callable[[], object]] = []

    @property
    def version(self) -> int:
        return self._version

    @property
    def stopped(self) -> bool:
        return self._stopped

    def bump(self) -> None:
        """A write was acknowledged: wake the tails."""
        with self._changed:
            self._version += 1
        self._notify()

    def stop(self) -> None:
        """The handle closed: nothing will change any more; the waiting tails end."""
        with self._changed:
            self._stopped = True
        self._notify()

    def wait_for_change(self, version: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a version newer than ``version``; True if it came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._version == version and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return self._version != version

    def add_listener(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` (in the writing thread, quickly) at every bump and at the stop;
        answers the function that removes it."""
        with self._changed:
            self._listeners.append(callback)

        def remove() -> None:
            with self._changed:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return remove

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback()
            except Exception as exc:  # one listener's failure must not keep news from the rest
                log.error("shards.listener_failed", error=repr(exc))


@dataclass(frozen=True)
class Pause:
    """A tail's step when every change readable so far was given: wait for ``waker`` to move
    past ``version`` (at most the tail's ``wait`` seconds; none came: the tail ends)."""

    waker: Waker
    version: int


Step = Change | Pause


def bookie_tail(
    book: Bookie, since: int, bucket: bytes | None, gaps: GapPolicy, waker: CommitWaker
) -> Iterator[Step]:
    """The steps of a tail of ``book``'s feed, woken by ``waker``."""
    position = since
    while True:
        version = waker.version  # before the scan: a write acknowledged during it wakes the next
        seen = [position]
        with _scan(book, position, bucket, gaps, seen) as changes:
            yield from changes
        position = seen[0]
        yield Pause(waker, version)


def _scan(
    book: Bookie, since: int, bucket: bytes | None, gaps: GapPolicy, seen: list[int]
) -> FoldIterator[Change]:
    """One scan of ``book``'s feed above ``since``, keeping ``seen[0]`` at the last SQN read."""
    return book._fold(
        lambda src, now: changes_in(src.views(), since, bucket=bucket, gaps=gaps, seen=seen),
        long_running=True,
    )


def reader_tail(
    reader: Reader, since: int, bucket: bytes | None, gaps: GapPolicy, wait: float
) -> Iterator[Step]:
    """The steps of a following Reader's tail (its own), its pauses on its follower."""
    steps, _seconds = reader._start_tail(since, bucket, gaps, wait)
    try:
        for step in steps:
            yield Pause(step.follower, step.version) if isinstance(step, CaughtUp) else step
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            close()


def waiting(steps: Iterator[Step], wait: float) -> Iterator[Change]:
    """The changes of a tail's steps, waiting in this thread at each :class:`Pause`."""
    try:
        for step in steps:
            if not isinstance(step, Pause):
                yield step
            elif not step.waker.wait_for_change(step.version, wait):
                return
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            close()
