"""Conditional writes: the Inker's check of ``if_sqn`` against the state a segment is written on.

A change with ``if_sqn`` may be written only if its key's current SQN is ``if_sqn`` (0: the key is
absent — never written, deleted or expired). The check and the write are one step: the Inker
checks a batch's conditions immediately before it gives the batch SQNs and encodes it, on its own
thread, and nothing else assigns SQNs, so no write can come between the check and the append.

The state checked against is, per key, the newest of:

1. the changes accepted so far in the segment being built (earlier units of the same group
   commit, and earlier changes of the same unit), so two conditional puts on one key in one
   segment cannot both succeed;
2. segments the Inker has written whose batch the Bookie has not yet cached (``ApplyBatch`` is a
   tell: the published views may lag the journal by a segment or two);
3. the published views (the Bookie's cache, the Penciller's memory and files), which hold every
   segment whose batch has been settled (the Bookie publishes before it settles).

A unit whose condition fails is rejected whole with :class:`~inkpen.errors.ConflictError` (or,
when the state could not be read, a definite :class:`~inkpen.errors.StoreError`); the rest of the
segment is written without it. The check runs once per unit: an unknown-outcome
segment write is retried with the same bytes, never re-checked, so a conditional put whose first
attempt landed reports success, never a conflict with itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from inkpen.actors.journal.changes import Change
from inkpen.actors.journal.intake import Batch
from inkpen.actors.read.path import Views, read_head
from inkpen.actors.read.views import ViewBoard
from inkpen.errors import ConflictError, InkpenError, StoreError
from inkpen.formats.journal import JournalEntry, Kind

State = tuple[int, int | None]
"""A key's state as a written change leaves it: (SQN, expiry ms); SQN 0 means absent."""


class _BoardSource:
    __slots__ = ("_board",)

    def __init__(self, board: ViewBoard) -> None:
        self._board = board

    def views(self) -> Views:
        return self._board.take()


def _state_of(change_or_entry: Change | JournalEntry, sqn: int) -> State:
    if change_or_entry.kind == Kind.OBJECT:
        return sqn, change_or_entry.expiry_ms
    return 0, None


def _current(state: State, now_ms: int) -> int:
    sqn, expiry = state
    if expiry is not None and expiry <= now_ms:
        return 0
    return sqn


class ConditionChecker:
    """Owned by the Inker: remembers written segments until the views show them, and checks
    the conditions of a batch before it is written."""

    def __init__(self, board: ViewBoard) -> None:
        self._source = _BoardSource(board)
        self._unapplied: deque[tuple[Batch, tuple[JournalEntry, ...]]] = deque()
        self._uncached: dict[bytes, State] = {}
        """Keys of segments the Bookie could not cache (the views never show them)."""

    def written(self, batch: Batch, entries: tuple[JournalEntry, ...]) -> None:
        """A segment was written for ``batch``; its entries count until the views show them."""
        self._prune()
        self._unapplied.append((batch, entries))

    def _prune(self) -> None:
        unapplied = self._unapplied
        while unapplied and unapplied[0][0].done:
            batch, entries = unapplied.popleft()
            if batch.error is not None:
                for entry in entries:
                    self._uncached[entry.ledger_key] = _state_of(entry, entry.sqn)

    def check(self, batch: Batch, first_sqn: int, now_ms: int) -> list[Change]:
        """The changes of ``batch`` to write, in order; rejected units go to ``batch.rejected``.

        ``first_sqn`` is the SQN the first written change will get.
        """
        self._prune()
        recent: dict[bytes, State] = dict(self._uncached)
        for _, entries in self._unapplied:
            for entry in entries:
                recent[entry.ledger_key] = _state_of(entry, entry.sqn)
        accepted: list[Change] = []
        changes = batch.changes
        for unit, (start, end) in enumerate(batch.unit_bounds()):
            part: Sequence[Change] = changes[start:end]
            if not any(c.if_sqn is not None for c in part):
                for change in part:
                    recent[change.ledger_key] = _state_of(change, first_sqn + len(accepted))
                    accepted.append(change)
                continue
            local: dict[bytes, State] = {}
            failed: InkpenError | None = None
            for i, change in enumerate(part):
                key = change.ledger_key
                if change.if_sqn is not None:
                    try:
                        state = local.get(key) or recent.get(key) or self._stored(key, now_ms)
                    except InkpenError as exc:
                        failed = StoreError(
                            f"the condition on bucket {change.bucket!r} key {change.key!r} "
                            f"could not be checked ({exc}); nothing of this write was applied",
                            definite=True,
                        )
                        break
                    actual = _current(state, now_ms)
                    if actual != change.if_sqn:
                        failed = _conflict(change, actual)
                        break
                local[key] = _state_of(change, first_sqn + len(accepted) + i)
            if failed is not None:
                batch.rejected[unit] = failed
                continue
            recent.update(local)
            accepted.extend(part)
        return accepted

    def _stored(self, key: bytes, now_ms: int) -> State:
        head = read_head(self._source, key, now_ms)
        if head is None:
            return 0, None
        expiry = None if head.expires_at is None else round(head.expires_at * 1000)
        return head.sqn, expiry


def _conflict(change: Change, actual: int) -> ConflictError:
    expected = change.if_sqn
    assert expected is not None
    want = "absent" if expected == 0 else f"at SQN {expected}"
    found = "absent" if actual == 0 else f"at SQN {actual}"
    return ConflictError(
        f"conditional write to bucket {change.bucket!r} key {change.key!r} expected the key "
        f"{want} but it is {found}; nothing of this write was applied: read the key again "
        "(head, get), redo the change and write it with the new if_sqn",
        bucket=change.bucket,
        key=change.key,
        expected=expected,
        actual=actual,
    )
