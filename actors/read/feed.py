"""The change feed: every journal entry above an SQN, in SQN order, as :class:`Change` values.

The journal is the feed. The Inker gives every change the next SQN (a batch takes a contiguous
run in one segment) and a segment whose write failed definitely gives its SQNs back, so the SQNs
of a database's journal are dense from 1. The feed reads a journal view (a writer's snapshot, a
Reader's checkpoint, a follower's latest refresh) the way folds do: journal files in SQN order,
skipping every file whose range lies at or below ``since``, each read in big ranged chunks, then
the unrolled segments; memory stays bounded by one chunk and the segments a view already holds.

Values the ledger holds. A small value (option ``inline_value_bytes``) is kept in its ledger
entry too, and once the ledger has persisted that entry the journal keeps the put without its
body (a :attr:`~inkpen.formats.journal.Kind.VALUE_IN_LEDGER` record, written by the roll and by
journal compaction). The feed reads such a put's value from the ledger of the same views: the
key's current entry, when it has the put's SQN. A put whose key was written again (or deleted,
or expired and reaped) since has no value left anywhere, and counts as removed.

Gaps. Journal compaction drops entries that are no longer current (and under ``retain`` keeps a
replaced put as KEY_CHANGES, its value gone), and a replaced put whose value the ledger held is
gone with it. Either way the change is lost to the feed, and the feed never skips one silently:
walking SQNs upwards from ``since + 1`` it raises :class:`~inkpen.errors.FeedGapError` naming
the first SQN it cannot give, unless the caller passed ``gaps="skip"``. A feed cursor
(``manifest.model.FeedCursor``) holds compaction and the journal's dropping of bodies off every
entry above the lowest live cursor, so a consumer holding one never meets a gap.

Tails. ``changes(since, wait=...)`` on a following Reader or on the writer's own Bookie gives
every change readable now, then a :class:`CaughtUp` step naming the news to wait on
(:mod:`inkpen.actors.kernel.news`: the follower's refreshes, the writer's applied batches), and
so on; :func:`waiting` waits in the caller's thread, :mod:`inkpen.aio` in its event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from inkpen.actors.kernel.news import News
from inkpen.actors.kernel.views import JournalView
from inkpen.actors.read.path import Views, lookup
from inkpen.checks import check_sqn
from inkpen.errors import FeedGapError, UsageError
from inkpen.formats.journal import JournalEntry, Kind
from inkpen.formats.keys import LedgerValue, object_parts
from inkpen.manifest.feed_cursors import NotHeld, not_held_in

GapPolicy = Literal["raise", "skip"]
LedgerLookup = Callable[[bytes], LedgerValue | None]
"""The newest ledger entry of a key in the feed's views (the read path's ``lookup``)."""

_KINDS = {Kind.OBJECT: "put", Kind.TOMBSTONE: "delete", Kind.VALUE_IN_LEDGER: "put"}


@dataclass(frozen=True, slots=True)
class Change:
    """One change of the feed: a put or a delete, at its SQN."""

    sqn: int
    bucket: bytes
    key: bytes
    kind: Literal["put", "delete"]
    value: bytes | None
    """The object body of a put; None for a delete."""
    indexes: tuple[tuple[Literal["add", "remove"], bytes, bytes], ...]
    """The index changes the write made: ``(op, field, term)``."""
    last_modified: float
    """Seconds since the epoch, when the change was written (as :class:`~inkpen.Head` has it)."""


@dataclass(frozen=True)
class CaughtUp:
    """A tail's step once every change readable so far was given: wait for ``news`` to move past
    ``version`` (at most the tail's ``wait`` seconds; if none came, the tail ends)."""

    news: News
    version: int


def waiting(steps: Iterator[Change | CaughtUp], wait: float) -> Iterator[Change]:
    """The changes of a tail's steps, waiting in this thread at each :class:`CaughtUp` (an
    event loop waits its own way: :mod:`inkpen.aio`)."""
    try:
        for step in steps:
            if not isinstance(step, CaughtUp):
                yield step
            elif not step.news.wait_for_change(step.version, wait):
                return
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            close()


def check_since(since: Any) -> int:
    return check_sqn("since", since)


def check_gaps(gaps: Any) -> GapPolicy:
    if gaps not in ("raise", "skip"):
        raise UsageError(f"gaps must be 'raise' or 'skip', got {gaps!r}")
    return gaps  # type: ignore[no-any-return]


def entries_above(journal: Any, since: int) -> Iterator[JournalEntry]:
    """Every entry of a journal view with an SQN above ``since``, in SQN order.

    A snapshot's paired journal (``registered`` / ``current``) is read registered first, then
    whatever the newer view holds above it.
    """
    registered = getattr(journal, "registered", None)
    if registered is not None:
        top = since
        for entry in entries_above(registered, since):
            top = entry.sqn
            yield entry
        yield from entries_above(journal.current, top)
        return
    for handle in journal.files:
        if handle.descriptor.max_sqn <= since:
            continue
        for entry in handle.reader.iter_entries():
            if entry.sqn > since:
                yield entry
    for segment in journal.segments:
        if segment.last_sqn <= since:
            continue
        for sqn in sorted(segment.entries):
            if sqn > since:
                yield segment.entries[sqn]


def to_change(entry: JournalEntry, bucket: bytes, key: bytes, value: bytes | None) -> Change:
    """The change of ``entry``, whose body (a put's) is ``value``."""
    return Change(
        entry.sqn,
        bucket,
        key,
        "delete" if entry.kind == Kind.TOMBSTONE else "put",
        value,
        tuple(("add" if op else "remove", f, t) for op, f, t in entry.index_specs),
        entry.last_modified_ms / 1000.0,
    )


def ledger_body(entry: JournalEntry, ledger: LedgerLookup) -> bytes | None:
    """The body of a :attr:`~Kind.VALUE_IN_LEDGER` put, from the ledger entry of its key when
    that entry is still this put (same SQN); None when a later change replaced it."""
    found = ledger(entry.ledger_key)
    if found is None or found[0] != entry.sqn or len(found) < 7:
        return None
    body: bytes = found[6]
    return body


def gap_error(missing: int, next_present: int | None) -> FeedGapError:
    upto = "on" if next_present is None else f"up to {next_present - 1}"
    return FeedGapError(
        f"the change feed has a gap: SQN {missing} {upto} was removed (by journal compaction, or "
        "a small value the ledger held was replaced by a later write). Hold a feed cursor "
        "(create_feed_cursor / `inkpen feed create`) at or below the SQN a consumer has reached "
        'so the journal keeps what it has not read, or pass gaps="skip" to read on past removed '
        "changes",
        sqn=missing,
    )


def scan_changes(
    journal: Any,
    ledger: LedgerLookup,
    since: int,
    *,
    bucket: bytes | None = None,
    gaps: GapPolicy = "raise",
    upto: int | None = None,
    seen: list[int] | None = None,
) -> Iterator[Change]:
    """The changes of a journal view above ``since`` (and at most ``upto``), checked for gaps;
    ``ledger`` looks keys up in the ledger of the same views (for the values it holds).

    ``seen[0]``, when given, is kept at the highest SQN looked at (to resume from)."""
    expected = since + 1
    raising = gaps == "raise"
    for entry in entries_above(journal, since):
        sqn = entry.sqn
        if upto is not None and sqn > upto:
            return
        if sqn != expected and raising:
            raise gap_error(expected, sqn)
        expected = sqn + 1
        if seen is not None:
            seen[0] = sqn
        kind = entry.kind
        if kind not in _KINDS:  # KEY_CHANGES: a put whose value compaction removed
            if raising:
                raise gap_error(sqn, sqn + 1)
            continue
        b, k = object_parts(entry.ledger_key)
        if bucket is not None and b != bucket:
            continue
        if kind == Kind.OBJECT:
            value = entry.value
        elif kind == Kind.VALUE_IN_LEDGER:
            value = ledger_body(entry, ledger)
            if value is None:  # replaced since: its value is gone with the ledger entry
                if raising:
                    raise gap_error(sqn, sqn + 1)
                continue
        else:
            value = None
        yield to_change(entry, b, k, value)


WHOLE = frozenset({Kind.OBJECT, Kind.TOMBSTONE})
"""The kinds of journal entry that hold their change whole (a put's value, a delete)."""


def not_held(journal: JournalView, since: int, upto: int) -> NotHeld:
    """What the journal view does not hold whole of the changes in ``(since, upto]``: an SQN
    absent (journal compaction dropped it), kept only as KEY_CHANGES, or a put whose value left
    for the ledger (its next write takes it: no cursor can keep it). Reads every entry of the
    range; answers the first and last such SQN and the journal files holding the range."""
    files = frozenset(
        h.name
        for h in journal.files
        if h.descriptor.max_sqn > since and h.descriptor.min_sqn <= upto
    )
    present = ((e.sqn, e.kind in WHOLE) for e in entries_above(journal, since))
    first, last = not_held_in(present, since, upto)
    return NotHeld(first, last, files)


def changes_in(
    views: Views,
    since: int,
    *,
    bucket: bytes | None = None,
    gaps: GapPolicy = "raise",
    seen: list[int] | None = None,
) -> Iterator[Change]:
    """:func:`scan_changes` over one set of views: their journal, their ledger for the values
    it holds."""
    cache, ledger, journal = views
    return scan_changes(
        journal,
        lambda key: lookup(cache, ledger, key),
        since,
        bucket=bucket,
        gaps=gaps,
        seen=seen,
    )


__all__ = [
    "CaughtUp",
    "Change",
    "GapPolicy",
    "LedgerLookup",
    "changes_in",
    "check_gaps",
    "check_since",
    "entries_above",
    "ledger_body",
    "not_held",
    "scan_changes",
    "waiting",
]
