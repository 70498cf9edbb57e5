"""Backpressure: how the actors slow writers down and then stop them, instead of growing memory.

The Bookie (ledger cache too big because the Penciller refuses pushes while L0 files wait to be
merged) and the Inker (too many unrolled segment bytes) each set a pressure level for their
reason. A put consults :meth:`Throttle.wait` before joining a batch: at ``SLOW`` it yields for a
moment so the actors catch up, at ``STOP`` it blocks until every reason drops below ``STOP`` or
the writer halts. Memory is thereby bounded by the ``STOP`` thresholds plus one batch per writer.

States: *open* (puts wait by level) and *halted* (:meth:`halt`: the writer was fenced, stopped
writing after a store failure, or was closed). Halting is final and the first error wins: every
put blocked in :meth:`wait` and every later one raises it at once. A fenced writer can commit no
L0 write, merge or roll, so its pressure would never drop: without the halt its blocked puts
would wait for good.

A writer blocked at ``STOP`` for :data:`PROBE_AFTER` seconds asks ``probe`` (the manifest keeper's
fence check) at most once per that interval, so a writer that was fenced while nothing of its own
could tell it (no commit under way) still learns of it and halts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from inkpen.errors import FencedError, InkpenError
from inkpen.logs import get_logger

log = get_logger("inkpen.bookie")

NONE = 0
SLOW = 1
STOP = 2

SLOW_DELAY = 0.002
PROBE_AFTER = 2.0
"""Seconds a put waits at ``STOP`` before the fence probe is asked (then again each interval)."""


class Throttle:
    """Pressure levels by reason, and the wait puts do before they enqueue."""

    def __init__(self, probe: Callable[[], object] | None = None) -> None:
        self._cond = threading.Condition()
        self._levels: dict[str, int] = {}
        self._level = NONE
        self._error: InkpenError | None = None
        self._waiting = 0
        self._throttled = 0
        self._probe = probe
        self._probed_at = float("-inf")

    @property
    def level(self) -> int:
        return self._level

    @property
    def error(self) -> InkpenError | None:
        """Why the writer halted (None while it may write)."""
        return self._error

    @property
    def waiting(self) -> int:
        """How many puts are blocked at ``STOP`` right now."""
        return self._waiting

    @property
    def throttled(self) -> int:
        """How many puts were slowed or held since the writer opened (counted on the slow path
        only: a put at ``NONE`` touches no counter)."""
        return self._throttled

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

    def halt(self, error: InkpenError) -> None:
        """The writer can write no more: every blocked and later :meth:`wait` raises ``error``
        (the first one given; later calls change nothing)."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def wait(self) -> None:
        """Before a put joins a batch: yield at ``SLOW``, block at ``STOP``; raise once halted."""
        if self._error is not None:
            raise self._error
        if self._level == NONE:
            return
        if self._level == SLOW:
            time.sleep(SLOW_DELAY)
        with self._cond:
            self._throttled += 1
            self._waiting += 1
            try:
                while self._level >= STOP and self._error is None:
                    if not self._cond.wait(PROBE_AFTER) and self._error is None:
                        self._maybe_probe()
            finally:
                self._waiting -= 1
            if self._error is not None:
                raise self._error

    def admission(self) -> float | None:
        """How a put that must not block a thread (an asyncio task) is admitted: raises the
        halt error; answers 0.0 at ``NONE`` (go on), the delay to yield for at ``SLOW`` (then go
        on), and None at ``STOP`` (the caller must :meth:`wait`, in a thread of its own)."""
        if self._error is not None:
            raise self._error
        level = self._level
        if level == NONE:
            return 0.0
        if level == SLOW:
            with self._cond:
                self._throttled += 1
            return SLOW_DELAY
        return None  # counted by the wait that follows

    def _maybe_probe(self) -> None:
        """Called holding the lock after a full interval at ``STOP``; asks the probe unlocked."""
        now = time.monotonic()
        if self._probe is None or now - self._probed_at < PROBE_AFTER:
            return
        self._probed_at = now
        self._cond.release()
        try:
            self._probe()
        except FencedError:
            pass  # the probe has halted the writer through its fence callback
        except InkpenError as exc:
            log.warning("throttle.probe_failed", error=str(exc))
        finally:
            self._cond.acquire()
