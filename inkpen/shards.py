"""Sharded data sets: N inkpen databases under one root, one writer each, routed by hash.

One database has one writer; a data set spreads the writes of one application over N of them,
as Riak spreads a ring over many Leveled vnodes. ``create(url, shards=N)`` writes the data set's
descriptor once and creates its databases; ``open(url)`` gives a :class:`ShardedBookie`, the
Bookie's API over all of them (its snapshots are :class:`ShardedSnapshot`, its transactions
:class:`ShardedTransaction`, its hot backups :class:`ShardedHotBackup`). The routing
(:func:`shard_of`) and the layout (:func:`shard_url`, :func:`read_descriptor`,
:func:`is_data_set`) are pure functions other code (the Spark pipeline, another language) calls
to find an object's shard without opening anything. :func:`list_checkpoints`,
:func:`create_checkpoint`, :func:`refresh_checkpoint`, :func:`delete_checkpoint` and
:func:`resolve_checkpoint` handle data-set checkpoints (one per shard under one id) without a
handle; :func:`open_reader` reads every shard at one of them.

``inkpen.backup``, ``restore``, ``destroy``, ``list_databases`` and ``inkpen.prometheus``
take data sets too; ``inkpen.aio.shards.open`` is the asyncio handle.

:func:`route_hash` is the routing hash of an already encoded (bucket, key) (``route_hash(bucket,
key) % N`` is ``shard_of``) and :func:`shards_of` the shards of many such pairs, for loops over
many rows.

The descriptor, the exact hash and the shard URLs are specified in :mod:`inkpen._shard_layout`
and docs/data-sets.md, 'The descriptor'.
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
from ._shard_parts import (
    DataSetBackupReport,
    ShardedHotBackup,
    ShardedSnapshot,
    ShardedTransaction,
)
from ._shard_reads import ShardPool
from ._shard_sets import (
    DataSetCheckpoint,
    create_checkpoint,
    delete_checkpoint,
    list_checkpoints,
    refresh_checkpoint,
    resolve_checkpoint,
)
from .errors import UsageError
from .options import Options
from .reader import Reader
from .reader import open_reader as _open_shard_reader

__all__ = [
    "DESCRIPTOR_KEY",
    "HASH",
    "MAX_SHARDS",
    "VERSION",
    "DataSetBackupReport",
    "DataSetCheckpoint",
    "Descriptor",
    "ShardedBookie",
    "ShardedHotBackup",
    "ShardedSnapshot",
    "ShardedTransaction",
    "create",
    "create_checkpoint",
    "delete_checkpoint",
    "is_data_set",
    "list_checkpoints",
    "open",
    "open_reader",
    "read_descriptor",
    "refresh_checkpoint",
    "resolve_checkpoint",
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


def open_reader(url: str, *, checkpoint: str | None = None, **options: Any) -> ShardedSnapshot:
    """A read-only view of every shard of the data set at ``url``: each shard's Reader (as
    ``inkpen.open_reader``), at its part of the data-set checkpoint ``checkpoint`` (its id or
    name; see :func:`create_checkpoint`), or else at a checkpoint of its own, made now and held
    until it is closed. It fences nobody and writes nothing but those checkpoints; it reads as a
    :class:`ShardedSnapshot` does (``get``, folds merged across shards, ``changes(shard=i)``...).
    Not one cut across the shards: each shard's state is the one its checkpoint pins."""
    opts = Options.build(None, **options)
    descriptor = read_descriptor(url)
    pinned: str | None = None
    if checkpoint is not None:
        found = resolve_checkpoint(url, checkpoint)
        if not found.complete:
            held = ", ".join(str(i) for i, _cp in found.checkpoints)
            raise UsageError(
                f"the data-set checkpoint {found.id} of {url} is held by shards {held} only (an "
                "interrupted create or delete): delete it and make another"
            )
        pinned = found.id
    pool = ShardPool(descriptor.shards)

    def one(index: int) -> Reader:
        return _open_shard_reader(shard_url(url, index), opts, checkpoint=pinned)

    try:
        readers = pool.gather(range(descriptor.shards), one, lambda _i, reader: reader.close())
    except BaseException:
        pool.close()
        raise
    return ShardedSnapshot(url, readers, pool, ledger_only=False, owns_pool=True)


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
