"""Sharded data sets: N inkpen databases under one root, one writer each, routed by hash.

One database has one writer; a data set spreads the writes of one application over N of them,
as Riak spreads a ring over many Leveled vnodes. ``create(url, shards=N)`` writes the data set's
descriptor once and creates its databases; ``open(url)`` gives a :class:`ShardedBookie`, the
Bookie's object API over all of them. The routing (:func:`shard_of`) and the layout
(:func:`shard_url`, :func:`read_descriptor`, :func:`is_data_set`) are pure functions other code
(the Spark pipeline, another language) calls to find an object's shard without opening anything;
:func:`route_hash` is the routing hash of an already encoded (bucket, key) (``route_hash(bucket,
key) % N`` is ``shard_of``) and :func:`shards_of` the shards of many such pairs, for loops over
many rows.

The descriptor, the exact hash and the shard URLs are specified in :mod:`inkpen._shard_layout`
and DESIGN.md section 14.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._shard_handle import ShardedBookie
from ._shard_layout import (
    DESCRIPTOR_KEY,
    HASH,
    MAX_SHARDS,
    VERSION,
    Descriptor,
    create,
    is_data_set,
    read_descriptor,
    route_hash,
    shard_name,
    shard_of,
    shard_url,
    shards_of,
)
from .errors import UsageError
from .options import Options

__all__ = [
    "DESCRIPTOR_KEY",
    "HASH",
    "MAX_SHARDS",
    "VERSION",
    "Descriptor",
    "ShardedBookie",
    "create",
    "is_data_set",
    "open",
    "read_descriptor",
    "route_hash",
    "shard_name",
    "shard_of",
    "shard_url",
    "shards_of",
]


def open(url: str, shards: Iterable[int] | None = None, **options: Any) -> ShardedBookie:
    """Open the data set at ``url`` (made by :func:`create`) as a :class:`ShardedBookie`.

    ``shards``: the shard numbers this process writes (None: every shard). A write routed to
    another shard is refused with :class:`UsageError`; reads of the others go through following
    Readers. ``options``: as for ``inkpen.open`` (see :class:`~inkpen.Options`), for every shard.
    A URL holding no data set is refused (:class:`~inkpen.NotFoundError`, saying what is there),
    before anything is opened.
    """
    opts = Options.build(None, **options)
    descriptor = read_descriptor(url)
    owned = _owned(shards, descriptor.shards)
    return ShardedBookie(url, descriptor, owned, opts)


def _owned(shards: Iterable[int] | None, count: int) -> frozenset[int]:
    if shards is None:
        return frozenset(range(count))
    if isinstance(shards, str | bytes) or not isinstance(shards, Iterable):
        raise UsageError(
            f"shards must be None (write every shard) or an iterable of shard numbers, got "
            f"{shards!r}"
        )
    chosen = list(shards)
    bad = [i for i in chosen if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < count]
    if bad:
        raise UsageError(
            f"shards names {bad[0]!r}, not a shard of this data set (shard numbers are ints "
            f"from 0 to {count - 1})"
        )
    return frozenset(chosen)
