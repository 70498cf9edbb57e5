"""inkpen: an embeddable object store on object storage, built as an actor system.

The public face: errors now; ``open``, ``open_reader``, ``Bookie`` and ``Options`` as the engine
lands.
"""

from __future__ import annotations

from ._version import __version__
from .errors import (
    AlreadyExistsError,
    CorruptionError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)

__all__ = [
    "AlreadyExistsError",
    "CorruptionError",
    "FencedError",
    "InkpenError",
    "NotFoundError",
    "StoreError",
    "UsageError",
    "__version__",
]
