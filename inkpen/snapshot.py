"""Snapshot: an isolated, read-only view of a Bookie at one moment.

``book.snapshot()`` returns a :class:`Snapshot` with the Bookie's read and fold API. Whatever the
Bookie writes, merges or compacts afterwards, the snapshot keeps reading exactly the objects that
existed when it was taken: its clone actors hold registrations with the Penciller and the Inker,
so no file it reads is deleted while it is open. Close it (or use it as a context manager) to
release them; a snapshot left open stops holding files back after its timeout
(``snapshot_timeout_short``, or ``snapshot_timeout_long`` with ``long_running=True``).
``ledger_only=True`` snapshots skip the journal: ``keys``, ``heads``, ``index_query``,
``buckets`` and ``is_empty`` work, ``get`` and ``objects`` do not. Its gets and folds count in
its Bookie's ``metrics()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inkpen.actors.engine.snapshot_clones import SnapshotParts
from inkpen.actors.kernel.meter import IDLE, Meter
from inkpen.actors.read.path import Views

from .errors import UsageError
from .read_api import ReadAPI


class PartsSource:
    """Reads from a snapshot's frozen views; ``release`` gives them back."""

    __slots__ = ("_parts", "_release")

    def __init__(self, parts: SnapshotParts, release: Callable[[], object]) -> None:
        self._parts = parts
        self._release = release

    def views(self) -> Views:
        parts = self._parts
        if parts.journal is None:
            return parts.cache, parts.ledger, _NoJournal()
        return parts.cache, parts.ledger, parts.journal

    def release(self) -> None:
        self._release()


def _no_journal() -> UsageError:
    return UsageError(
        "this snapshot is ledger_only: it has no journal; use keys, heads, index_query, "
        "buckets or is_empty, or take a full snapshot for get and objects"
    )


class _NoJournal:
    def entry(self, sqn: int, kind: Any, ledger_key: bytes) -> Any:
        raise _no_journal()

    @property
    def files(self) -> Any:
        return self.entry(0, None, b"")


class Snapshot(ReadAPI):
    """A read-only, point-in-time view of a Bookie; a context manager."""

    def __init__(
        self,
        parts: SnapshotParts,
        *,
        head_only: str | None = None,
        now_ms: Callable[[], int],
        owner_open: Callable[[], bool],
        release: Callable[[str], object],
        meter: Meter = IDLE,
        read_ahead: int = 0,
    ) -> None:
        self._parts = parts
        self._meter = meter
        self._read_ahead = read_ahead
        self._head_only = head_only
        self._now = now_ms
        self._owner_open = owner_open
        self._release_fn = release
        self._closed = False
        self._source = PartsSource(parts, lambda: None)

    @property
    def ledger_only(self) -> bool:
        return self._parts.journal is None

    def _check_values(self, what: str) -> None:
        if self._parts.journal is None:
            raise _no_journal()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this snapshot is closed; take a new one with book.snapshot()")
        if not self._owner_open():
            raise UsageError("the Bookie this snapshot came from is closed")

    def _now_ms(self) -> int:
        return self._now()

    def _point_source(self) -> PartsSource:
        return self._source

    def _fold_source(self, *, long_running: bool) -> PartsSource:
        return self._source

    def close(self) -> None:
        """Release the snapshot's registrations. Idempotent."""
        if not self._closed:
            self._closed = True
            self._release_fn(self._parts.snapshot_id)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
