"""The change feed: every journal entry above an SQN, in SQN order, as :class:`Change` values.

The journal is the feed. The Inker gives every change the next SQN (a batch takes a contiguous
run in one segment) and a segment whose write failed definitely gives its SQNs back, so the SQNs
of a database's journal are dense from 1. The feed reads a journal view (a writer's snapshot, a
Reader's checkpoint, a follower's latest refresh) the way folds do: journal files in SQN order,
skipping every file whose range lies at or below ``since``, each read in big ranged chunks, then
the unrolled segments; memory stays bounded by one chunk and the segments a view already holds.

Gaps. Journal compaction drops entries that are no longer current (and under ``retain`` keeps a
replaced put as KEY_CHANGES, its value gone). Either way the change is lost to the feed, and the
feed never skips one silently: walking SQNs upwards from ``since + 1`` it raises
:class:`~inkpen.errors.FeedGapError` naming the first SQN it cannot give, unless the caller
passed ``gaps="skip"``. A feed cursor (``manifest.model.FeedCursor``) holds compaction off
every entry above the lowest live cursor, so a consumer holding one never meets a gap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from inkpen.checks import check_sqn
from inkpen.errors import FeedGapError, UsageError
from inkpen.formats.journal import JournalEntry, Kind
from inkpen.formats.keys import object_parts

GapPolicy = Literal["raise", "skip"]

_KINDS = {Kind.OBJECT: "put", Kind.TOMBSTONE: "delete"}


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


def to_change(entry: JournalEntry, bucket: bytes, key: bytes) -> Change:
    return Change(
        entry.sqn,
        bucket,
        key,
        "put" if entry.kind == Kind.OBJECT else "delete",
        (entry.value or b"") if entry.kind == Kind.OBJECT else None,
        tuple(("add" if op else "remove", f, t) for op, f, t in entry.index_specs),
        entry.last_modified_ms / 1000.0,
    )


def gap_error(missing: int, next_present: int | None) -> FeedGapError:
    upto = "on" if next_present is None else f"up to {next_present - 1}"
    return FeedGapError(
        f"the change feed has a gap: SQN {missing} {upto} was removed by journal compaction. "
        "Hold a feed cursor (create_feed_cursor / `inkpen feed create`) at or below the SQN a "
        'consumer has reached so compaction keeps what it has not read, or pass gaps="skip" '
        "to read on past removed changes",
        sqn=missing,
    )


def scan_changes(
    journal: Any,
    since: int,
    *,
    bucket: bytes | None = None,
    gaps: GapPolicy = "raise",
    upto: int | None = None,
    seen: list[int] | None = None,
) -> Iterator[Change]:
    """The changes of a journal view above ``since`` (and at most ``upto``), checked for gaps.

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
        yield to_change(entry, b, k)


__all__ = ["Change", "GapPolicy", "check_gaps", "check_since", "entries_above", "scan_changes"]
