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

structlog is imported on the first event a logger lets through (an application that never
enables inkpen's loggers never loads it): the level check comes first, on the stdlib logger.

Levels: INFO is quiet — summaries of open, close, flushes to L0, merges, rolls, compactions, GC
passes, backups — and WARNING is for what an operator should look at. Per-operation detail
(each segment written, each manifest commit, each file deleted, checkpoints refreshed) is DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

_Processor = Callable[[Any, str, MutableMapping[str, Any]], Any]


def _text(value: Any) -> Any:
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(_text(v)) for v in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value


_processors: list[_Processor] | None = None


def _chain() -> list[_Processor]:
    """inkpen's processor chain, built (and structlog imported) on the first event let through."""
    global _processors
    if _processors is None:
        import structlog

        render = structlog.processors.LogfmtRenderer(
            key_order=["event", "level"], sort_keys=True, bool_as_flag=False
        )

        def to_record(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
            """The last processor: the stdlib call's arguments (message, fields as extras)."""
            fields = {k: v for k, v in event_dict.items() if k not in ("event", "level")}
            flat = {k: _text(v) for k, v in event_dict.items()}
            return (
                (render(logger, method, flat),),
                {"extra": {"inkpen_event": event_dict.get("event"), "inkpen_fields": fields}},
            )

        _processors = [
            structlog.stdlib.add_log_level,
            structlog.processors.format_exc_info,
            to_record,
        ]
    return _processors


class InkpenLogger:
    """A named event logger: structlog's processors in front of the stdlib logger ``name``."""

    __slots__ = ("_bound", "_logger")

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)
        self._bound: Any = None

    @property
    def name(self) -> str:
        return self._logger.name

    def _emit(self, method: str, event: str, fields: dict[str, Any]) -> None:
        bound = self._bound
        if bound is None:
            import structlog

            bound = self._bound = structlog.wrap_logger(
                self._logger, processors=_chain(), wrapper_class=structlog.stdlib.BoundLogger
            )
        getattr(bound, method)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.DEBUG):
            self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.INFO):
            self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.WARNING):
            self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit("error", event, fields)


def get_logger(name: str) -> InkpenLogger:
    """The event logger for one area of inkpen (``inkpen.journal``, ``inkpen.manifest``, ...)."""
    return InkpenLogger(name)
