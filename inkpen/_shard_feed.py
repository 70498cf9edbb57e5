"""Tailing one shard's change feed: ``ShardedBookie.changes(since, shard=i, wait=...)``.

A tail gives every change readable now, then waits for news and goes on; it ends once ``wait``
seconds pass with nothing new. It is a sequence of *steps*: the changes, and a
:class:`~inkpen.actors.read.feed.CaughtUp` whenever it has caught up, naming the news to wait on
(:class:`~inkpen.actors.kernel.news.News`) and the version it has seen. The caller does the
waiting: :func:`waiting` in its own thread, ``inkpen.aio`` in its event loop (through
``News.add_listener``, holding no thread).

Each shard's handle tails its own feed: a shard this handle writes through its Bookie, whose
news is the writer's applied SQN (every write acknowledged wakes it, however it was made); a
shard it does not write through a following Reader, whose news is its follower's (new views,
every ``refresh_interval`` or at once after ``refresh()``).
"""

from __future__ import annotations

from collections.abc import Iterator

from inkpen.actors.read.feed import CaughtUp, Change, GapPolicy, waiting

from .bookie import Bookie
from .reader import Reader

Step = Change | CaughtUp
"""A change, or a :class:`~inkpen.actors.read.feed.CaughtUp` to wait at."""


def tail(
    handle: Bookie | Reader, since: int, bucket: bytes | None, gaps: GapPolicy
) -> Iterator[Step]:
    """The steps of a tail of ``handle``'s feed above ``since`` (wait at each with
    :func:`~inkpen.actors.read.feed.waiting`, or in an event loop)."""
    steps, _seconds = handle._start_tail(since, bucket, gaps, 0.0)
    return steps


__all__ = ["Step", "tail", "waiting"]
