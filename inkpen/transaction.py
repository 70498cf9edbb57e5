"""Transaction: reads from one snapshot and writes that commit atomically, or not at all.

``with book.transaction(isolation="snapshot" | "serializable") as txn:`` opens a transaction. It
reads one snapshot of the Bookie (pinned as ``book.snapshot()`` pins one, under a registration
shared with the transactions that start within :data:`ANCHOR_SECONDS`, and let go when the
transaction ends; like a snapshot's, it holds files back for at most ``snapshot_timeout_short``),
overlaid with its own buffered writes: ``get``, ``get_many``, ``head``,
``keys``, ``objects`` and ``index_query`` see the snapshot as the transaction's writes so far
change it (a buffered delete hides a key, a buffered put shows its value, in key order in range
reads too). ``put`` and ``delete`` only buffer. Leaving the block commits the buffered writes as
one unit, exactly as ``book.write(batch)`` (all or nothing, durable when the block ends); an
exception in the block or ``rollback()`` discards them. Once it has committed or rolled back
(or its Bookie closed) a transaction refuses every call with ``UsageError``.

**Conflicts.** Commit raises :class:`~inkpen.ConflictError`, naming a conflicting key, and writes
nothing when another commit after the snapshot changed

- ``"snapshot"`` (snapshot isolation): a key this transaction writes (no lost updates; write
  skew is allowed);
- ``"serializable"``: also a key it read (found or not) or any key inside a range it read with
  ``keys``, ``objects`` or ``index_query`` (a phantom: a key inserted into or deleted from the
  range). Committed serializable transactions are then equivalent to running one at a time in
  commit order.

The check is made by the writer in the serial step that checks ``if_sqn`` conditions, against
its record of recent commits (:mod:`inkpen.actors.write.commits` gives the protocol), so no
commit can come between the check and the write. A transaction that writes nothing commits
without a check: its reads are those of its snapshot, a consistent state in commit order.
:func:`retrying` runs a transaction again on conflict.

**Limits** (``UsageError``, the transaction unchanged): ``transaction_max_keys`` keys tracked
(written, and under ``serializable`` read, plus ranges read), ``transaction_max_bytes`` bytes of
buckets, keys and values buffered, and a batch's 10,000 changes.

A key written in the transaction has no SQN until it commits: ``head`` answers its metadata with
``sqn`` 0. One thread should use a transaction at a time (calls are serialised by a lock).

**No nesting.** While a thread is inside the ``with`` block of an open transaction, beginning
another transaction of the same Bookie on that thread is a ``UsageError`` (:func:`refuse_nested`):
it would be a separate transaction, committing on its own. Pass the open one down instead.
Handles begun without ``with`` are independent, and so are other threads.
"""

from __future__ import annotations

import inspect
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from time import perf_counter
from typing import Any, Literal, TypeVar

from inkpen.actors.engine.engine import Engine
from inkpen.actors.engine.snapshot_clones import PairedJournal, SnapshotParts
from inkpen.actors.journal.changes import ChangeMaker, PendingChange, as_bytes
from inkpen.actors.journal.guards import ISOLATIONS, CommitGuard, Isolation
from inkpen.actors.kernel.views import ViewBoard
from inkpen.actors.read.path import Head, object_bounds, term_matcher
from inkpen.batch import MAX_BATCH_CHANGES, IndexSpecs
from inkpen.formats.journal import Kind
from inkpen.formats.keys import MAX_KEY_BYTES, index_range, object_key, object_parts

from .checks import check_count, check_seconds
from .errors import ConflictError, UsageError
from .options import Options
from .read_api import FoldIterator
from .snapshot import Snapshot

T = TypeVar("T")

ANCHOR_SECONDS = 0.5
"""How long one registered snapshot anchors the transactions that start (see
:class:`SnapshotAnchors`)."""

_Term = tuple[bytes, bytes]


class _Overlay:
    """The index entries a transaction's buffered changes give one object."""

    __slots__ = ("bucket", "cleared", "key", "terms")

    def __init__(self, bucket: bytes, key: bytes) -> None:
        self.bucket = bucket
        self.key = key
        self.cleared = False
        """A buffered delete took every entry the snapshot had."""
        self.terms: dict[_Term, bool] = {}
        """(field, term) -> added (True) or removed (False) by the buffered changes."""


class _Anchor:
    __slots__ = ("parts", "taken", "users")

    def __init__(self, parts: SnapshotParts) -> None:
        self.parts = parts
        self.taken = time.monotonic()
        self.users = 0


class SnapshotAnchors:
    """Registered snapshots shared by the transactions that start while they are young.

    A snapshot registers with the Penciller and the Inker through two clone actors (about 3 ms),
    more than a small transaction's commit. But a registration protects every file that any
    *later* view names too (a file dropped at a manifest change is deleted only once no live
    registration predates the change), so a transaction reads views taken from the board when it
    starts, fresh and consistent, and shares the registration of an *anchor*: a snapshot at most
    :data:`ANCHOR_SECONDS` old, taken before those views. An anchor is released when its last
    transaction ends and a newer one has replaced it, or when it has been idle that long.
    """

    def __init__(
        self,
        take: Callable[[], SnapshotParts],
        release: Callable[[str], object],
        board: ViewBoard,
    ) -> None:
        self._take = take
        self._release = release
        self._board = board
        self._lock = threading.Lock()
        self._current: _Anchor | None = None
        self._timer: threading.Timer | None = None
        self._closed = False

    def views(self) -> tuple[SnapshotParts, Callable[[], None]]:
        """Fresh views under a registered anchor, and the function that lets the anchor go."""
        with self._lock:
            if self._closed:
                raise UsageError("this Bookie is closed; open the database again with inkpen.open")
            anchor = self._current
            if anchor is None or time.monotonic() - anchor.taken > ANCHOR_SECONDS:
                if anchor is not None:
                    self._current = None
                    if anchor.users == 0:
                        self._release(anchor.parts.snapshot_id)
                anchor = self._current = _Anchor(self._take())
            anchor.users += 1
            cache, ledger, journal = self._board.take()
            registered = anchor.parts.journal
            assert registered is not None
            parts = SnapshotParts(
                anchor.parts.snapshot_id,
                cache,
                ledger,
                PairedJournal(journal, registered.registered),
                (),
            )
        done = False

        def let_go() -> None:
            nonlocal done
            if not done:
                done = True
                self._let_go(anchor)

        return parts, let_go

    def _let_go(self, anchor: _Anchor) -> None:
        with self._lock:
            anchor.users -= 1
            if anchor.users > 0:
                return
            if anchor is not self._current:
                self._release(anchor.parts.snapshot_id)
            elif self._timer is None and not self._closed:
                self._timer = threading.Timer(ANCHOR_SECONDS, self._expire)
                self._timer.daemon = True
                self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            self._timer = None
            anchor = self._current
            if anchor is not None and anchor.users == 0:
                self._current = None
                self._release(anchor.parts.snapshot_id)

    def close(self) -> None:
        """The Bookie is closing: release the idle anchor; take no new one."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            anchor, self._current = self._current, None
            if anchor is not None and anchor.users == 0:
                self._release(anchor.parts.snapshot_id)


def check_isolation(isolation: Any) -> Isolation:
    """A transaction's ``isolation``: ``"snapshot"`` or ``"serializable"``."""
    if not isinstance(isolation, str) or isolation not in ISOLATIONS:
        raise UsageError(f"isolation must be 'snapshot' or 'serializable', got {isolation!r:.80}")
    return "snapshot" if isolation == "snapshot" else "serializable"


class Transaction:
    """Snapshot reads and buffered writes committed atomically (see the module docstring).

    Get one with :meth:`inkpen.Bookie.transaction`; a context manager."""

    def __init__(
        self,
        *,
        isolation: Isolation,
        snapshot: Snapshot,
        snapshot_sqn: int,
        engine: Engine,
        changes: ChangeMaker,
        options: Options,
        check_book: Callable[[str], None],
        release: Callable[[Transaction], None],
    ) -> None:
        self._isolation: Isolation = isolation
        self._snap = snapshot
        self._sqn = snapshot_sqn
        self._engine = engine
        self._make = changes
        self._options = options
        self._check_book = check_book
        self._release_fn = release
        self._lock = threading.RLock()
        self._state: Literal["open", "committed", "rolled back", "closed with its Bookie"] = "open"
        self._changes: list[PendingChange] = []
        self._latest: dict[bytes, PendingChange] = {}
        self._overlays: dict[bytes, _Overlay] = {}
        self._read: set[bytes] = set()
        self._ranges: list[tuple[bytes, bytes]] = []
        self._bytes = 0

    # -- state ------------------------------------------------------------------------------

    @property
    def isolation(self) -> str:
        """``"snapshot"`` or ``"serializable"``."""
        return self._isolation

    @property
    def snapshot_sqn(self) -> int:
        """The SQN of the snapshot the transaction reads: every change up to it is visible."""
        return self._sqn

    @property
    def state(self) -> str:
        """``"open"``, ``"committed"``, ``"rolled back"`` or ``"closed with its Bookie"``."""
        return self._state

    def _check_usable(self) -> None:
        if self._state != "open":
            raise UsageError(
                f"this transaction is {self._state}; start a new one with book.transaction()"
            )

    def _serializable(self) -> bool:
        return self._isolation == "serializable"

    def _tracked(self) -> int:
        return len(self._read | self._latest.keys()) + len(self._ranges)

    def _track(
        self, keys: Iterable[bytes] = (), ranges: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        """Record reads (under serializable), refusing past ``transaction_max_keys``."""
        if not self._serializable():
            return
        fresh = {k for k in keys if k not in self._read and k not in self._latest}
        limit = self._options.transaction_max_keys
        if self._tracked() + len(fresh) + len(ranges) > limit:
            raise UsageError(
                f"a transaction tracks at most {limit} keys and ranges (option "
                "transaction_max_keys); commit this one and start another, or raise the option"
            )
        self._read |= fresh
        self._ranges.extend(ranges)

    # -- point reads ------------------------------------------------------------------------

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The value as this transaction sees it (its own writes first), or None."""
        with self._lock:
            self._check_usable()
            self._snap._check_not_head_only_read("get")
            lk = _object_key(bucket, key)
            change = self._latest.get(lk)
            if change is not None:
                return change.value
            self._track((lk,))
            return self._snap.get(bucket, key)

    def get_many(self, bucket: str | bytes, keys: Iterable[str | bytes]) -> list[bytes | None]:
        """The values of many keys of ``bucket`` as this transaction sees them, in order."""
        with self._lock:
            self._check_usable()
            self._snap._check_not_head_only_read("get_many")
            b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
            if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
                raise UsageError("keys must be a sequence of keys (str or bytes), not one key")
            raw = [as_bytes("key", k, MAX_KEY_BYTES) for k in keys]
            lks = [object_key(b, k) for k in raw]
            self._track([lk for lk in lks if lk not in self._latest])
            unbuffered = [k for k, lk in zip(raw, lks, strict=True) if lk not in self._latest]
            found = iter(self._snap.get_many(b, unbuffered) if unbuffered else [])
            return [self._latest[lk].value if lk in self._latest else next(found) for lk in lks]

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata as this transaction sees it; a key it wrote has ``sqn`` 0."""
        with self._lock:
            self._check_usable()
            lk = _object_key(bucket, key)
            change = self._latest.get(lk)
            if change is not None:
                if change.kind != Kind.OBJECT:
                    return None
                expiry = None if change.expiry_ms is None else change.expiry_ms / 1000.0
                size = len(change.value or b"")
                return Head(0, size, change.content_hash, change.last_modified_ms / 1000.0, expiry)
            self._track((lk,))
            return self._snap.head(bucket, key)

    # -- range reads ------------------------------------------------------------------------

    def keys(
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reverse: bool = False,
    ) -> FoldIterator[bytes]:
        """Keys of live objects in ``bucket`` with start <= key <= end, as this transaction
        sees them, in key order (descending with ``reverse``)."""
        with self._lock:
            self._check_usable()
            fold = self._snap.keys(bucket, start, end, reverse=reverse)
            lo, hi = _bounds(bucket, start, end)
            return self._merged(
                fold,
                lo,
                hi,
                reverse,
                lambda item: object_key(as_bytes("bucket", bucket, MAX_KEY_BYTES), item),
                lambda lk, change: object_parts(lk)[1],
            )

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
        reverse: bool = False,
    ) -> FoldIterator[tuple[bytes, bytes, bytes]]:
        """(bucket, key, value) of live objects as this transaction sees them, in key order
        (descending with ``reverse``) or in write order (``order="sqn"``: the transaction's own
        writes come last, in the order it made them)."""
        with self._lock:
            self._check_usable()
            fold = self._snap.objects(bucket, start, end, order=order, reverse=reverse)
            lo, hi = _bounds(bucket, start, end)

            def item(lk: bytes, change: PendingChange) -> tuple[bytes, bytes, bytes]:
                return change.bucket, change.key, change.value or b""

            if order == "sqn":
                return self._by_sqn(fold, lo, hi, item)
            return self._merged(fold, lo, hi, reverse, lambda row: object_key(row[0], row[1]), item)

    def index_query(
        self,
        bucket: str | bytes,
        field: str | bytes,
        start: str | bytes,
        end: str | bytes,
        *,
        regex: str | bytes | re.Pattern[Any] | None = None,
        return_terms: bool = False,
        reverse: bool = False,
    ) -> FoldIterator[Any]:
        """Object keys whose index ``field`` has a term in [start, end], as this transaction
        sees them (its buffered index changes and deletes applied), in (term, key) order
        (descending with ``reverse``); ``(term, key)`` pairs with ``return_terms``."""
        with self._lock:
            self._check_usable()
            fold = self._snap.index_query(
                bucket, field, start, end, regex=regex, return_terms=True, reverse=reverse
            )
            try:
                b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
                f = as_bytes("index field", field, MAX_KEY_BYTES)
                lo = as_bytes("start", start, MAX_KEY_BYTES, allow_empty=True)
                hi = as_bytes("end", end, MAX_KEY_BYTES, allow_empty=True)
                self._track(ranges=[index_range(b, f, lo, hi)])
                matcher = term_matcher(regex)
                hidden: dict[bytes, _Overlay] = {}
                extra: set[_Term] = set()
                for overlay in self._overlays.values():
                    if overlay.bucket != b:
                        continue
                    hidden[overlay.key] = overlay
                    latest = self._latest[object_key(b, overlay.key)]
                    if latest.kind != Kind.OBJECT:
                        continue
                    for (of, term), added in overlay.terms.items():
                        wanted = matcher is None or matcher(term)
                        if added and of == f and lo <= term <= hi and wanted:
                            extra.add((term, overlay.key))
            except BaseException:
                fold.close()
                raise
            ordered = sorted(extra, reverse=reverse)

            def kept(pair: _Term) -> bool:
                overlay = hidden.get(pair[1])
                if overlay is None:
                    return True
                if self._latest[object_key(b, overlay.key)].kind != Kind.OBJECT:
                    return False
                return not overlay.cleared and overlay.terms.get((f, pair[0]), True)

            items = _merge(
                (pair for pair in fold if kept(pair)), ordered, lambda pair: pair, reverse
            )
            if not return_terms:
                items = (pair[1] for pair in items)
            return FoldIterator(items, fold.close)

    def _merged(
        self,
        fold: FoldIterator[T],
        lo: bytes,
        hi: bytes,
        reverse: bool,
        key_of: Callable[[T], bytes],
        item_of: Callable[[bytes, PendingChange], T],
    ) -> FoldIterator[T]:
        """The snapshot's fold with the buffered changes in [lo, hi) merged in by ledger key."""
        try:
            self._track(ranges=[(lo, hi)])
        except BaseException:
            fold.close()
            raise
        buffered = sorted((lk for lk in self._latest if lo <= lk < hi), reverse=reverse)
        latest = self._latest
        rows = [
            (lk, None if latest[lk].kind != Kind.OBJECT else item_of(lk, latest[lk]))
            for lk in buffered
        ]

        def unbuffered() -> Iterator[tuple[bytes, T | None]]:
            for row in fold:
                lk = key_of(row)
                yield lk, row

        merged = _merge(unbuffered(), rows, lambda pair: pair[0], reverse)
        items = (row for _, row in merged if row is not None)
        return FoldIterator(items, fold.close)

    def _by_sqn(
        self,
        fold: FoldIterator[tuple[bytes, bytes, bytes]],
        lo: bytes,
        hi: bytes,
        item_of: Callable[[bytes, PendingChange], tuple[bytes, bytes, bytes]],
    ) -> FoldIterator[tuple[bytes, bytes, bytes]]:
        try:
            self._track(ranges=[(lo, hi)])
        except BaseException:
            fold.close()
            raise
        latest = dict(self._latest)
        order = {
            lk: i for i, change in enumerate(self._changes) if lo <= (lk := change.ledger_key) < hi
        }

        def items() -> Iterator[tuple[bytes, bytes, bytes]]:
            for row in fold:
                if object_key(row[0], row[1]) not in latest:
                    yield row
            for lk in sorted(order, key=order.__getitem__):
                change = latest[lk]
                if change.kind == Kind.OBJECT:
                    yield item_of(lk, change)

        return FoldIterator(items(), fold.close)

    # -- writes -----------------------------------------------------------------------------

    def put(
        self,
        bucket: str | bytes,
        key: str | bytes,
        value: bytes,
        *,
        indexes: IndexSpecs = (),
        ttl: float | None = None,
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a put (arguments as :meth:`inkpen.Bookie.put`); written at commit."""
        with self._lock:
            self._check_usable()
            self._check_book("put")
            self._buffer(self._make.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn))

    def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """Buffer a delete (arguments as :meth:`inkpen.Bookie.delete`); written at commit."""
        with self._lock:
            self._check_usable()
            self._check_book("delete")
            self._buffer(self._make.delete(bucket, key, indexes, if_sqn=if_sqn))

    def _buffer(self, change: PendingChange) -> None:
        options = self._options
        if len(self._changes) >= MAX_BATCH_CHANGES:
            raise UsageError(
                f"a transaction commits at most {MAX_BATCH_CHANGES} changes (a batch's limit); "
                "commit this one and start another"
            )
        size = len(change.bucket) + len(change.key) + len(change.value or b"")
        if self._bytes + size > options.transaction_max_bytes:
            raise UsageError(
                f"a transaction buffers at most {options.transaction_max_bytes} bytes of keys "
                "and values (option transaction_max_bytes); commit this one and start another"
            )
        lk = change.ledger_key
        fresh = lk not in self._latest and lk not in self._read
        if fresh and self._tracked() + 1 > options.transaction_max_keys:
            raise UsageError(
                f"a transaction tracks at most {options.transaction_max_keys} keys and "
                "ranges (option transaction_max_keys); commit this one and start another"
            )
        self._bytes += size
        self._changes.append(change)
        self._latest[lk] = change
        overlay = self._overlays.get(lk)
        if overlay is None:
            overlay = self._overlays[lk] = _Overlay(change.bucket, change.key)
        if change.kind != Kind.OBJECT:
            overlay.cleared = True
            overlay.terms.clear()
        for op, field, term in change.index_specs:
            overlay.terms[(field, term)] = op == 1

    # -- the end ----------------------------------------------------------------------------

    def commit(self) -> None:
        """Write the buffered changes as one atomic unit; returns once durable.

        Raises :class:`~inkpen.ConflictError` (nothing written) when another commit after the
        snapshot changed what the isolation level protects (see the module docstring). The
        transaction is finished either way."""
        with self._lock:
            self._check_usable()
            self._state = "committed"
            changes = self._changes
            guard = CommitGuard(
                self._isolation,
                self._sqn,
                frozenset(self._latest),
                frozenset(self._read) if self._serializable() else frozenset(),
                tuple(self._ranges) if self._serializable() else (),
            )
        try:
            if changes:
                started = perf_counter()
                meter = self._snap._meter
                try:
                    self._engine.write_unit(changes, guard)
                except BaseException as exc:
                    meter.refused(exc)
                    raise
                meter.write.record_many(
                    perf_counter() - started,
                    len(changes),
                    sum(len(c.value) for c in changes if c.value),
                )
        finally:
            self._end()

    def rollback(self) -> None:
        """Discard the buffered changes and end the transaction."""
        with self._lock:
            self._check_usable()
            self._state = "rolled back"
        self._end()

    def close(self) -> None:
        """Roll back if still open; otherwise nothing. Idempotent."""
        with self._lock:
            if self._state != "open":
                return
            self._state = "rolled back"
        self._end()

    def _abandon(self) -> None:
        """The Bookie is closing: end the transaction without writing."""
        with self._lock:
            if self._state != "open":
                return
            self._state = "closed with its Bookie"
        self._end()

    def _end(self) -> None:
        self._snap.close()
        self._release_fn(self)

    def __enter__(self) -> Transaction:
        _entered().append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        try:
            if self._state != "open":
                return
            if exc_type is not None:
                self.close()
            else:
                self.commit()
        finally:
            entered = _entered()
            if self in entered:
                entered.remove(self)

    def __repr__(self) -> str:
        return (
            f"<inkpen.Transaction {self._isolation} at SQN {self._sqn}, "
            f"{len(self._changes)} changes, {self._state}>"
        )


_THREAD = threading.local()


def _entered() -> list[Transaction]:
    """The transactions whose ``with`` block the calling thread is in, innermost last."""
    entered: list[Transaction] | None = getattr(_THREAD, "entered", None)
    if entered is None:
        entered = _THREAD.entered = []
    return entered


NESTED = (
    "a transaction begun inside a `with book.transaction()` block of the same Bookie would "
    "commit on its own, not as part of the enclosing one (whose writes it cannot see, and which "
    "may then conflict with it): do the work through the enclosing transaction (pass it down), "
    "or begin the next one after the block"
)


def refuse_nested(engine: Engine) -> None:
    """Raise :class:`UsageError` when the calling thread is inside the ``with`` block of an
    open transaction on ``engine`` (see :data:`NESTED`)."""
    for txn in _entered():
        if txn._engine is engine and txn._state == "open":
            raise UsageError(f"this thread is in an open transaction: {NESTED}")


def _object_key(bucket: Any, key: Any) -> bytes:
    return object_key(
        as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)
    )


def _bounds(bucket: Any, start: Any, end: Any) -> tuple[bytes, bytes]:
    """The ledger-key range a fold of (bucket, start, end) covers (arguments already checked
    by the snapshot's fold)."""
    b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
    s = None if start is None else as_bytes("start", start, MAX_KEY_BYTES, allow_empty=True)
    e = None if end is None else as_bytes("end", end, MAX_KEY_BYTES, allow_empty=True)
    return object_bounds(b, s, e)


def _merge(
    stream: Iterable[T], rows: Sequence[T], key: Callable[[T], Any], reverse: bool
) -> Iterator[T]:
    """Merge the sorted ``stream`` with the sorted ``rows``, a row replacing a stream item of
    the same key."""
    i = 0
    for item in stream:
        k = key(item)
        while i < len(rows) and (key(rows[i]) > k if reverse else key(rows[i]) < k):
            yield rows[i]
            i += 1
        if i < len(rows) and key(rows[i]) == k:
            yield rows[i]
            i += 1
            continue
        yield item
    yield from rows[i:]


RETRY_DEADLINE = 10.0
"""How long :func:`retrying` goes on by default, in seconds from its first call."""


def retrying(
    fn: Callable[[], T],
    attempts: int | None = None,
    *,
    deadline: float | None = RETRY_DEADLINE,
    base_delay: float = 0.001,
    max_delay: float = 0.1,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``fn()`` until it returns without :class:`~inkpen.ConflictError`; the last conflict
    is raised once ``deadline`` seconds (10 by default) have passed since the first call, or
    after ``attempts`` calls when that is given (whichever comes first; ``deadline=None``
    lifts the deadline, so ``attempts`` alone bounds it). Other errors are raised at once.

    Between attempts it waits a random time ("full jitter") up to ``base_delay * 2**n``
    seconds, at most ``max_delay``, so that racing transactions spread out; no attempt starts
    after the deadline. ``sleep`` does the waiting and ``clock`` tells the time (tests pass
    their own). ``fn`` must be a plain function (a coroutine function is a ``UsageError``:
    ``inkpen.aio.retrying`` awaits those) and should open its own transaction, so each attempt
    reads afresh::

        def transfer():
            with book.transaction() as txn:
                ...

        inkpen.retrying(transfer)
    """
    backoff = Backoff(fn, attempts, deadline, base_delay, max_delay, sleep, clock)
    if inspect.iscoroutinefunction(fn):
        raise UsageError(
            f"inkpen.retrying calls plain functions; {fn!r:.80} is a coroutine function: use "
            "await inkpen.aio.retrying(fn) in asyncio code"
        )
    started = clock()
    attempt = 0
    while True:
        try:
            result = fn()
        except ConflictError:
            wait = backoff.delay(attempt)
            attempt += 1
            if not backoff.goes_on(attempt, clock() - started + wait):
                raise
        else:
            if inspect.iscoroutine(result):
                result.close()
                raise UsageError(
                    "inkpen.retrying calls plain functions; fn() returned a coroutine, which "
                    "it would not await: use await inkpen.aio.retrying(fn) in asyncio code"
                )
            return result
        if wait > 0:
            sleep(wait)


class Backoff:
    """The checked arguments of :func:`retrying` (and its asyncio twin): when to stop, and the
    waits between attempts."""

    __slots__ = ("attempts", "base", "cap", "deadline")

    def __init__(
        self,
        fn: Any,
        attempts: Any,
        deadline: Any,
        base_delay: Any,
        max_delay: Any,
        sleep: Any,
        clock: Any,
    ) -> None:
        if not callable(fn):
            raise UsageError(f"retrying needs a function to call, got {fn!r:.80}")
        self.attempts = None if attempts is None else check_count("attempts", attempts, minimum=1)
        self.deadline = (
            None if deadline is None else check_seconds("deadline", deadline, above_minimum=True)
        )
        if self.attempts is None and self.deadline is None:
            raise UsageError(
                "retrying needs a bound: a deadline (seconds, 10 by default) or attempts; with "
                "neither it could retry for ever"
            )
        self.base = check_seconds("base_delay", base_delay)
        self.cap = check_seconds("max_delay", max_delay)
        if not callable(sleep):
            raise UsageError(f"sleep must be a function taking seconds, got {sleep!r:.80}")
        if not callable(clock):
            raise UsageError(f"clock must be a function answering seconds, got {clock!r:.80}")

    def delay(self, attempt: int) -> float:
        """A random wait after failed attempt number ``attempt`` (from 0): full jitter."""
        return random.uniform(0.0, min(self.cap, self.base * 2.0 ** min(attempt, 60)))

    def goes_on(self, made: int, next_start: float) -> bool:
        """Whether another attempt follows ``made`` failed ones when it would start
        ``next_start`` seconds after the first."""
        if self.attempts is not None and made >= self.attempts:
            return False
        return self.deadline is None or next_start < self.deadline


__all__ = [
    "ANCHOR_SECONDS",
    "Backoff",
    "SnapshotAnchors",
    "Transaction",
    "check_isolation",
    "refuse_nested",
    "retrying",
]
