"""Commands over sharded data sets: ``info``, ``verify``, ``gc``, ``backup``, ``restore`` and
``diff`` given a data set's URL (a root holding ``inkpen-data-set.json``, see
:mod:`inkpen.shards`) act on each of its shards, the databases at ``URL/shard-NNNN``.

:func:`shard_urls` tells a data set from a database; :func:`each_shard` runs one command's
work on every shard, several at once, with one progress line per finished shard. Work that
draws progress of its own (a verify, a copy, a diff) runs the shards one after the other
instead (:func:`one_by_one`): each is parallel inside already, and two progress bars cannot
share a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from inkpen import shards
from inkpen.errors import UsageError

from .progress import progress
from .targets import checked_url

T = TypeVar("T")
SHARD_WORKERS = 4
"""Shards worked on at once by :func:`each_shard`."""


def shard_urls(url: str) -> list[str] | None:
    """The URLs of the shards of the data set at ``url``, in shard order; None when ``url`` is
    not a data set (a database, or nothing)."""
    checked_url(url, must_exist=False)
    if not shards.is_data_set(url):
        return None
    count = shards.read_descriptor(url).shards
    return [shards.shard_url(url, i) for i in range(count)]


def each_shard(event: str, url: str, urls: list[str], work: Callable[[str], T]) -> list[T]:
    """``work(shard_url)`` for every shard, :data:`SHARD_WORKERS` at a time, with progress;
    the answers in shard order. The first failure is raised once every shard has finished."""
    with (
        progress(event, f"{event} over the {len(urls)} shards of {url}", total=len(urls)) as bar,
        ThreadPoolExecutor(min(SHARD_WORKERS, len(urls)), thread_name_prefix=event) as pool,
    ):
        futures = [pool.submit(work, shard) for shard in urls]
        for future in futures:
            future.add_done_callback(lambda _f: bar.advance())
        wait(futures)
    return [future.result() for future in futures]


def one_by_one(urls: list[str], work: Callable[[str], T]) -> list[T]:
    """``work(shard_url)`` for every shard in turn (work that shows progress of its own)."""
    return [work(shard) for shard in urls]


def paired_shards(url_a: str, url_b: str) -> list[tuple[str, str]] | None:
    """The shard URLs of two data sets, paired by shard number; None when neither is a data
    set. One data set against a database, or data sets of different shard counts, is a
    :class:`UsageError` (shards compare only with the shard of the same number)."""
    a, b = shard_urls(url_a), shard_urls(url_b)
    if a is None and b is None:
        return None
    if a is None or b is None:
        which, other = (url_a, url_b) if a is not None else (url_b, url_a)
        raise UsageError(
            f"{which} is a sharded data set and {other} is not; compare a data set with "
            "another data set (shard by shard), or one shard's URL with a database"
        )
    if len(a) != len(b):
        raise UsageError(
            f"{url_a} has {len(a)} shards and {url_b} {len(b)}; data sets compare shard by "
            "shard, so their shard counts must be equal"
        )
    return list(zip(a, b, strict=True))
