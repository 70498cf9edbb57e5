"""The read and fold API shared by :class:`~inkpen.Bookie`, :class:`~inkpen.Snapshot` and
:class:`~inkpen.Reader`.

Buckets, keys, index fields and terms are ``str`` (stored as UTF-8) or ``bytes``; folds give them
back as ``bytes``. Folds stream: they hold one snapshot (the live Bookie takes one per fold, with
the long timeout for key/object/head folds and the short one for index queries) and read each
file block when the fold reaches it, or a little before (option ``read_ahead_bytes``). A fold's
snapshot (and its reads ahead) are released when the fold is exhausted, closed, or
garbage-collected; use ``with book.keys(...) as keys:`` to release it early.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from time import perf_counter
from typing import Any, Literal, TypeVar

from inkpen.actors.journal.changes import as_bytes
from inkpen.actors.kernel.meter import IDLE, Meter
from inkpen.actors.read.anti_entropy import build_tree
from inkpen.actors.read.feed import Change, GapPolicy, changes_in, check_gaps, check_since
from inkpen.actors.read.many import read_values
from inkpen.actors.read.path import (
    Head,
    HeadFilter,
    ViewSource,
    fold_heads,
    fold_index,
    fold_keys,
    fold_objects_by_key,
    fold_objects_by_sqn,
    list_buckets,
    read_head,
    read_head_only,
    read_value,
)
from inkpen.formats.keys import MAX_KEY_BYTES, Tag, object_key
from inkpen.formats.tictac import TicTacTree, check_segments

from .checks import check_count, check_flag, check_timestamp
from .errors import InkpenError, NotFoundError, UsageError

T = TypeVar("T")


class FoldIterator(Iterator[T]):
    """A streaming fold; releases its snapshot when exhausted, closed or collected.

    Iterating it (``for row in fold``) runs a generator that passes the fold's items straight
    through and releases the snapshot when they end or fail, so a long fold pays no Python call
    of this class per item; ``next(fold)`` takes the same path.
    """

    def __init__(self, items: Iterator[T], release: Callable[[], object]) -> None:
        self._items = items
        self._release: Callable[[], object] | None = release
        self._stream = self._pass_through(items)

    def _pass_through(self, items: Iterator[T]) -> Generator[T, None, None]:
        try:
            yield from items
        finally:
            self._let_go()

    def _let_go(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            closer = getattr(self._items, "close", None)
            if closer is not None:
                closer()
            release()

    def __iter__(self) -> Iterator[T]:
        return self._stream

    def __next__(self) -> T:
        return next(self._stream)

    def close(self) -> None:
        """Stop the fold and release what it holds."""
        self._stream.close()
        self._let_go()

    def __enter__(self) -> FoldIterator[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _ledger_key(bucket: str | bytes, key: str | bytes) -> bytes:
    """The ledger key of (bucket, key), checked as :func:`as_bytes` checks each: bytes within
    the limit go straight to :func:`object_key` (every get comes here)."""
    if (
        type(bucket) is bytes
        and type(key) is bytes
        and 0 < len(bucket) <= MAX_KEY_BYTES
        and 0 < len(key) <= MAX_KEY_BYTES
    ):
        return object_key(bucket, key)
    return object_key(
        as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)
    )


def _optional(name: str, value: Any) -> bytes | None:
    return None if value is None else as_bytes(name, value, MAX_KEY_BYTES, allow_empty=True)


class ReadAPI:
    """get / head and every fold, over a point-read source and a fold source."""

    _meter: Meter = IDLE
    """Where gets, ``get_many`` calls and folds are recorded (a handle sets its own)."""
    _read_ahead: int = 0
    """Bytes a key-order fold reads ahead of itself (option ``read_ahead_bytes``; a handle sets
    its own)."""

    def _check_open(self) -> None:
        raise NotImplementedError

    def _now_ms(self) -> int:
        raise NotImplementedError

    def _point_source(self) -> ViewSource:
        raise NotImplementedError

    def _fold_source(self, *, long_running: bool) -> Any:
        """A source for one fold: must have ``views()``, ``journal_for_scan`` and ``release()``."""
        raise NotImplementedError

    # -- files found missing ----------------------------------------------------------------

    def _vanished(self, error: NotFoundError) -> InkpenError:
        """The error a read raises when a file its views name is gone (after the read path's
        own retries): by default the store's ``NotFoundError`` itself."""
        return error

    _guards_point_reads = False
    """True for a handle whose point reads must go through :meth:`_guarded` (a Reader: it checks
    its checkpoint's lease, and a follower re-resolves a vanished file); a writer's get, head
    and get_many skip that frame."""

    def _guarded(self, read: Callable[[], T]) -> T:
        """Run one point read, turning a vanished file into :meth:`_vanished`'s error."""
        try:
            return read()
        except NotFoundError as exc:
            raise self._vanished(exc) from exc

    def _guarded_items(self, items: Iterator[T]) -> Iterator[T]:
        try:
            yield from items
        except NotFoundError as exc:
            raise self._vanished(exc) from exc

    # -- point reads ------------------------------------------------------------------------

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The object's value, or None if it does not exist (never written, deleted, expired).

        A head-only store holds no objects to get: it refuses with :class:`UsageError` (read its
        values with :meth:`head_only_get`, or fold :meth:`heads`)."""
        started = perf_counter()
        self._check_open()
        self._check_not_head_only_read("get")
        lk = _ledger_key(bucket, key)
        if self._guards_point_reads:
            value = self._guarded(lambda: read_value(self._point_source(), lk, self._now_ms()))
        else:
            try:
                value = read_value(self._point_source(), lk, self._now_ms())
            except NotFoundError as exc:
                raise self._vanished(exc) from exc
        self._meter.get.record(perf_counter() - started, 0 if value is None else len(value))
        return value

    def get_many(self, bucket: str | bytes, keys: Iterable[str | bytes]) -> list[bytes | None]:
        """The values of many keys of ``bucket``, in the order of ``keys`` (None where absent),
        all read from one consistent state; faster than a loop of :meth:`get`. Refused in a
        head-only store, as :meth:`get` is."""
        started = perf_counter()
        self._check_open()
        self._check_not_head_only_read("get_many")
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise UsageError("keys must be a sequence of keys (str or bytes), not one key")
        lks = [
            object_key(b, k)
            if type(k) is bytes and 0 < len(k) <= MAX_KEY_BYTES
            else object_key(b, as_bytes("key", k, MAX_KEY_BYTES))
            for k in keys
        ]
        if not lks:
            return []
        if self._guards_point_reads:
            values = self._guarded(lambda: read_values(self._point_source(), lks, self._now_ms()))
        else:
            try:
                values = read_values(self._point_source(), lks, self._now_ms())
            except NotFoundError as exc:
                raise self._vanished(exc) from exc
        self._meter.get_many.record_many(
            perf_counter() - started, len(lks), sum(len(v) for v in values if v is not None)
        )
        return values

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata (SQN, size, content hash, last-modified) from the ledger alone."""
        self._check_open()
        lk = _ledger_key(bucket, key)
        if self._guards_point_reads:
            return self._guarded(lambda: read_head(self._point_source(), lk, self._now_ms()))
        try:
            return read_head(self._point_source(), lk, self._now_ms())
        except NotFoundError as exc:
            raise self._vanished(exc) from exc

    # -- folds ------------------------------------------------------------------------------

    def _fold(
        self, run: Callable[[Any, int], Iterator[T]], *, long_running: bool
    ) -> FoldIterator[T]:
        started = perf_counter()
        self._check_open()
        source = self._fold_source(long_running=long_running)
        try:
            now = self._now_ms()
            items = self._guarded_items(self._guarded(lambda: run(source, now)))
        except BaseException:
            source.release()
            raise
        scans = self._meter.scan

        def release() -> None:
            try:
                source.release()
            finally:
                scans.record(perf_counter() - started)

        return FoldIterator(items, release)

    def keys(
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reverse: bool = False,
    ) -> FoldIterator[bytes]:
        """Keys of live objects in ``bucket`` with start <= key <= end, in key order
        (descending with ``reverse``)."""
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        check_flag("reverse", reverse)
        ahead = self._read_ahead
        return self._fold(
            lambda src, now: fold_keys(src, b, s, e, now, reverse=reverse, read_ahead=ahead),
            long_running=True,
        )

    def heads(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        segments: Iterable[int] | None = None,
        modified_range: tuple[float | None, float | None] | None = None,
        max_objects: int | None = None,
        reverse: bool = False,
    ) -> FoldIterator[tuple[bytes, bytes, Head]]:
        """(bucket, key, Head) of live objects, in key order (descending with ``reverse``);
        metadata only, no journal reads.

        In a head-only store the fold covers the head-only objects (``Bookie.mput``): each
        ``Head`` also has the object's ``subkey`` and ``value``.

        ``segments``: only keys in these :class:`~inkpen.TicTacTree` segments (the ids
        ``tree.compare`` returns). ``modified_range=(lo, hi)``: only objects last modified at
        ``lo <= t <= hi`` (seconds since the epoch; None leaves an end open).
        ``max_objects``: stop after that many.
        """
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        _range_needs_bucket(b, s, e)
        check_flag("reverse", reverse)
        kept = head_filter(segments, modified_range, max_objects)
        tag = self._head_tag()
        ahead = self._read_ahead
        return self._fold(
            lambda src, now: fold_heads(
                src, b, s, e, now, kept, tag=tag, reverse=reverse, read_ahead=ahead
            ),
            long_running=True,
        )

    def tictac_tree(
        self,
        bucket: str | bytes | None = None,
        *,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        segments: Iterable[int] | None = None,
        modified_range: tuple[float | None, float | None] | None = None,
    ) -> TicTacTree:
        """The :class:`~inkpen.TicTacTree` of the live objects of ``bucket`` (None: every bucket)
        with start <= key <= end, from the ledger alone (no journal reads).

        ``segments``: only keys in these segments (the others stay empty);
        ``modified_range``: as for :meth:`heads`. Compare it with another store's tree
        (``tree.compare(other)``), then fold ``heads(segments=...)`` of the differing segments.
        """
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        _range_needs_bucket(b, s, e)
        kept = head_filter(segments, modified_range, None)
        tag = self._head_tag()
        with self._fold(
            lambda src, now: build_tree(src, b, s, e, now, kept, tag=tag), long_running=True
        ) as trees:
            return next(trees)

    _head_only: str | None = None
    """The head-only mode of the database read (``with_lookup`` / ``no_lookup``), else None."""

    def _check_values(self, what: str) -> None:
        """Refuse reads of object values (``get``, ``get_many``, ``objects``) where there are
        none to read (a ledger-only snapshot); by default they may go ahead."""

    def _check_not_head_only_read(self, what: str) -> None:
        """Reads of objects (``get``, ``get_many``, ``objects``) find nothing in a head-only store,
        whose values live in the ledger: refuse them rather than answer None. (Also where
        :meth:`_check_values` refuses them: a small value may be in the ledger, but a read that
        answered some values and refused others would be a trap.)"""
        self._check_values(what)
        if self._head_only is not None:
            raise UsageError(
                f"{what} is not available in a head-only store (head_only={self._head_only!r}); "
                "read with head_only_get(bucket, key, subkey) (head_only='with_lookup') or fold "
                "heads()"
            )

    def _head_tag(self) -> Tag:
        """The ledger tag head folds and trees cover: OBJECT, or HEAD in a head-only store."""
        return Tag.OBJECT if self._head_only is None else Tag.HEAD

    def head_only_get(
        self, bucket: str | bytes, key: str | bytes, subkey: str | bytes = b""
    ) -> bytes | None:
        """The value of a head-only object (written by ``Bookie.mput``) from the ledger alone, or
        None; only in a ``head_only="with_lookup"`` store."""
        self._check_open()
        if self._head_only != "with_lookup":
            raise UsageError(
                "head_only_get needs a store opened with head_only='with_lookup'; this one is "
                + ("not head-only" if self._head_only is None else f"head_only={self._head_only!r}")
                + " (fold it with heads() instead)"
            )
        lk = object_key(
            as_bytes("bucket", bucket, MAX_KEY_BYTES),
            as_bytes("key", key, MAX_KEY_BYTES),
            as_bytes("subkey", subkey, MAX_KEY_BYTES, allow_empty=True),
            tag=Tag.HEAD,
        )
        return self._guarded(lambda: read_head_only(self._point_source(), lk, self._now_ms()))

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
        reverse: bool = False,
    ) -> FoldIterator[tuple[bytes, bytes, bytes]]:
        """(bucket, key, value) of live objects, in key order (descending with ``reverse``) or
        in the order they were written. Refused in a head-only store, as :meth:`get` is (fold
        :meth:`heads` there: its ``Head`` values carry the objects' values)."""
        self._check_open()
        self._check_not_head_only_read("objects")
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        _range_needs_bucket(b, s, e)
        check_flag("reverse", reverse)
        if not isinstance(order, str):
            raise UsageError(f"order must be 'key' or 'sqn', got {order!r}")
        if order == "key":
            ahead = self._read_ahead
            return self._fold(
                lambda src, now: fold_objects_by_key(
                    src, b, s, e, now, reverse=reverse, read_ahead=ahead
                ),
                long_running=True,
            )
        if order == "sqn" and reverse:
            raise UsageError("reverse=True folds objects in key order only (order='key')")
        if order == "sqn":
            return self._fold(
                lambda src, now: fold_objects_by_sqn(src, b, s, e, now),
                long_running=True,
            )
        raise UsageError(f"order must be 'key' or 'sqn', got {order!r}")

    def changes(
        self, since: int = 0, *, bucket: str | bytes | None = None, gaps: GapPolicy = "raise"
    ) -> FoldIterator[Change]:
        """Every change (put or delete) with an SQN above ``since``, in SQN order.

        Read from the journal as this handle sees it, streaming. ``bucket`` keeps that bucket's
        changes only. SQNs journal compaction removed raise :class:`~inkpen.FeedGapError` naming
        the first one, unless ``gaps="skip"``.
        """
        first = check_since(since)
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        policy = check_gaps(gaps)
        return self._fold(
            lambda src, now: changes_in(src.views(), first, bucket=b, gaps=policy),
            long_running=True,
        )

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
        """Object keys whose index ``field`` has a term in [start, end], in (term, key) order
        (descending with ``reverse``).

        ``regex`` filters terms (a ``str`` pattern sees terms decoded as UTF-8); with
        ``return_terms`` the fold gives ``(term, key)`` pairs. Entries of an object that is
        deleted or expired are never returned.
        """
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        f = as_bytes("index field", field, MAX_KEY_BYTES)
        lo = as_bytes("start", start, MAX_KEY_BYTES, allow_empty=True)
        hi = as_bytes("end", end, MAX_KEY_BYTES, allow_empty=True)
        check_flag("return_terms", return_terms)
        check_flag("reverse", reverse)
        if regex is not None and not isinstance(regex, str | bytes | re.Pattern):
            raise UsageError(f"regex must be a str, bytes or compiled pattern, got {regex!r}")
        if isinstance(regex, str | bytes):
            try:
                regex = re.compile(regex)
            except (re.error, OverflowError, RecursionError) as exc:
                raise UsageError(f"regex {regex!r} does not compile: {exc}") from None
        ahead = self._read_ahead
        return self._fold(
            lambda src, now: fold_index(
                src,
                b,
                f,
                lo,
                hi,
                now,
                regex=regex,
                return_terms=return_terms,
                reverse=reverse,
                read_ahead=ahead,
            ),
            long_running=False,
        )

    def buckets(self) -> FoldIterator[bytes]:
        """Buckets that hold at least one live object, in order."""
        return self._fold(lambda src, now: list_buckets(src, now), long_running=False)

    def is_empty(self) -> bool:
        """True when no bucket holds a live object."""
        with self._fold(
            lambda src, now: list_buckets(src, now, first_only=True), long_running=False
        ) as found:
            return next(found, None) is None


def head_filter(
    segments: Iterable[int] | None,
    modified_range: tuple[float | None, float | None] | None,
    max_objects: int | None,
) -> HeadFilter:
    """Check a fold's ``segments`` / ``modified_range`` / ``max_objects`` arguments."""
    chosen = check_segments(segments)
    lo_ms = hi_ms = None
    if modified_range is not None:
        if not isinstance(modified_range, tuple | list) or len(modified_range) != 2:
            raise UsageError(
                f"modified_range must be a pair (lo, hi) of seconds since the epoch, "
                f"got {modified_range!r}"
            )
        lo, hi = modified_range
        if lo is not None:
            lo_ms = math.ceil(check_timestamp("modified_range low end", lo) * 1000)
        if hi is not None:
            hi_ms = math.floor(check_timestamp("modified_range high end", hi) * 1000)
    if max_objects is not None:
        check_count("max_objects", max_objects)
    return HeadFilter(chosen, lo_ms, hi_ms, max_objects)


def _range_needs_bucket(bucket: bytes | None, start: bytes | None, end: bytes | None) -> None:
    if bucket is None and (start is not None or end is not None):
        raise UsageError("a key range (start/end) needs a bucket")
