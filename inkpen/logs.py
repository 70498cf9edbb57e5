"""inkpen's loggers: structlog events with stable names, wherever the application wants them.

Every module logs through ``get_logger("inkpen.<area>")``; events carry a stable name
(``journal.segment_flush``, ``ledger.l0_flush``, ``manifest.commit``, ...) and key-value fields.
inkpen never configures logging itself:

- when the application has configured structlog (``structlog.configure``, or
  ``structlog.testing.capture_logs`` in a test), events go through that configuration;
- otherwise they go to the stdlib logger of that name, so they stay silent until the application
  (or the ``inkpen`` CLI) configures ``logging``, and are dropped by level before anything is
  formatted.
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


class InkpenLogger:
    """A named event logger that follows the application's structlog set-up, if any."""

    __slots__ = ("_name", "_stdlib")

    def __init__(self, name: str) -> None:
        self._name = name
        self._stdlib = structlog.wrap_logger(
            logging.getLogger(name),
            processors=_PROCESSORS,
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(self._name)
        return self._stdlib

    def debug(self, event: str, **fields: Any) -> None:
        self._target().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._target().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._target().warning(event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._target().error(event, **fields)


def get_logger(name: str) -> InkpenLogger:
    """The event logger for one area of inkpen (``inkpen.journal``, ``inkpen.manifest``, ...)."""
    return InkpenLogger(name)
