"""The writer's batched deleter: the deletes of its file clerks, gathered and sent together.

A file clerk whose owner confirmed that its file may go hands the file's name to the
:class:`Deleter` with a callback (:meth:`Deleter.delete`) and stays in delete_pending. The
deleter's thread waits up to :data:`GATHER_SECONDS` after the first name of a batch (less when
:data:`~inkpen.objectstore.base.DELETE_MANY_KEYS` names are waiting) for others, then sends them
all in one :meth:`~inkpen.objectstore.ObjectStore.delete_many` and tells each clerk the outcome
of its own key: None when the file is gone, else the key's error. A merge or a journal
compaction retires its inputs together, so their clerks' deletes share requests (one
``DeleteObjects`` on S3 for up to 1,000 of them) instead of one each; names that arrive while a
batch is being sent wait for the next one.

A writer fenced since its clerks were told to delete sends nothing more: ``refusal`` fails each
key of the batch with the fence (the clerks stay in delete_pending; a fenced writer's owner never
confirms a delete again).

Callbacks run on the deleter's thread and must only hand the outcome on (a clerk sends itself a
message). :meth:`Deleter.close` sends what is waiting (or, for a writer that stops as a crash
would, ``send=False``, drops it: those files are orphans the next GC removes) and ends the
thread; a name handed over after that is deleted at once, on the caller's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from inkpen.errors import InkpenError, StoreError
from inkpen.logs import get_logger
from inkpen.objectstore.base import DELETE_MANY_KEYS, ObjectStore

log = get_logger("inkpen.clerk")

GATHER_SECONDS = 0.02
"""How long a batch waits after its first name for others (bounded, so a clerk's delete is never
held back for long)."""

Outcome = Callable[[StoreError | None], object]
"""Told how one key's delete ended: None (the object is gone) or the error that kept it."""


class Deleter:
    """Gathers single deletes into batches sent from one thread (started on first use)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        gather: float = GATHER_SECONDS,
        refusal: Callable[[], InkpenError | None] = lambda: None,
    ) -> None:
        self._store = store
        self._gather = gather
        self._refusal = refusal
        """Asked before each batch: an error refuses every key of it (the writer was fenced
        since its clerks were told to delete: the newer writer owns the files now)."""
        self._cond = threading.Condition()
        self._waiting: dict[str, list[Outcome]] = {}
        self._first = 0.0
        self._closed = False
        self._thread: threading.Thread | None = None

    def delete(self, key: str, outcome: Outcome) -> None:
        """Delete ``key`` with the next batch; ``outcome`` is told how it ended."""
        with self._cond:
            if not self._closed:
                if not self._waiting:
                    self._first = time.monotonic()
                self._waiting.setdefault(key, []).append(outcome)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="inkpen-deleter", daemon=True
                    )
                    self._thread.start()
                self._cond.notify_all()
                return
        self._send({key: [outcome]})

    def close(self, *, send: bool = True) -> None:
        """Send what is waiting (``send``; else drop it), then end the thread. Idempotent."""
        with self._cond:
            if not send:
                self._waiting = {}
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _due(self) -> float | None:
        """Seconds until the waiting batch is due (0: now), None when nothing waits."""
        if not self._waiting:
            return None
        if self._closed or len(self._waiting) >= DELETE_MANY_KEYS:
            return 0.0
        return max(0.0, self._first + self._gather - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._cond:
                while (due := self._due()) != 0.0:
                    if due is None and self._closed:
                        return
                    self._cond.wait(due)
                batch, self._waiting = self._waiting, {}
            self._send(batch)

    def _send(self, batch: dict[str, list[Outcome]]) -> None:
        refused = self._refusal()
        failed: Mapping[str, StoreError]
        if refused is not None:
            error = StoreError(f"not deleted: {refused}", definite=True)
            failed = dict.fromkeys(batch, error)
        else:
            try:
                failed = self._store.delete_many(batch).failed
            except Exception as exc:  # a closed store, a bug: every key keeps its file for now
                error = exc if isinstance(exc, StoreError) else StoreError(repr(exc), definite=True)
                failed = dict.fromkeys(batch, error)
        for key, outcomes in batch.items():
            for outcome in outcomes:
                try:
                    outcome(failed.get(key))
                except Exception as exc:
                    log.warning("clerk.delete_outcome_failed", name=key, error=repr(exc))
