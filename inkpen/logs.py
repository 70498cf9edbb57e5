"""inkpen's loggers: stdlib ``logging`` loggers named ``inkpen.*``, with structlog as the formatter.

Every module logs through ``get_logger("inkpen.<area>")``; events carry a stable name
(``journal.segment_flush``, ``ledger.l0_flush``, ``manifest.commit``, ...) and key-value fields.
As structlog advises a library to do, inkpen never configures logging or structlog, and its events
never pass through the application's structlog configuration: each event is a record of the
stdlib logger of its area (``inkpen.journal``, ``inkpen.manifest``, ...), so the application's
``logging`` configuration alone routes, formats and silences them (``logging.getLogger("inkpen")
.setLevel(logging.WARNING)``), whatever it does with structlog for its own events. Until the
application (or the ``inkpen`` command) configures ``logging`` they go nowhere but Python's
last-resort handler (warnings and errors on stderr).

inkpen's own structlog processor chain (not the application's) turns an event into a record:
events below the logger's effective level are dropped before anything is formatted; the record's
message is the event as logfmt ``key=value`` text (``event=bookie.open level=info sqn=42 ...``,
values with spaces in double quotes, lists comma-separated)
and the record carries the event name and fields as ``inkpen_event`` and ``inkpen_fields``
attributes, for a formatter or filter that wants them structured (structlog's
``ProcessorFormatter`` renders the message as any foreign record).

Levels: INFO is quiet — summaries of open, close, flushes to L0, merges, rolls, compactions, GC
passes, backups — and WARNING is for what an operator should look at. Per-operation detail
(each segment written, each manifest commit, each file deleted, checkpoints refreshed) is DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

_RENDER = structlog.processors.LogfmtRenderer(
    key_order=["event", "level"], sort_keys=True, bool_as_flag=False
)


def _text(value: Any) -> Any:
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(_text(v)) for v in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value


def _to_record(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """The last processor: the stdlib call's arguments (message, and the fields as extras)."""
    fields = {k: v for k, v in event_dict.items() if k not in ("event", "level")}
    flat = {k: _text(v) for k, v in event_dict.items()}
    return (
        (_RENDER(_logger, _method, flat),),
        {"extra": {"inkpen_event": event_dict.get("event"), "inkpen_fields": fields}},
    )


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.stdlib.add_log_level,
    structlog.processors.format_exc_info,
    _to_record,
]


class InkpenLogger:
    """A named event logger: structlog's processors in front of the stdlib logger ``name``."""

    __slots__ = ("_bound", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._bound = structlog.wrap_logger(
            logging.getLogger(name),
            processors=_PROCESSORS,
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    @property
    def name(self) -> str:
        return self._name

    def debug(self, event: str, **fields: Any) -> None:
        self._bound.debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._bound.info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._bound.warning(event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._bound.error(event, **fields)


def get_logger(name: str) -> InkpenLogger:
    """The event logger for one area of inkpen (``inkpen.journal``, ``inkpen.manifest``, ...)."""
    return InkpenLogger(name)
