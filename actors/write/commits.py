"""The record of recent commits: which ledger keys changed at which SQN, for transactions.

A transaction commits only if nothing committed after its snapshot touched what it wrote (both
isolation levels) or read (``serializable``: the keys, and every key inside the ranges it
folded). Point keys could be checked against the published views, but a range cannot: a key
inserted into it and deleted again leaves no trace a fold would see. So the writer keeps this
record: for every journal segment written, the ledger keys its entries change (object keys, and
the index keys of their index specs, the ones a delete implies included) with their SQNs.

**Protocol** (the Inker's serial step is the only writer of the record; handles register):

1. A transaction *registers* before it takes its snapshot: its floor is :attr:`applied`, an SQN
   every change up to which the published views already show, so the snapshot it takes next
   sees at least that far. Then it raises its floor to its snapshot's own SQN.
2. Every segment the Inker writes is *added* (:meth:`add`), before the Inker takes its next
   batch; the views show it only later, so the record always holds the segments the views may
   not show yet.
3. The record is *trimmed* after each add: segments at or below the lowest floor of an open
   transaction (or, with none open, below :attr:`applied`) go, so with no transaction open it
   holds only the last few segments. Beyond ``limit`` keys the oldest segments go anyway, and
   :attr:`trimmed_through` says how far: a transaction whose snapshot is older than that can no
   longer be checked and conflicts, with a message that says so (conservative, never wrong).
4. At commit the Inker *checks* the transaction's guard (:meth:`conflict`) in the same step
   where it checks ``if_sqn``, against the record plus the changes accepted earlier in the same
   segment, so no commit can slip in between the check and the write.
5. A transaction *releases* its registration when it ends (commit, rollback, close).

Changes recorded for a segment whose write then failed only make later checks more
conservative. Expiry is not a change: a key whose ttl runs out after a snapshot does not
conflict.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping

from inkpen.actors.journal.guards import CommitGuard
from inkpen.formats.journal import JournalEntry
from inkpen.formats.keys import Tag, index_key, object_parts

TRIMMED = b""
"""What :meth:`CommitRecord.conflict` answers when the record no longer reaches back to the
guard's snapshot."""

_OBJECT_TAG = Tag.OBJECT.value


def changed_keys(entry: JournalEntry) -> list[bytes]:
    """The ledger keys a journal entry changes that a transaction may have read: its own key
    and the INDEX key of each of its index specs."""
    keys = [entry.ledger_key]
    specs = entry.index_specs
    if specs and entry.ledger_key[0] == _OBJECT_TAG:
        bucket, key = object_parts(entry.ledger_key)
        keys.extend(index_key(bucket, field, term, key) for _, field, term in specs)
    return keys


class CommitRecord:
    """Recently committed ledger keys with their SQNs; thread-safe (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._segments: deque[tuple[int, tuple[tuple[bytes, int], ...]]] = deque()
        """(last SQN, ((key, SQN), ...)) per segment, oldest first."""
        self._latest: dict[bytes, int] = {}
        """The newest recorded SQN of each key."""
        self._size = 0
        self._floors: dict[int, int] = {}
        self._next_token = 0
        self.applied = 0
        """An SQN every change up to which the published views show."""
        self.trimmed_through = 0
        """The newest SQN no longer in the record."""

    # -- transactions -----------------------------------------------------------------------

    def register(self) -> int:
        """Keep every change above what the views show now; returns the registration's token."""
        with self._lock:
            token = self._next_token
            self._next_token += 1
            self._floors[token] = self.applied
            return token

    def raise_floor(self, token: int, sqn: int) -> None:
        """The registration's snapshot sees everything up to ``sqn``: keep only what is above."""
        with self._lock:
            floor = self._floors.get(token)
            if floor is not None and sqn > floor:
                self._floors[token] = sqn

    def release(self, token: int) -> None:
        """End a registration (idempotent); the record is trimmed at the next add."""
        with self._lock:
            self._floors.pop(token, None)

    @property
    def registered(self) -> int:
        """Open registrations (transactions)."""
        return len(self._floors)

    @property
    def size(self) -> int:
        """Keys held."""
        return self._size

    # -- the Inker --------------------------------------------------------------------------

    def mark_applied(self, sqn: int) -> None:
        """The views show every change up to ``sqn``."""
        if sqn > self.applied:
            self.applied = sqn

    def add(self, entries: Iterable[JournalEntry]) -> None:
        """Record a written segment's entries, then trim."""
        pairs = tuple((key, entry.sqn) for entry in entries for key in changed_keys(entry))
        if not pairs:
            return
        with self._lock:
            latest = self._latest
            for key, sqn in pairs:
                latest[key] = sqn
            self._segments.append((pairs[-1][1], pairs))
            self._size += len(pairs)
            self._trim()

    def _trim(self) -> None:
        bound = min(self._floors.values(), default=self.applied)
        bound = min(bound, self.applied)
        segments = self._segments
        while segments and (segments[0][0] <= bound or self._size > self._limit):
            self._drop(segments.popleft())

    def _drop(self, segment: tuple[int, tuple[tuple[bytes, int], ...]]) -> None:
        last, pairs = segment
        latest = self._latest
        for key, sqn in pairs:
            if latest.get(key) == sqn:
                del latest[key]
        self._size -= len(pairs)
        if last > self.trimmed_through:
            self.trimmed_through = last

    def conflict(
        self, guard: CommitGuard, pending: Mapping[bytes, int]
    ) -> tuple[bytes, int] | None:
        """The first (ledger key, SQN) committed after ``guard.snapshot_sqn`` that the guard
        covers, ``(TRIMMED, trimmed_through)`` when the record no longer reaches back that far,
        or None. ``pending``: keys accepted earlier in the segment being built, with the SQNs
        they will get (all above any snapshot)."""
        since = guard.snapshot_sqn
        serializable = guard.isolation == "serializable"
        with self._lock:
            if self.trimmed_through > since:
                return TRIMMED, self.trimmed_through
            latest = self._latest
            points = (guard.written, guard.read) if serializable else (guard.written,)
            for keys in points:
                for key in keys:
                    sqn = pending.get(key) or latest.get(key, 0)
                    if sqn > since:
                        return key, sqn
            if not serializable or not guard.ranges:
                return None
            for lo, hi in guard.ranges:
                for key, sqn in pending.items():
                    if lo <= key < hi:
                        return key, sqn
                for last, pairs in reversed(self._segments):
                    if last <= since:
                        break
                    for key, sqn in pairs:
                        if sqn > since and lo <= key < hi:
                            return key, sqn
        return None


__all__ = ["TRIMMED", "CommitRecord", "changed_keys"]
