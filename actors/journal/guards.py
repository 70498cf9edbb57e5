"""Commit guards: what a transaction's unit asks the Inker to check before it is written.

A transaction (:mod:`inkpen.transaction`) reads one snapshot, taken at SQN ``snapshot_sqn`` (every
change up to it visible, none after it), buffers its writes and commits them as one unit of the
write intake. Its :class:`CommitGuard` rides with that unit (:meth:`WriteIntake.submit_unit
<inkpen.actors.journal.intake.WriteIntake.submit_unit>`) and is checked in the Inker's serial step,
where ``if_sqn`` conditions are checked (:mod:`inkpen.actors.write.conditions`): the unit is written
only if no change committed after ``snapshot_sqn`` touched one of ``keys`` or fell inside one of
``ranges``. The guard writes nothing itself.

Keys and ranges are encoded ledger keys (:mod:`inkpen.formats.keys`): object keys for the keys a
transaction wrote or read, ``[lo, hi)`` object-key ranges for its key folds, index-key ranges for
its index queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Isolation = Literal["snapshot", "serializable"]
ISOLATIONS: tuple[Isolation, ...] = ("snapshot", "serializable")


@dataclass(frozen=True, slots=True)
class CommitGuard:
    """The conditions of one transaction's commit (see the module docstring)."""

    isolation: Isolation
    snapshot_sqn: int
    """The SQN the transaction's snapshot saw everything up to."""
    written: frozenset[bytes]
    """Ledger keys the transaction writes: checked at both isolation levels."""
    read: frozenset[bytes] = frozenset()
    """Ledger keys it read (found or not): checked under ``serializable``."""
    ranges: tuple[tuple[bytes, bytes], ...] = ()
    """``[lo, hi)`` ledger-key ranges it read: checked under ``serializable``."""


__all__ = ["ISOLATIONS", "CommitGuard", "Isolation"]
