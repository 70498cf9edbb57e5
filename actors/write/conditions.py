"""The Inker's look at the state a segment is written on: conditional writes, and the index
entries a delete or a put with a ttl reaches without naming them.

**Conditions.** A change with ``if_sqn`` may be written only if its key's current SQN is
``if_sqn`` (0: the key is absent — never written, deleted or expired). The check and the write are
one step: the Inker checks a batch's conditions immediately before it gives the batch SQNs and
encodes it, on its own thread, and nothing else assigns SQNs, so no write can come between the
check and the append.

**Index entries follow their object.** In the same step the Inker adds to every delete of an
object a remove spec for each of its live index entries the delete does not name (its REVERSE
entries say which: :func:`~inkpen.formats.keys.reverse_key`), and to every put with a ttl an add
spec, with the put's expiry, for each live entry the put does not name that would outlive the
put. The specs are written in the journal entry itself, so replay, backups and compaction see
exactly what the live ledger saw. So a delete takes every index entry of its object with it, and
when an object expires its index entries have expired too: a later put of the key without them
brings none back.

The state looked at is, per key, the newest of:

1. the changes accepted so far in the segment being built (earlier units of the same group
   commit, and earlier changes of the same unit), so two conditional puts on one key in one
   segment cannot both succeed, and a delete sees the index entries a put before it in the same
   segment added;
2. segments the Inker has issued whose batch the Bookie has not yet cached: those whose writes
   are still in flight (the Inker keeps several in flight, and a later batch is checked against
   the earlier ones), and those written whose ``ApplyBatch`` (a tell) the Bookie has not handled
   yet; a segment whose write fails definitely, with every later one, is withdrawn;
3. the published views (the Bookie's cache, the Penciller's memory and files), which hold every
   segment whose batch has been settled (the Bookie publishes before it settles).

Index entries are merged from those sources by SQN (the highest wins, as in the ledger), so a
segment already in the views and still listed as unapplied counts once.

**Merges.** A merge (``Bookie.merge``) carries an operand and the name of a merge operator; in
the same step the Inker reads the key's value as the changes before it leave it (the same three
sources, newest first: an earlier change of the segment, a written segment not yet cached, the
views) and calls the operator, ``fn(key, existing, [operand])``, with ``existing`` None for an
absent, deleted or expired key (the bucket is not passed: the caller chose the operator). The
change becomes a put of the folded value (bytes; a bytearray or memoryview answered is copied),
and that is what the journal entry holds: every reader, merge, compaction, backup and Spark
read sees folded values and needs no operator. Several merges of one key in one segment fold
in order, each onto the one before. An operator that raises, or answers something other than
bytes-like or more than ``max_value_bytes``, rejects its unit with a
:class:`~inkpen.errors.UsageError`. The bytes of the folded values count in the meter's
``folded_bytes`` once their segment is written.

A unit whose condition fails is rejected whole with :class:`~inkpen.errors.ConflictError` (or,
when the state could not be read, a definite :class:`~inkpen.errors.StoreError`, or the
:class:`~inkpen.errors.CorruptionError` naming a damaged ledger file); the rest of the segment is
written without it. The check runs once per unit: an unknown-outcome
segment write is retried with the same bytes, never re-checked, so a conditional put whose first
attempt landed reports success, never a conflict with itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from inkpen.actors.journal.changes import (
    INDEX_ADD,
    INDEX_REMOVE,
    IndexSpec,
    PendingChange,
    reaches_other_entries,
)
from inkpen.actors.journal.guards import CommitGuard
from inkpen.actors.journal.intake import WriteGroup
from inkpen.actors.kernel.meter import IDLE, Meter
from inkpen.actors.kernel.views import ViewBoard
from inkpen.actors.read.path import Views, object_index_entries, read_head, read_value
from inkpen.actors.write.commits import TRIMMED, CommitRecord, changed_keys
from inkpen.errors import ConflictError, CorruptionError, InkpenError, StoreError, UsageError
from inkpen.formats.journal import JournalEntry, Kind
from inkpen.formats.keys import ACTIVE, Tag, content_hash, decode_key, object_parts
from inkpen.options import MergeOperator

_FOLDED_HELD = 1024
"""At most this many checked batches wait with their folded bytes for their segment."""

State = tuple[int, int | None]
"""A key's state as a written change leaves it: (SQN, expiry ms); SQN 0 means absent."""

Term = tuple[bytes, bytes]
"""(field, term) of one index entry of an object."""
Terms = dict[Term, tuple[int, bool, int | None]]
"""An object's index entries as the Inker knows them: (SQN, active, expiry ms) per entry."""


class _BoardSource:
    __slots__ = ("_board",)

    def __init__(self, board: ViewBoard) -> None:
        self._board = board

    def views(self) -> Views:
        return self._board.take()


def _state_of(change_or_entry: PendingChange | JournalEntry, sqn: int) -> State:
    if change_or_entry.kind == Kind.OBJECT:
        return sqn, change_or_entry.expiry_ms
    return 0, None


def _value_of(change_or_entry: PendingChange | JournalEntry, now_ms: int) -> bytes | None:
    """The value a written change leaves its key with, as a merge sees it at ``now_ms``."""
    if change_or_entry.kind != Kind.OBJECT:
        return None
    expiry = change_or_entry.expiry_ms
    if expiry is not None and expiry <= now_ms:
        return None
    value = change_or_entry.value
    return b"" if value is None else value


def fold(
    change: PendingChange,
    existing: bytes | None,
    operators: Mapping[str, MergeOperator],
    max_value_bytes: int,
) -> PendingChange:
    """The merge ``change`` as the put of its operand folded onto ``existing``.

    Raises :class:`UsageError` (naming the operator and the key) when the operator is unknown,
    raises, or answers anything but bytes (a ``bytearray`` or ``memoryview`` is copied into
    bytes, as a put's value is) of at most ``max_value_bytes``."""
    name = change.operator
    assert name is not None
    where = f"bucket {change.bucket!r} key {change.key!r}"
    operator = operators.get(name)
    if operator is None:
        raise UsageError(
            f"merge operator {name!r} is not known to this Bookie; nothing of this write was "
            f"applied: open the database with inkpen.open(url, merge_operators={{{name!r}: fn}})"
        )
    operand = change.value
    assert operand is not None
    try:
        result = operator(change.key, existing, (operand,))
    except Exception as exc:
        raise UsageError(
            f"merge operator {name!r} failed on {where} with operand {operand[:64]!r}: "
            f"{exc!r}; nothing of this write was applied: fix the operand or the operator"
        ) from exc
    if isinstance(result, bytearray | memoryview):
        result = bytes(result)
    if not isinstance(result, bytes):
        raise UsageError(
            f"merge operator {name!r} answered {type(result).__name__} for {where}, not bytes; "
            "nothing of this write was applied: an operator must return the new value as bytes "
            "(or a bytearray or memoryview)"
        )
    if len(result) > max_value_bytes:
        raise UsageError(
            f"merge operator {name!r} answered {len(result)} bytes for {where}; the limit is "
            f"{max_value_bytes} bytes (option max_value_bytes); nothing of this write was applied"
        )
    weight = change.weight - len(operand) + len(result)
    return change._replace(
        value=result, content_hash=content_hash(result), weight=weight, operator=None
    )


def _current(state: State, now_ms: int) -> int:
    sqn, expiry = state
    if expiry is not None and expiry <= now_ms:
        return 0
    return sqn


def _apply(terms: Terms, specs: Sequence[IndexSpec], sqn: int, expiry_ms: int | None) -> None:
    """Apply the index specs of a change at ``sqn`` (a later spec of the same SQN wins, as in
    :meth:`~inkpen.actors.kernel.views.MemTable.of`)."""
    for op, field, term in specs:
        known = terms.get((field, term))
        if known is None or known[0] <= sqn:
            add = op == INDEX_ADD
            terms[(field, term)] = (sqn, add, expiry_ms if add else None)


def _live(terms: Terms, now_ms: int) -> list[tuple[Term, int | None]]:
    return sorted(
        (term, expiry)
        for term, (_, active, expiry) in terms.items()
        if active and (expiry is None or expiry > now_ms)
    )


def expand(change: PendingChange, terms: Terms, now_ms: int) -> PendingChange:
    """``change`` with the specs it implies for the object's index entries it does not name.

    A delete gets a remove spec for every live entry; a put with a ttl an add spec (so the put's
    expiry) for every live entry that would outlive it. Other changes are returned as they are.
    """
    if not reaches_other_entries(change):
        return change
    named = {(field, term) for _, field, term in change.index_specs}
    if change.kind == Kind.OBJECT:
        until = change.expiry_ms
        assert until is not None
        extra = [
            (INDEX_ADD, field, term)
            for (field, term), expiry in _live(terms, now_ms)
            if (field, term) not in named and (expiry is None or expiry > until)
        ]
    else:
        extra = [
            (INDEX_REMOVE, field, term)
            for (field, term), _ in _live(terms, now_ms)
            if (field, term) not in named
        ]
    if not extra:
        return change
    return change._replace(index_specs=(*change.index_specs, *extra))


class _TermBook:
    """The index entries of the objects a batch's deletes and ttl puts reach, as the changes
    accepted so far in the segment leave them (see the module docstring)."""

    def __init__(
        self,
        source: _BoardSource,
        batch: WriteGroup,
        recent: Sequence[JournalEntry],
    ) -> None:
        self._source = source
        self.wanted = {c.ledger_key for c in batch.changes if reaches_other_entries(c)}
        self._recent: dict[bytes, list[JournalEntry]] = {}
        for entry in recent:
            if entry.ledger_key in self.wanted and entry.index_specs:
                self._recent.setdefault(entry.ledger_key, []).append(entry)
        self.known: dict[bytes, Terms] = {}

    def terms(self, key: bytes) -> Terms:
        """The object's entries before the current unit (a copy the unit may change)."""
        known = self.known.get(key)
        if known is None:
            bucket, object_key = object_parts(key)
            known = {
                (field, term): (value[0], value[1] == ACTIVE, value[2])
                for field, term, value in object_index_entries(self._source, bucket, object_key)
            }
            for entry in self._recent.get(key, ()):
                _apply(known, entry.index_specs, entry.sqn, entry.expiry_ms)
            self.known[key] = known
        return dict(known)


class ConditionChecker:
    """Owned by the Inker: remembers written segments until the views show them, checks the
    conditions of a batch and adds the index specs its deletes and ttl puts imply."""

    def __init__(
        self,
        board: ViewBoard,
        operators: Mapping[str, MergeOperator] = MappingProxyType({}),
        max_value_bytes: int = 64 * 1024 * 1024,
        commits: CommitRecord | None = None,
        meter: Meter = IDLE,
    ) -> None:
        self._source = _BoardSource(board)
        self._meter = meter
        self._folded: dict[int, tuple[WriteGroup, int]] = {}
        """By batch (several may be checked before the first is written: segments in flight),
        the bytes of the values its merges folded to: counted (``Meter.folded_bytes``) once its
        segment is written, dropped if it is withdrawn."""
        self._operators = operators
        self._max_value_bytes = max_value_bytes
        self.commits = commits if commits is not None else CommitRecord(1)
        """Recent commits, for the guards of transactions (:mod:`.commits`)."""
        self._unapplied: deque[tuple[WriteGroup, tuple[JournalEntry, ...]]] = deque()
        self._uncached: dict[bytes, State] = {}
        """Keys of segments the Bookie could not cache (the views never show them)."""
        self._uncached_entries: list[JournalEntry] = []
        """Entries with index specs of those segments."""
        self._uncached_values: dict[bytes, JournalEntry] = {}
        """The last entry of each key of those segments (the value a merge folds onto)."""

    def written(
        self,
        batch: WriteGroup,
        entries: tuple[JournalEntry, ...],
        *,
        checked: WriteGroup | None = None,
    ) -> None:
        """A segment was issued for ``batch`` (the group the Bookie settles once it has cached
        the entries); they count from now on, while the write is in flight, until the views show
        them. ``checked``: the batch :meth:`check` was given, if another (its folded bytes
        count now)."""
        self._prune()
        self._unapplied.append((batch, entries))
        self.commits.add(entries)
        source = batch if checked is None else checked
        folded = self._folded.pop(id(source), None)
        if folded is not None and folded[0] is source and self._meter.enabled:
            self._meter.folded_bytes += folded[1]

    def withdrawn(self, batch: WriteGroup) -> None:
        """The segment issued for ``batch`` will never be written (its write failed definitely,
        as did every later one's): its entries count no more. Its changes stay in the record of
        commits, which only makes later transaction checks more conservative."""
        self._unapplied = deque(item for item in self._unapplied if item[0] is not batch)
        self._folded.pop(id(batch), None)

    def _prune(self) -> None:
        unapplied = self._unapplied
        while unapplied and unapplied[0][0].done:
            batch, entries = unapplied.popleft()
            if entries:
                self.commits.mark_applied(entries[-1].sqn)
            if batch.error is not None:
                for entry in entries:
                    self._uncached[entry.ledger_key] = _state_of(entry, entry.sqn)
                    self._uncached_values[entry.ledger_key] = entry
                    if entry.index_specs:
                        self._uncached_entries.append(entry)

    def check(self, batch: WriteGroup, first_sqn: int, now_ms: int) -> list[PendingChange]:
        """The changes of ``batch`` to write, in order, with the index specs they imply;
        rejected units go to ``batch.rejected``.

        ``first_sqn`` is the SQN the first written change will get.
        """
        self._prune()
        recent: dict[bytes, State] = {}
        if batch.conditional:
            recent.update(self._uncached)
            for _, entries in self._unapplied:
                for entry in entries:
                    recent[entry.ledger_key] = _state_of(entry, entry.sqn)
        book: _TermBook | None = None
        if batch.expands:
            written = [e for _, entries in self._unapplied for e in entries]
            book = _TermBook(self._source, batch, [*self._uncached_entries, *written])
        values: dict[bytes, bytes | None] | None = None
        if batch.merges:
            values = {k: _value_of(e, now_ms) for k, e in self._uncached_values.items()}
            for _, entries in self._unapplied:
                for entry in entries:
                    values[entry.ledger_key] = _value_of(entry, now_ms)
        accepted: list[PendingChange] = []
        folded = 0
        changes = batch.changes
        guards = batch.guards
        pending: dict[bytes, int] | None = {} if guards else None
        """Keys the units accepted so far change, with their SQNs (for the guards)."""
        for unit, (start, end) in enumerate(batch.unit_bounds()):
            part: Sequence[PendingChange] = changes[start:end]
            guard = guards.get(unit) if guards else None
            if guard is not None:
                assert pending is not None
                refused = self._guarded(guard, pending)
                if refused is not None:
                    batch.rejected[unit] = refused
                    continue
            if book is None and not any(
                c.if_sqn is not None or c.operator is not None for c in part
            ):
                for change in part:
                    sqn = first_sqn + len(accepted)
                    recent[change.ledger_key] = _state_of(change, sqn)
                    if values is not None:
                        values[change.ledger_key] = _value_of(change, now_ms)
                    if pending is not None:
                        _note(pending, change, sqn)
                    accepted.append(change)
                continue
            local: dict[bytes, State] = {}
            local_values: dict[bytes, bytes | None] = {}
            local_terms: dict[bytes, Terms] = {}
            out: list[PendingChange] = []
            unit_folded = 0
            failed: InkpenError | None = None
            for i, change in enumerate(part):
                key = change.ledger_key
                sqn = first_sqn + len(accepted) + i
                try:
                    if change.if_sqn is not None:
                        state = local.get(key) or recent.get(key) or self._stored(key, now_ms)
                        actual = _current(state, now_ms)
                        if actual != change.if_sqn:
                            failed = _conflict(change, actual)
                            break
                    if book is not None and key in book.wanted:
                        terms = local_terms.get(key)
                        if terms is None:
                            terms = local_terms[key] = book.terms(key)
                        change = expand(change, terms, now_ms)
                        _apply(terms, change.index_specs, sqn, change.expiry_ms)
                    if change.operator is not None:
                        if key in local_values:
                            existing = local_values[key]
                        elif values is not None and key in values:
                            existing = values[key]
                        else:
                            existing = read_value(self._source, key, now_ms)
                        change = fold(change, existing, self._operators, self._max_value_bytes)
                        unit_folded += len(change.value or b"")
                except CorruptionError as exc:
                    failed = exc  # names the damaged object, as any read would
                    break
                except UsageError as exc:
                    failed = exc  # a merge operator refused the operand
                    break
                except InkpenError as exc:
                    failed = StoreError(
                        f"the state of bucket {change.bucket!r} key {change.key!r} could not be "
                        f"read ({exc}); nothing of this write was applied",
                        definite=True,
                    )
                    break
                local[key] = _state_of(change, sqn)
                if values is not None:
                    local_values[key] = _value_of(change, now_ms)
                out.append(change)
            if failed is not None:
                batch.rejected[unit] = failed
                continue
            recent.update(local)
            if values is not None:
                values.update(local_values)
            if book is not None:
                book.known.update(local_terms)
            if pending is not None:
                base = first_sqn + len(accepted)
                for i, change in enumerate(out):
                    _note(pending, change, base + i)
            accepted.extend(out)
            folded += unit_folded
        if folded:
            while len(self._folded) >= _FOLDED_HELD:  # batches checked but never written
                del self._folded[next(iter(self._folded))]
            self._folded[id(batch)] = (batch, folded)
        return accepted

    def _guarded(self, guard: CommitGuard, pending: dict[bytes, int]) -> ConflictError | None:
        """The error that rejects a transaction's unit, or None if its guard holds."""
        found = self.commits.conflict(guard, pending)
        if found is None:
            return None
        return transaction_conflict(guard, *found)

    def _stored(self, key: bytes, now_ms: int) -> State:
        head = read_head(self._source, key, now_ms)
        if head is None:
            return 0, None
        expiry = None if head.expires_at is None else round(head.expires_at * 1000)
        return head.sqn, expiry


def _note(pending: dict[bytes, int], change: PendingChange, sqn: int) -> None:
    for key in changed_keys(change.entry(sqn)):
        pending[key] = sqn


def transaction_conflict(guard: CommitGuard, key: bytes, sqn: int) -> ConflictError:
    """The :class:`ConflictError` of a transaction whose guard found ``key`` changed at ``sqn``
    (``key`` is :data:`~inkpen.actors.write.commits.TRIMMED` when the record of commits no
    longer reaches back to the transaction's snapshot)."""
    since = guard.snapshot_sqn
    retry = "nothing of the transaction was written: run it again (inkpen.retrying does that)"
    if key == TRIMMED:
        named = min(guard.written, default=b"")
        bucket, object_key = object_parts(named) if named else (b"", b"")
        return ConflictError(
            f"the transaction's snapshot (SQN {since}) is older than the writer's record of "
            f"recent commits, which reaches back to SQN {sqn} only (option "
            f"transaction_window_keys), so a conflict cannot be ruled out; {retry}",
            bucket=bucket,
            key=object_key,
            expected=since,
            actual=sqn,
        )
    decoded = decode_key(key)
    if decoded.tag is Tag.INDEX:
        bucket, object_key = decoded.bucket, decoded.object_key
        what = (
            f"the index entry {decoded.key!r} = {decoded.subkey!r} of bucket {bucket!r} key "
            f"{object_key!r}, inside an index range the transaction queried,"
        )
    else:
        bucket, object_key = decoded.bucket, decoded.key
        if key in guard.written:
            role = "it writes"
        elif key in guard.read:
            role = "it read"
        else:
            role = "inside a key range it read"
        what = f"bucket {bucket!r} key {object_key!r} ({role})"
    return ConflictError(
        f"transaction conflict ({guard.isolation}): {what} was changed at SQN {sqn} by another "
        f"commit after the transaction's snapshot (SQN {since}); {retry}",
        bucket=bucket,
        key=object_key,
        expected=since,
        actual=sqn,
    )


def _conflict(change: PendingChange, actual: int) -> ConflictError:
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
