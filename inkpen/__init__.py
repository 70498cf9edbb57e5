"""inkpen: an embeddable object store on object storage, built as an actor system.

``inkpen.open(url)`` gives a :class:`Bookie`, the handle applications embed: put, get, head,
delete, index queries, folds, snapshots, checkpoints, hot backups, journal compaction.
``inkpen.open_reader(url)`` gives a read-only :class:`Reader` on a checkpoint, from any process.
``inkpen.open_compactor(url)`` gives a :class:`Compactor`: merges and GC in a process of their
own, beside a writer opened with ``compaction="external"``.
See README.md and DESIGN.md.
"""

from __future__ import annotations

from inkpen.actors.engine.compactor import Compactor, CompactorReport, open_compactor
from inkpen.actors.engine.hot_backup import BackupReport, HotBackup
from inkpen.actors.journal.clerk import CompactionReport
from inkpen.actors.read.path import Head
from inkpen.manifest.gc import GcReport

from ._version import __version__
from .bookie import Bookie, open
from .errors import (
    AlreadyExistsError,
    CheckpointLapsedError,
    CorruptionError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from .options import Options
from .reader import Reader, open_reader
from .snapshot import Snapshot

__all__ = [
    "AlreadyExistsError",
    "BackupReport",
    "Bookie",
    "CheckpointLapsedError",
    "CompactionReport",
    "Compactor",
    "CompactorReport",
    "CorruptionError",
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
    "UsageError",
    "__version__",
    "open",
    "open_compactor",
    "open_reader",
]
