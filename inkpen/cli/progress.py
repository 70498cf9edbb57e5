"""Progress of long commands (backup, restore, verify, compact, gc): a bar or plain log lines.

On a terminal (stderr is a TTY) :func:`progress` draws a rich progress bar on stderr, removed when
the operation ends. Anywhere else (cron, CI, a pipe) it writes structlog events on the
``inkpen.cli`` logger instead, few enough to read: ``<event>.started`` with the total and its
unit when known, ``<event>.progress`` each time another tenth is done (or, without a known total,
at 1, 2, 4, 8... units), ``<event>.phase`` when a multi-step command moves on, and
``<event>.finished`` with what was done (when the operation counts anything) and how long it
took. An operation that only reports phases (``diff``, ``gc``) logs no total, count or unit.
A quick command (``log_lines=False``: ``info`` of a data set) shows its bar on a terminal and
writes nothing anywhere else: its lines would be noise in a pipe.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Literal, Protocol, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from inkpen.logs import get_logger

from .logconfig import CLI_LOGGER

Unit = Literal["files", "bytes", "steps"]
T = TypeVar("T")
WATCH_INTERVAL = 0.2

log = get_logger(CLI_LOGGER)


class Tracker(Protocol):
    """What a long operation reports its progress to."""

    def advance(self, amount: float = 1) -> None:
        """``amount`` more units are done."""

    def update(self, completed: float, *, total: float | None = None) -> None:
        """``completed`` units are done in all (and the total is now ``total``, if given)."""

    def phase(self, description: str) -> None:
        """The operation moved on to another step."""


class _BarTracker:
    def __init__(self, bar: Progress, row: TaskID) -> None:
        self._bar = bar
        self._row = row

    def advance(self, amount: float = 1) -> None:
        self._bar.advance(self._row, amount)

    def update(self, completed: float, *, total: float | None = None) -> None:
        if total is None:
            self._bar.update(self._row, completed=completed)
        else:
            self._bar.update(self._row, completed=completed, total=total)

    def phase(self, description: str) -> None:
        self._bar.update(self._row, description=description)


class _LogTracker:
    def __init__(self, event: str, total: float | None, unit: Unit) -> None:
        self._event = event
        self._total = total
        self._unit = unit
        self._completed = 0.0
        self._reported = 0.0
        self._next = self._threshold()

    def _threshold(self) -> float:
        if self._total:
            step = self._total / 10
            return (int(self._reported / step) + 1) * step
        return max(1.0, self._reported * 2)

    def advance(self, amount: float = 1) -> None:
        self.update(self._completed + amount)

    def update(self, completed: float, *, total: float | None = None) -> None:
        if total is not None and total != self._total:
            self._total = total
            self._next = self._threshold()
        self._completed = completed
        if completed >= self._next and completed > self._reported:
            self._reported = completed
            self._next = self._threshold()
            known = {} if self._total is None else {"total": _figure(self._total)}
            log.info(f"{self._event}.progress", done=_figure(completed), **known, unit=self._unit)

    def phase(self, description: str) -> None:
        log.info(f"{self._event}.phase", step=description)

    @property
    def completed(self) -> float:
        return self._completed

    def counted(self) -> bool:
        """Whether the operation counts its units: it knew a total or advanced at all."""
        return self._total is not None or self._completed > 0


class _Silent:
    """The tracker of a quick command off a terminal: it reports nothing."""

    def advance(self, amount: float = 1) -> None:
        return None

    def update(self, completed: float, *, total: float | None = None) -> None:
        return None

    def phase(self, description: str) -> None:
        return None


def _figure(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 3)


def on_terminal() -> bool:
    """True when stderr is an interactive terminal (progress bars), else log lines."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress(
    event: str,
    description: str,
    *,
    total: float | None = None,
    unit: Unit = "steps",
    log_lines: bool = True,
) -> Iterator[Tracker]:
    """Report the progress of one long operation named ``event`` (see the module docstring)."""
    if on_terminal():
        columns = [
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn() if unit == "bytes" else MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            yield _BarTracker(bar, bar.add_task(description, total=total))
        return
    if not log_lines:
        yield _Silent()
        return
    started = time.monotonic()
    tracker = _LogTracker(event, total, unit)
    log.info(f"{event}.started", step=description, **_counted(total, unit))
    yield tracker
    counted = tracker.counted()
    log.info(
        f"{event}.finished",
        **_counted(_figure(tracker.completed) if counted else None, unit, key="done"),
        seconds=round(time.monotonic() - started, 3),
    )


def _counted(figure: float | None, unit: Unit, *, key: str = "total") -> dict[str, float | str]:
    """``key`` and ``unit`` fields for a known figure; nothing for an operation that counts
    nothing (one that only reports its phases)."""
    return {} if figure is None else {key: figure, "unit": unit}


def watched(work: Callable[[], T], look: Callable[[], None]) -> T:
    """Run ``work`` in a worker thread and call ``look`` every few tenths of a second until it
    ends (for operations that report nothing themselves); answers what ``work`` returns."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="inkpen-cli") as pool:
        future = pool.submit(work)
        while not wait([future], timeout=WATCH_INTERVAL).done:
            look()
        look()
        return future.result()
