"""The read and fold API shared by :class:`~inkpen.Bookie`, :class:`~inkpen.Snapshot` and
:class:`~inkpen.Reader`.

Buckets, keys, index fields and terms are ``str`` (stored as UTF-8) or ``bytes``; folds give them
back as ``bytes``. Folds stream: they hold one snapshot (the live Bookie takes one per fold, with
the long timeout for key/object/head folds and the short one for index queries) and read each
file block only when the fold reaches it. A fold's snapshot is released when the fold is
exhausted, closed, or garbage-collected; use ``with book.keys(...) as keys:`` to release it early.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator
from typing import Any, Literal, TypeVar

from inkpen.actors.journal.changes import as_bytes
from inkpen.actors.read.feed import Change, GapPolicy, check_gaps, check_since, scan_changes
from inkpen.actors.read.path import (
    Head,
    ViewSource,
    fold_heads,
    fold_index,
    fold_keys,
    fold_objects_by_key,
    fold_objects_by_sqn,
    list_buckets,
    read_head,
    read_value,
)
from inkpen.formats.keys import MAX_KEY_BYTES, object_key

from .errors import UsageError
from .options import check_flag

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


def _optional(name: str, value: Any) -> bytes | None:
    return None if value is None else as_bytes(name, value, MAX_KEY_BYTES, allow_empty=True)


class ReadAPI:
    """get / head and every fold, over a point-read source and a fold source."""

    def _check_open(self) -> None:
        raise NotImplementedError

    def _now_ms(self) -> int:
        raise NotImplementedError

    def _point_source(self) -> ViewSource:
        raise NotImplementedError

    def _fold_source(self, *, long_running: bool) -> Any:
        """A source for one fold: must have ``views()``, ``journal_for_scan`` and ``release()``."""
        raise NotImplementedError

    # -- point reads ------------------------------------------------------------------------

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The object's value, or None if it does not exist (never written, deleted, expired)."""
        self._check_open()
        lk = object_key(
            as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)
        )
        return read_value(self._point_source(), lk, self._now_ms())

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata (SQN, size, content hash, last-modified) from the ledger alone."""
        self._check_open()
        lk = object_key(
            as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)
        )
        return read_head(self._point_source(), lk, self._now_ms())

    # -- folds ------------------------------------------------------------------------------

    def _fold(
        self, run: Callable[[Any, int], Iterator[T]], *, long_running: bool
    ) -> FoldIterator[T]:
        self._check_open()
        source = self._fold_source(long_running=long_running)
        try:
            items = run(source, self._now_ms())
        except BaseException:
            source.release()
            raise
        return FoldIterator(items, source.release)

    def keys(
        self, bucket: str | bytes, start: str | bytes | None = None, end: str | bytes | None = None
    ) -> FoldIterator[bytes]:
        """Keys of live objects in ``bucket`` with start <= key <= end, in key order."""
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        return self._fold(lambda src, now: fold_keys(src, b, s, e, now), long_running=True)

    def heads(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
    ) -> FoldIterator[tuple[bytes, bytes, Head]]:
        """(bucket, key, Head) of live objects, in key order; metadata only, no journal reads."""
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        _range_needs_bucket(b, s, e)
        return self._fold(lambda src, now: fold_heads(src, b, s, e, now), long_running=True)

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
    ) -> FoldIterator[tuple[bytes, bytes, bytes]]:
        """(bucket, key, value) of live objects, in key order or in the order they were written."""
        b = None if bucket is None else as_bytes("bucket", bucket, MAX_KEY_BYTES)
        s, e = _optional("start", start), _optional("end", end)
        _range_needs_bucket(b, s, e)
        if not isinstance(order, str):
            raise UsageError(f"order must be 'key' or 'sqn', got {order!r}")
        if order == "key":
            return self._fold(
                lambda src, now: fold_objects_by_key(src, b, s, e, now), long_running=True
            )
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
            lambda src, now: scan_changes(src.views()[2], first, bucket=b, gaps=policy),
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
    ) -> FoldIterator[Any]:
        """Object keys whose index ``field`` has a term in [start, end], in (term, key) order.

        ``regex`` filters terms (a ``str`` pattern sees terms decoded as UTF-8); with
        ``return_terms`` the fold gives ``(term, key)`` pairs.
        """
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        f = as_bytes("index field", field, MAX_KEY_BYTES)
        lo = as_bytes("start", start, MAX_KEY_BYTES, allow_empty=True)
        hi = as_bytes("end", end, MAX_KEY_BYTES, allow_empty=True)
        check_flag("return_terms", return_terms)
        if regex is not None and not isinstance(regex, str | bytes | re.Pattern):
            raise UsageError(f"regex must be a str, bytes or compiled pattern, got {regex!r}")
        if isinstance(regex, str | bytes):
            try:
                regex = re.compile(regex)
            except (re.error, OverflowError, RecursionError) as exc:
                raise UsageError(f"regex {regex!r} does not compile: {exc}") from None
        return self._fold(
            lambda src, now: fold_index(
                src, b, f, lo, hi, now, regex=regex, return_terms=return_terms
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


def _range_needs_bucket(bucket: bytes | None, start: bytes | None, end: bytes | None) -> None:
    if bucket is None and (start is not None or end is not None):
        raise UsageError("a key range (start/end) needs a bucket")
