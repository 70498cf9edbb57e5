"""The Inker's intake: where application threads leave changes for the next journal segment.

Puts from many threads must cost few actor messages, so a put does not message the Inker: it adds
its :class:`~inkpen.actors.journal.changes.Change` to the open :class:`Batch` under a lock and waits
on the batch's event. The intake tells the Inker only when a batch opens (its first change) or fills
up (``max_batch_bytes``); the Inker takes the whole batch in one step, writes it as one segment and
the Bookie releases every waiter of the batch at once (group commit).

The notifications are sent under the intake's lock (a tell only queues a message), so the Inker
sees a batch's "opened" before its "full", and every "full" before anything sent after it.

Once the Inker is fenced, fails for good or closes, :meth:`WriteIntake.shut` fails the open batch
and refuses later changes with the same error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from inkpen.actors.journal.changes import Change
from inkpen.errors import InkpenError
from inkpen.logs import get_logger

log = get_logger("inkpen.journal")


class Batch:
    """Changes bound for one journal segment, and the callers waiting for it to be settled.

    A whole batch is released at once, so waking its callers is on every put's path: each
    waiting caller parks on a lock of its own, and settling the batch releases those locks in
    one pass (no condition variable for the woken callers to queue on again).
    """

    __slots__ = (
        "_callbacks",
        "_guard",
        "_settled",
        "_waiters",
        "changes",
        "error",
        "opened_at",
        "weight",
    )

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.weight = 0
        self.opened_at = time.monotonic()
        self.error: BaseException | None = None
        self._settled = False
        self._waiters: list[threading.Lock] = []
        self._callbacks: list[Callable[[Batch], object]] = []
        self._guard = threading.Lock()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the batch is durable and visible, or raise why it is not.

        With ``timeout``: answers False if it is not settled after that many seconds (the
        batch goes on; the caller stops waiting for it)."""
        if not self._settled:
            gate = threading.Lock()
            gate.acquire()
            with self._guard:
                parked = not self._settled
                if parked:
                    self._waiters.append(gate)
            if parked and not gate.acquire(timeout=-1 if timeout is None else timeout):
                with self._guard:
                    if not self._settled:
                        self._waiters.remove(gate)
                        return False
        if self.error is not None:
            raise self.error
        return True

    def add_done_callback(self, callback: Callable[[Batch], object]) -> None:
        """Call ``callback(batch)`` once the batch is settled (at once if it already is).

        For waiters that must not park a thread (the asyncio handle): the callback runs in the
        thread that settles the batch, so it must only hand the news on (``call_soon_threadsafe``)
        and never block. An exception it raises is logged and dropped.
        """
        with self._guard:
            if not self._settled:
                self._callbacks.append(callback)
                return
        _run_callback(callback, self)

    def complete(self) -> None:
        self._settle()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._settle()

    def _settle(self) -> None:
        with self._guard:
            self._settled = True
            waiters, self._waiters = self._waiters, []
            callbacks, self._callbacks = self._callbacks, []
        for gate in waiters:
            gate.release()
        for callback in callbacks:
            _run_callback(callback, self)

    @property
    def done(self) -> bool:
        return self._settled


class WriteIntake:
    """Thread-safe gathering of changes into batches; owned by the Inker."""

    def __init__(self, max_batch_bytes: int) -> None:
        self._lock = threading.Lock()
        self._open: Batch | None = None
        self._max = max_batch_bytes
        self._on_open: Callable[[Batch], None] = _unconnected
        self._on_full: Callable[[Batch], None] = _unconnected
        self._shut: InkpenError | None = None

    def connect(self, on_open: Callable[[Batch], None], on_full: Callable[[Batch], None]) -> None:
        """Name the Inker's callbacks for a batch opening and a batch filling up."""
        with self._lock:
            self._on_open = on_open
            self._on_full = on_full

    def submit(self, change: Change) -> Batch:
        """Add a change to the open batch (opening one if needed) and return that batch."""
        with self._lock:
            if self._shut is not None:
                raise self._shut
            batch = self._open
            opened = batch is None
            if batch is None:
                batch = self._open = Batch()
            batch.changes.append(change)
            batch.weight += change.weight
            if opened:
                self._on_open(batch)
            if batch.weight >= self._max:
                self._open = None
                self._on_full(batch)
        return batch

    def take(self, batch: Batch | None = None) -> Batch | None:
        """Close and return the open batch (only if it is ``batch``, when one is named)."""
        with self._lock:
            current = self._open
            if current is None or (batch is not None and current is not batch):
                return None
            self._open = None
            return current

    def pending(self) -> bool:
        with self._lock:
            return self._open is not None

    def shut(self, error: InkpenError) -> None:
        """Refuse every later change with ``error`` and fail the open batch with it."""
        with self._lock:
            if self._shut is None:
                self._shut = error
            batch, self._open = self._open, None
        if batch is not None:
            batch.fail(error)

    @property
    def shut_error(self) -> InkpenError | None:
        return self._shut


def _run_callback(callback: Callable[[Batch], object], batch: Batch) -> None:
    try:
        callback(batch)
    except Exception as exc:  # a waiter's hand-off must not break the actor settling the batch
        log.warning("journal.batch_callback_failed", error=repr(exc))


def _unconnected(batch: Batch) -> None:
    raise RuntimeError("the write intake is not connected to an Inker yet")
