"""inkpen: an embeddable object store on object storage, built as an actor system.

``inkpen.open(url)`` gives a :class:`Bookie`, the handle applications embed: put, get, head,
delete, index queries, folds, snapshots, checkpoints, hot backups, journal compaction.
``inkpen.open_reader(url)`` gives a read-only :class:`Reader` on a checkpoint, from any process.
``inkpen.aio`` has both for asyncio code (``await book.put(...)``). ``inkpen.backup``,
``inkpen.restore``, ``inkpen.destroy``, ``inkpen.list_databases`` and
``inkpen.forget_merge_operator`` work on whole databases (and sharded data sets) without a Bookie.
``inkpen.open_compactor(url)`` gives a :class:`Compactor`: merges and GC in a process of their
own, beside a writer opened with ``compaction="external"``. The seams an application may fill
are :class:`MergePolicy` (which merge comes next, over :class:`Levels`; the ``merge_policy``
option) and :class:`ObjectStore` (where the bytes live; any store may be passed to ``open``).
``metrics()`` on a Bookie or a Reader answers :class:`Metrics` (with a :class:`Histogram` per
kind of operation); ``inkpen.prometheus`` exports them (the ``prometheus`` extra).
``inkpen.shards`` spreads one application's objects over a data set of N databases, one writer
each, routed by a stable hash of (bucket, key); ``inkpen.aio.shards`` is its asyncio handle.
See README.md and DESIGN.md.

``import inkpen`` loads what :func:`open` needs; every other name is imported from its module on
first use (:mod:`inkpen._lazy`), so the asyncio face, the sharded handle, the admin operations,
the compactor and the S3 clients cost nothing until a program asks for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# In a checkout's root, the folders beside inkpen/ are its subpackages: see _checkout.
from inkpen import _checkout  # noqa: F401

# isort: split

from ._lazy import lazy_exports
from ._version import __version__
from .batch import Batch
from .bookie import Bookie, open
from .errors import (
    AlreadyExistsError,
    CheckpointLapsedError,
    ConflictError,
    CorruptionError,
    FeedGapError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from .options import MergeOperator, Options

if TYPE_CHECKING:
    from inkpen.actors.engine.bookie_actor import Stats
    from inkpen.actors.engine.compactor import Compactor, CompactorReport, open_compactor
    from inkpen.actors.engine.hot_backup import BackupReport, HotBackup
    from inkpen.actors.journal.inker_clerk import CompactionReport
    from inkpen.actors.kernel.meter import Histogram, Metrics
    from inkpen.actors.read.feed import Change
    from inkpen.actors.read.path import Head
    from inkpen.formats.tictac import TicTacTree
    from inkpen.manifest.gc import GcReport
    from inkpen.manifest.levels import Levels
    from inkpen.manifest.merge_policy import LeveledMergePolicy, MergeJob, MergePolicy
    from inkpen.manifest.model import FeedCursor
    from inkpen.objectstore import ObjectStore

    from . import aio, shards
    from .operations import (
        CopyReport,
        DatabaseName,
        DataSetCopyReport,
        backup,
        destroy,
        forget_merge_operator,
        list_databases,
        recorded_merge_operators,
        restore,
    )
    from .reader import Reader, open_reader
    from .snapshot import Snapshot
    from .transaction import Transaction, retrying

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Stats": "inkpen.actors.engine.bookie_actor",
        "Compactor": "inkpen.actors.engine.compactor",
        "CompactorReport": "inkpen.actors.engine.compactor",
        "open_compactor": "inkpen.actors.engine.compactor",
        "BackupReport": "inkpen.actors.engine.hot_backup",
        "HotBackup": "inkpen.actors.engine.hot_backup",
        "CompactionReport": "inkpen.actors.journal.inker_clerk",
        "Histogram": "inkpen.actors.kernel.meter",
        "Metrics": "inkpen.actors.kernel.meter",
        "Change": "inkpen.actors.read.feed",
        "Head": "inkpen.actors.read.path",
        "TicTacTree": "inkpen.formats.tictac",
        "GcReport": "inkpen.manifest.gc",
        "Levels": "inkpen.manifest.levels",
        "LeveledMergePolicy": "inkpen.manifest.merge_policy",
        "MergeJob": "inkpen.manifest.merge_policy",
        "MergePolicy": "inkpen.manifest.merge_policy",
        "FeedCursor": "inkpen.manifest.model",
        "ObjectStore": "inkpen.objectstore.base",
        "CopyReport": ".operations",
        "DatabaseName": ".operations",
        "DataSetCopyReport": ".operations",
        "backup": ".operations",
        "destroy": ".operations",
        "forget_merge_operator": ".operations",
        "list_databases": ".operations",
        "recorded_merge_operators": ".operations",
        "restore": ".operations",
        "Reader": ".reader",
        "open_reader": ".reader",
        "Snapshot": ".snapshot",
        "Transaction": ".transaction",
        "retrying": ".transaction",
    },
    submodules=("aio", "shards"),
)

__all__ = [
    "AlreadyExistsError",
    "BackupReport",
    "Batch",
    "Bookie",
    "Change",
    "CheckpointLapsedError",
    "CompactionReport",
    "Compactor",
    "CompactorReport",
    "ConflictError",
    "CopyReport",
    "CorruptionError",
    "DataSetCopyReport",
    "DatabaseName",
    "FeedCursor",
    "FeedGapError",
    "FencedError",
    "GcReport",
    "Head",
    "Histogram",
    "HotBackup",
    "InkpenError",
    "LeveledMergePolicy",
    "Levels",
    "MergeJob",
    "MergeOperator",
    "MergePolicy",
    "Metrics",
    "NotFoundError",
    "ObjectStore",
    "Options",
    "Reader",
    "Snapshot",
    "Stats",
    "StoreError",
    "TicTacTree",
    "Transaction",
    "UsageError",
    "__version__",
    "aio",
    "backup",
    "destroy",
    "forget_merge_operator",
    "list_databases",
    "open",
    "open_compactor",
    "open_reader",
    "recorded_merge_operators",
    "restore",
    "retrying",
    "shards",
]
