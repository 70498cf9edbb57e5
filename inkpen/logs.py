"""inkpen's loggers: structlog events with stable names, delivered through stdlib logging.

Every module logs with ``get_logger(__name__)``-style names under ``inkpen.``; events carry a
stable name (``journal.segment_flush``, ``ledger.l0_flush``, ``manifest.commit``, ...) and
key-value fields. inkpen does not configure structlog globally: events go to the stdlib logger of
that name, so they are silent until the application (or the ``inkpen`` CLI) configures logging,
and filtered by level before anything is formatted.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.stdlib.add_log_level,
    structlog.processors.format_exc_info,
    structlog.processors.KeyValueRenderer(key_order=["event", "level"], sort_keys=True),
]


def get_logger(name: str) -> Any:
    """A structlog logger bound to the stdlib logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
    )
