"""One timer thread per Bookie that delivers messages to actors at chosen times.

Actors never sleep in a handler to wait for time to pass: they ask the :class:`Scheduler` to send
them a message later (a flush deadline, a delete_pending poll with back-off, a merge poll, a
checkpoint refresh, a GC run) and carry on. Timers can be cancelled; a timer whose actor has
stopped is dropped silently. The thread sleeps on a condition until the earliest deadline, so an
idle Bookie wakes only when something is due.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any

import pykka

from inkpen.actors.base import send


class Timer:
    """A handle to one scheduled delivery; :meth:`cancel` stops it if it has not fired."""

    __slots__ = ("cancelled", "due")

    def __init__(self, due: float) -> None:
        self.due = due
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """Owns the timer heap and its thread; answers :meth:`after` and :meth:`stop`."""

    def __init__(self, name: str = "inkpen-scheduler") -> None:
        self._heap: list[tuple[float, int, Timer, pykka.ActorRef[Any], Any]] = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def after(self, delay: float, ref: pykka.ActorRef[Any], message: Any) -> Timer:
        """Tell ``ref`` ``message`` once ``delay`` seconds have passed."""
        due = time.monotonic() + max(0.0, delay)
        timer = Timer(due)
        with self._cond:
            if self._stopped:
                timer.cancel()
                return timer
            heapq.heappush(self._heap, (due, next(self._counter), timer, ref, message))
            if self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def stop(self) -> None:
        """Drop every pending timer and end the thread."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._stopped:
                    return
                _, _, timer, ref, message = heapq.heappop(self._heap)
            if not timer.cancelled:
                send(ref, message)
