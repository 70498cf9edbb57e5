"""inkpen: an embeddable object store on object storage, built as an actor system.

``inkpen.open(url)`` gives a :class:`Bookie`, the handle applications embed: put, get, head,
delete, index queries, folds, snapshots, checkpoints, hot backups, journal compaction.
``inkpen.open_reader(url)`` gives a read-only :class:`Reader` on a checkpoint, from any process.
``inkpen.aio`` has both for asyncio code (``await book.put(...)``). ``inkpen.backup``,
``inkpen.restore``, ``inkpen.destroy`` and ``inkpen.list_databases`` work on whole databases
without a Bookie.
``inkpen.open_compactor(url)`` gives a :class:`Compactor`: merges and GC in a process of their
own, beside a writer opened with ``compaction="external"``.
See README.md and DESIGN.md.
"""

from __future__ import annotations

# In a checkout's root, the folders beside inkpen/ are its subpackages: see _checkout.
from inkpen import _checkout  # noqa: F401

# isort: split

from inkpen.actors.engine.compactor import Compactor, CompactorReport, open_compactor
from inkpen.actors.engine.hot_backup import BackupReport, HotBackup
from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.actors.read.feed import Change
from inkpen.actors.read.path import Head
from inkpen.formats.tictac import TicTacTree
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import FeedCursor

from . import aio
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
from .operations import CopyReport, backup, destroy, list_databases, restore
from .options import Options
from .reader import Reader, open_reader
from .snapshot import Snapshot

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
    "FeedCursor",
    "FeedGapError",
    "FencedError",
    "GcReport",
    "Head",
    "HotBackup",
    "InkpenError",
    "NotFoundError",
    "Options",
    "Reader",
    "Snapshot",
    "StoreError",
    "TicTacTree",
    "UsageError",
    "__version__",
    "aio",
    "backup",
    "destroy",
    "list_databases",
    "open",
    "open_compactor",
    "open_reader",
    "restore",
]
