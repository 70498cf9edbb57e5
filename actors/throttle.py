"""Backpressure: how the actors slow writers down and then stop them, instead of growing memory.

The Bookie (ledger cache too big because the Penciller refuses pushes while L0 files wait to be
merged) and the Inker (too many unfolded segment bytes) each set a pressure level for their
reason. A put consults :meth:`Throttle.wait` before joining a batch: at ``SLOW`` it yields for a
moment so the actors catch up, at ``STOP`` it blocks until every reason drops below ``STOP`` or the
Bookie shuts down. Memory is thereby bounded by the ``STOP`` thresholds plus one batch per writer.
"""

from __future__ import annotations

import threading
import time

NONE = 0
SLOW = 1
STOP = 2

SLOW_DELAY = 0.002


class Throttle:
    """Pressure levels by reason, and the wait puts do before they enqueue."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._levels: dict[str, int] = {}
        self._level = NONE
        self._released = False

    @property
    def level(self) -> int:
        return self._level

    def levels(self) -> dict[str, int]:
        with self._cond:
            return dict(self._levels)

    def set(self, reason: str, level: int) -> None:
        with self._cond:
            if self._levels.get(reason, NONE) == level:
                return
            self._levels[reason] = level
            self._level = max(self._levels.values(), default=NONE)
            if self._level < STOP:
                self._cond.notify_all()

    def release(self) -> None:
        """Let every blocked writer go (the Bookie is shutting down)."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait(self) -> None:
        if self._level == NONE:
            return
        if self._level == SLOW:
            time.sleep(SLOW_DELAY)
        with self._cond:
            while self._level >= STOP and not self._released:
                self._cond.wait()
