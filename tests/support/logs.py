"""Capturing inkpen's log events in a test, from the stdlib loggers they are records of."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any


class _Collector(logging.Handler):
    def __init__(self, into: list[dict[str, Any]]) -> None:
        super().__init__(logging.DEBUG)
        self._into = into

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "inkpen_event", None)
        if event is None:
            return
        fields = dict(getattr(record, "inkpen_fields", {}))
        self._into.append(
            {"event": event, "log_level": record.levelname.lower(), "logger": record.name, **fields}
        )


@contextlib.contextmanager
def capture_logs(name: str = "inkpen") -> Iterator[list[dict[str, Any]]]:
    """Every event of the ``name`` loggers, at every level, while the block runs: dicts with
    ``event``, ``log_level``, ``logger`` and the event's fields (as structlog's capture_logs)."""
    events: list[dict[str, Any]] = []
    logger = logging.getLogger(name)
    handler = _Collector(events)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
