"""The Inker's intake: where application threads leave changes for the next journal segment.

Puts from many threads must cost few actor messages, so a put does not message the Inker: it adds
its :class:`~inkpen.actors.journal.changes.PendingChange` to the open :class:`WriteGroup` (a batch
of the group commit) under a lock and waits on the batch's event. The intake tells the Inker only
when a batch opens (its first change) or fills up (``max_batch_bytes``); the Inker takes the
whole batch in one step, writes it as one segment and the Bookie releases every waiter of the
batch at once (group commit).

A **unit** is what one call submits: one change (``put``, ``delete``) or every change of one
application write batch (``Bookie.write``). Atomicity of a write batch rests on this rule, which
:meth:`WriteIntake.submit_unit` keeps: **a unit is never split across journal segments.** A segment
is one object, created whole or not at all, read back whole and rolled whole under one manifest
commit, so a unit inside one segment is all-or-nothing for every reader and after any crash. A
unit that would push the open batch past ``max_batch_bytes`` closes that batch first and opens a
new one; a unit larger than ``max_batch_bytes`` on its own gets a segment of its own. The Inker
may reject a unit whose condition (``if_sqn``) fails (:attr:`WriteGroup.rejected`): then none of its
changes is written, and the rest of the segment is written without them.

A batch that fills up is closed and waits in the intake, in the order batches closed, until the
Inker takes it (:meth:`WriteIntake.take_next`: the oldest closed batch first, then, when the Inker
asks for it, the open one), so batches become segments in the order they closed whatever the
Inker's window of segment writes in flight lets through meanwhile. The notifications are sent
under the intake's lock (a tell only queues a message); they only tell the Inker there is work.

Once the Inker is fenced, fails for good or closes, :meth:`WriteIntake.shut` fails the open batch
and refuses later changes with the same error.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from inkpen.actors.journal.changes import PendingChange, reaches_other_entries
from inkpen.actors.journal.guards import CommitGuard
from inkpen.errors import InkpenError
from inkpen.logs import get_logger

log = get_logger("inkpen.journal")

LOCAL_BATCH_BYTES = 32 * 1024 * 1024
"""A batch's bytes by default on a local directory (or in memory): several large values share
one segment, one write and one fsync (group commit by bytes); a segment of large values is
written from their own bytes, never joined (docs/writes.md, 'The life of a put')."""
OBJECT_STORE_BATCH_BYTES = 4 * 1024 * 1024
"""A batch's bytes by default on an object store, where a segment is one request."""


LOCAL_SEGMENTS_IN_FLIGHT = 2
"""Segment writes in flight by default on a local directory (or in memory)."""
OBJECT_STORE_SEGMENTS_IN_FLIGHT = 8
"""Segment writes in flight by default on an object store, where each is a round trip."""


def in_flight_limit(segments_in_flight: int | None, local: bool) -> int:
    """The Inker's ``segments_in_flight``: the option when it is set, else the default of the
    store (``local``: :func:`~inkpen.objectstore.base.is_local`)."""
    if segments_in_flight is not None:
        return segments_in_flight
    return LOCAL_SEGMENTS_IN_FLIGHT if local else OBJECT_STORE_SEGMENTS_IN_FLIGHT


def batch_limit(max_batch_bytes: int | None, local: bool) -> int:
    """The intake's ``max_batch_bytes``: the option when it is set, else the default of the
    store (``local``: :func:`~inkpen.objectstore.base.is_local`)."""
    if max_batch_bytes is not None:
        return max_batch_bytes
    return LOCAL_BATCH_BYTES if local else OBJECT_STORE_BATCH_BYTES


class WriteGroup:
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
        "conditional",
        "error",
        "expands",
        "guards",
        "merges",
        "opened_at",
        "rejected",
        "units",
        "weight",
    )

    def __init__(self) -> None:
        self.changes: list[PendingChange] = []
        self.units: list[int] = []
        """The end offset in ``changes`` of each unit, in submission order."""
        self.conditional = False
        """Whether any change carries a condition (the Inker checks them before writing)."""
        self.expands = False
        """Whether any change reaches index entries it does not name (a delete, a put with a
        ttl: :func:`~inkpen.actors.journal.changes.reaches_other_entries`); the Inker adds their
        specs before writing."""
        self.guards: dict[int, CommitGuard] = {}
        """The commit guards of transaction units (by unit number), checked with the
        conditions: :mod:`inkpen.actors.journal.guards`."""
        self.merges = False
        """Whether any change is a merge (the Inker folds its operand onto the key's value
        before writing: :mod:`inkpen.actors.write.conditions`)."""
        self.rejected: dict[int, InkpenError] = {}
        """Units the Inker refused (by unit number), with the error their caller gets."""
        self.weight = 0
        self.opened_at = time.monotonic()
        self.error: BaseException | None = None
        self._settled = False
        self._waiters: list[threading.Lock] = []
        self._callbacks: list[Callable[[WriteGroup], object]] = []
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

    def add_done_callback(self, callback: Callable[[WriteGroup], object]) -> None:
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

    def wait_unit(self, unit: int, timeout: float | None = None) -> bool:
        """:meth:`wait`, then raise the error of ``unit`` if the Inker rejected it."""
        if not self.wait(timeout):
            return False
        self.check_unit(unit)
        return True

    def check_unit(self, unit: int) -> None:
        """Raise the error of ``unit`` if the Inker rejected it (once the batch is settled)."""
        rejected = self.rejected.get(unit)
        if rejected is not None:
            raise rejected

    def unit_bounds(self) -> list[tuple[int, int]]:
        """(start, end) offsets in ``changes`` of each unit."""
        starts = [0, *self.units[:-1]]
        return list(zip(starts, self.units, strict=True))

    def complete(self) -> None:
        self._settle()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._settle()

    def finish(self, error: BaseException | None) -> bool:
        """Complete the batch (``error`` None) or fail it, unless it is settled already (then
        nothing changes); answers whether this call settled it. For a batch two threads may
        settle (the Bookie releasing it, the Inker failing it as it stops)."""
        with self._guard:
            if self._settled:
                return False
            self._settled = True
            if error is not None:
                self.error = error
            waiters, self._waiters = self._waiters, []
            callbacks, self._callbacks = self._callbacks, []
        for gate in waiters:
            gate.release()
        for callback in callbacks:
            _run_callback(callback, self)
        return True

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
        self._open: WriteGroup | None = None
        self._closed: deque[WriteGroup] = deque()
        """Batches closed (full) and not taken by the Inker yet, oldest first."""
        self._max = max_batch_bytes
        self._on_open: Callable[[WriteGroup], None] = _unconnected
        self._on_full: Callable[[WriteGroup], None] = _unconnected
        self._shut: InkpenError | None = None

    def connect(
        self, on_open: Callable[[WriteGroup], None], on_full: Callable[[WriteGroup], None]
    ) -> None:
        """Name the Inker's callbacks for a batch opening and a batch filling up."""
        with self._lock:
            self._on_open = on_open
            self._on_full = on_full

    def submit(self, change: PendingChange) -> tuple[WriteGroup, int]:
        """Add one change as a unit to the open batch (opening one if needed); returns that
        batch and the unit's number in it."""
        with self._lock:
            if self._shut is not None:
                raise self._shut
            batch = self._open
            opened = batch is None
            if batch is None:
                batch = self._open = WriteGroup()
            changes = batch.changes
            changes.append(change)
            batch.units.append(len(changes))
            batch.weight += change.weight
            if change.if_sqn is not None:
                batch.conditional = True
            if reaches_other_entries(change):
                batch.expands = True
            if change.operator is not None:
                batch.merges = True
            if opened:
                self._on_open(batch)
            if batch.weight >= self._max:
                self._close(batch)
        return batch, len(batch.units) - 1

    def _close(self, batch: WriteGroup) -> None:
        """Close the open ``batch`` (under the lock): it waits for the Inker in order."""
        self._open = None
        self._closed.append(batch)
        self._on_full(batch)

    def submit_unit(
        self, changes: list[PendingChange], guard: CommitGuard | None = None
    ) -> tuple[WriteGroup, int]:
        """Add ``changes`` as one unit, all in one batch and so in one segment (see the module
        docstring): a unit that does not fit the open batch closes it and starts the next.
        ``guard``: a transaction's commit conditions, checked by the Inker with the unit's."""
        weight = sum(c.weight for c in changes)
        conditional = guard is not None or any(c.if_sqn is not None for c in changes)
        expands = any(reaches_other_entries(c) for c in changes)
        merges = any(c.operator is not None for c in changes)
        with self._lock:
            if self._shut is not None:
                raise self._shut
            batch = self._open
            if batch is not None and batch.changes and batch.weight + weight > self._max:
                self._close(batch)  # written without this unit
                batch = None
            opened = batch is None
            if batch is None:
                batch = self._open = WriteGroup()
            batch.changes.extend(changes)
            batch.units.append(len(batch.changes))
            if guard is not None:
                batch.guards[len(batch.units) - 1] = guard
            batch.weight += weight
            batch.conditional = batch.conditional or conditional
            batch.expands = batch.expands or expands
            batch.merges = batch.merges or merges
            if opened:
                self._on_open(batch)
            if batch.weight >= self._max:
                self._close(batch)  # a unit above max_batch_bytes: a segment of its own
        return batch, len(batch.units) - 1

    def take_next(self, *, open_too: bool) -> WriteGroup | None:
        """The oldest closed batch; when none is closed and ``open_too``, the open batch, closed
        now; else None."""
        with self._lock:
            if self._closed:
                return self._closed.popleft()
            current = self._open
            if current is None or not open_too:
                return None
            self._open = None
            return current

    def close_open(self) -> list[WriteGroup]:
        """Close the open batch (it waits in order with the others) and answer every batch
        closed and not taken yet, oldest first (what a sync waits for)."""
        with self._lock:
            if self._open is not None:
                self._closed.append(self._open)
                self._open = None
            return list(self._closed)

    def pending(self) -> bool:
        """Whether a batch is open (a change is waiting for the next segment)."""
        with self._lock:
            return self._open is not None

    def shut(self, error: InkpenError) -> None:
        """Refuse every later change with ``error`` and fail the open batch and the closed ones
        with it."""
        with self._lock:
            if self._shut is None:
                self._shut = error
            batches = [*self._closed, *([self._open] if self._open is not None else [])]
            self._open = None
            self._closed.clear()
        for batch in batches:
            batch.fail(error)

    @property
    def shut_error(self) -> InkpenError | None:
        return self._shut


def _run_callback(callback: Callable[[WriteGroup], object], batch: WriteGroup) -> None:
    try:
        callback(batch)
    except Exception as exc:  # a waiter's hand-off must not break the actor settling the batch
        log.warning("journal.batch_callback_failed", error=repr(exc))


def _unconnected(batch: WriteGroup) -> None:
    raise RuntimeError("the write intake is not connected to an Inker yet")
