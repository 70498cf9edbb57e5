"""News of changes for tails to wait on: the :class:`News` protocol and the writer's own.

A tail (``changes(since, wait=...)``) gives every change readable now, then waits for news: a
following Reader's comes from its :class:`~inkpen.actors.read.follower.Follower` (new views
published by a refresh), a writer's from :class:`Applied`, which the Bookie actor advances to a
batch's last SQN right after it has published the batch's ledger entries (the Inker published the
journal entries before), so a tail woken by it finds the batch readable. A tail waits in a thread
(:meth:`News.wait_for_change`) or, holding no thread, in an event loop woken by a listener
(:meth:`News.add_listener`). Neither polls: each commit wakes whoever waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from inkpen.logs import get_logger

log = get_logger("inkpen.news")


class News(Protocol):
    """What a tail waits on: a version that goes up with each change readable."""

    @property
    def version(self) -> int:
        """Goes up whenever more changes become readable."""
        ...

    @property
    def stopped(self) -> bool:
        """True once no change will come any more (the handle closed)."""
        ...

    def wait_for_change(self, version: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a version above ``version``; True if it came."""
        ...

    def add_listener(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` (quickly, in the publisher's thread) at each new version and when
        it stops; answers a function that removes it."""
        ...


class Applied:
    """The writer's news: the last SQN the Bookie actor has applied (every change up to it is
    readable), its waiters and listeners. Thread-safe."""

    def __init__(self, sqn: int = 0) -> None:
        self._sqn = sqn
        self._stopped = False
        self._changed = threading.Condition()
        self._listeners: list[Callable[[], object]] = []

    @property
    def version(self) -> int:
        """The last applied SQN."""
        return self._sqn

    @property
    def sqn(self) -> int:
        """The last applied SQN: the highest SQN of a change this writer has acknowledged (or
        found at open)."""
        return self._sqn

    @property
    def stopped(self) -> bool:
        return self._stopped

    def advance(self, sqn: int) -> None:
        """Every change up to ``sqn`` is readable now: wake the waiters."""
        with self._changed:
            if sqn <= self._sqn:
                return
            self._sqn = sqn
        self._notify()

    def stop(self) -> None:
        """No change will come any more: wake the waiters for good."""
        with self._changed:
            if self._stopped:
                return
            self._stopped = True
        self._notify()

    def wait_for_change(self, version: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._sqn == version and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return self._sqn != version

    def add_listener(self, callback: Callable[[], object]) -> Callable[[], None]:
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
                log.error("news.listener_failed", error=repr(exc))


__all__ = ["Applied", "News"]
