"""Commands over sharded data sets: every command that takes a database URL takes a data
set's URL too (a root holding ``inkpen-data-set.json``, see :mod:`inkpen.shards`) and acts on
each of its shards, the databases at ``URL/shard-NNNN``, or on the one shard ``--shard I``
names; the few that cannot (``manifest`` without ``--shard``, ``lsm --html``, ``feed advance``)
say in one line what to run instead (exit status 2).

:func:`target` tells a data set from a database and applies ``--shard``; :func:`each_shard`
runs one command's work on every shard, several at once, with one progress line per finished
shard. Work that draws progress of its own (a verify, a copy, a diff) runs the shards one after
the other instead (:func:`one_by_one`): each is parallel inside already, and two progress bars
cannot share a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from inkpen import shards
from inkpen.errors import UsageError

from .progress import progress
from .targets import checked_url

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
SHARD_WORKERS = 4
"""Shards worked on at once by :func:`each_shard`."""
SHARD_HELP = "Given a sharded data set: only its shard I (the database URL/shard-NNNN)."


def shard_option(command: F) -> F:
    """The ``--shard I`` option of a command that takes a database or data set URL."""
    return click.option(
        "--shard",
        "shard",
        type=click.IntRange(0, shards.MAX_SHARDS - 1),
        default=None,
        metavar="I",
        help=SHARD_HELP,
    )(command)


@dataclass(frozen=True, slots=True)
class Target:
    """What a command acts on: one database (``url``), or a whole data set (``shards``)."""

    url: str
    """The database's URL: the URL given, or the shard ``--shard`` picked."""
    shards: list[str] | None
    """A whole data set's shard URLs, in shard order; None for one database."""


def target(url: str, shard: int | None) -> Target:
    """What ``URL [--shard I]`` names: a database, one shard of a data set, or a data set."""
    urls = shard_urls(url)
    if urls is None:
        if shard is not None:
            raise UsageError(
                f"--shard {shard} picks a shard of a sharded data set, and {url} is not one: "
                "leave --shard out"
            )
        return Target(url, None)
    if shard is not None:
        if shard >= len(urls):
            raise UsageError(
                f"{url} is a sharded data set of {len(urls)} shards: --shard takes 0 to "
                f"{len(urls) - 1}"
            )
        return Target(urls[shard], None)
    return Target(url, urls)


def refused(url: str, count: int, instead: str) -> UsageError:
    """The one-line refusal of a command that does not act on a whole data set."""
    return UsageError(f"{url} is a sharded data set of {count} shards; {instead}")


def shard_urls(url: str) -> list[str] | None:
    """The URLs of the shards of the data set at ``url``, in shard order; None when ``url`` is
    not a data set (a database, or nothing)."""
    checked_url(url, must_exist=False)
    if not shards.is_data_set(url):
        return None
    count = shards.read_descriptor(url).shards
    return [shards.shard_url(url, i) for i in range(count)]


def each_shard(
    event: str, url: str, urls: list[str], work: Callable[[str], T], *, quick: bool = False
) -> list[T]:
    """``work(shard_url)`` for every shard, :data:`SHARD_WORKERS` at a time, with progress;
    the answers in shard order. The first failure is raised once every shard has finished.
    ``quick``: work short enough to show no progress off a terminal (``info``)."""
    description = f"{event} over the {len(urls)} shards of {url}"
    with (
        progress(event, description, total=len(urls), log_lines=not quick) as bar,
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
