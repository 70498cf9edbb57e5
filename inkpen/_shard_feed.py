"""Tailing one shard's change feed: ``ShardedBookie.changes(since, shard=i, wait=...)``.

A tail gives every change readable now, then waits for news and goes on; it ends once ``wait``
seconds pass with nothing new. It is a sequence of *steps*: the changes, and a :class:`Pause`
whenever it has caught up, naming the news to wait on (:class:`~inkpen.actors.kernel.news.News`)
and the version it has seen. The caller does the waiting: :func:`waiting` in its own thread,
``inkpen.aio`` in its event loop (through ``News.add_listener``, holding no thread).

Each shard's handle tails its own feed: a shard this handle writes through its Bookie, whose
news is the writer's applied SQN (every write acknowledged wakes it, however it was made); a
shard it does not write through a following Reader, whose news is its follower's (new views,
every ``refresh_interval`` or at once after ``refresh()``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from inkpen.actors.kernel.news import News
from inkpen.actors.read.feed import CaughtUp, Change, GapPolicy

from .bookie import Bookie
from .reader import Reader


@dataclass(frozen=True)
class Pause:
    """A tail's step when every change readable so far was given: wait for ``news`` to move
    past ``version`` (at most the tail's ``wait`` seconds; none came: the tail ends)."""

    news: News
    version: int


Step = Change | Pause


def tail(
    handle: Bookie | Reader, since: int, bucket: bytes | None, gaps: GapPolicy
) -> Iterator[Step]:
    """The steps of a tail of ``handle``'s feed above ``since``."""
    steps, _seconds = handle._start_tail(since, bucket, gaps, 0.0)
    try:
        for step in steps:
            yield Pause(step.news, step.version) if isinstance(step, CaughtUp) else step
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
            elif not step.news.wait_for_change(step.version, wait):
                return
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            close()
