"""inkpen: an embeddable object store on object storage, built as an actor system.

``inkpen.open(url)`` gives a :class:`Bookie`, the handle applications embed: put, get, head,
delete, index queries, folds, snapshots, journal compaction. See README.md and DESIGN.md.
"""

from __future__ import annotations

from inkpen.actors.inker_clerk import CompactionReport
from inkpen.actors.reads import Head

from ._version import __version__
from .bookie import Bookie, open
from .errors import (
    AlreadyExistsError,
    CorruptionError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from .options import Options
from .snapshot import Snapshot

__all__ = [
    "AlreadyExistsError",
    "Bookie",
    "CompactionReport",
    "CorruptionError",
    "FencedError",
    "Head",
    "InkpenError",
    "NotFoundError",
    "Options",
    "Snapshot",
    "StoreError",
    "UsageError",
    "__version__",
    "open",
]
