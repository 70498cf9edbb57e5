"""Sharded data sets: N inkpen databases under one root, one writer each, routed by hash.

One database has one writer; a data set spreads the writes of one application over N of them,
as Riak spreads a ring over many Leveled vnodes. ``create(url, shards=N)`` writes the data set's
descriptor once and creates its databases; ``open(url)`` gives a :class:`ShardedBookie`, the
Bookie's object API over all of them. The routing (:func:`shard_of`) and the layout
(:func:`shard_url`, :func:`read_descriptor`, :func:`is_data_set`) are pure functions other code
(the Spark pipeline, another language) calls to find an object's shard without opening anything.

The descriptor, the exact hash and the shard URLs are specified in :mod:`inkpen._shard_layout`
and DESIGN.md section 14.
"""

from __future__ import annotations

from ._shard_layout import (
    DESCRIPTOR_KEY,
    HASH,
    MAX_SHARDS,
    VERSION,
    Descriptor,
    create,
    is_data_set,
    read_descriptor,
    shard_name,
    shard_of,
    shard_url,
)

__all__ = [
    "DESCRIPTOR_KEY",
    "HASH",
    "MAX_SHARDS",
    "VERSION",
    "Descriptor",
    "create",
    "is_data_set",
    "read_descriptor",
    "shard_name",
    "shard_of",
    "shard_url",
]
