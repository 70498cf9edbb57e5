"""The read API of a sharded data set, over one read handle per shard.

:class:`ShardedReads` is what :class:`~inkpen.shards.ShardedBookie` and
:class:`~inkpen.shards.ShardedSnapshot` have in common: they route each object to its shard
with :func:`~inkpen._shard_layout.route_hash` and read it from that shard's handle (a Bookie, a
Reader or a Snapshot: anything with the :class:`~inkpen.read_api.ReadAPI`), which a subclass
gives through :meth:`ShardedReads._reader`.

Reads that span shards: ``get_many`` groups its keys by shard and reads the shards in parallel;
folds (``keys``, ``heads``, ``objects``, ``index_query``, ``buckets``) open one fold per shard
and merge them in key order (``heapq.merge``; each key lives in exactly one shard, so nothing is
repeated); ``tictac_tree`` merges the shards' trees (a key is in one shard, so the merged tree is
the tree of the whole data set, comparable with any other store's). Each shard's fold is a
consistent view of that shard; unless the handles are one :class:`ShardedSnapshot`'s, the merge
is not one cross-shard state (the shards have no common clock, and even a snapshot's shards are
taken at nearly, not exactly, the same moment).
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

from inkpen.actors.journal.changes import as_bytes
from inkpen.actors.read.feed import GapPolicy, check_gaps, check_since
from inkpen.actors.read.path import Head
from inkpen.formats.keys import MAX_KEY_BYTES
from inkpen.formats.tictac import TicTacTree
from inkpen.logs import get_logger

from ._shard_layout import check_shard_number, route_hash
from .checks import check_flag
from .errors import UsageError
from .read_api import FoldIterator, ReadAPI, head_filter

log = get_logger("inkpen.shards")

T = TypeVar("T")
FAN_OUT_THREADS = 8
"""The most shards one call (``get_many``, ``flush``, a snapshot...) works on at once."""


def merged(
    folds: list[FoldIterator[Any]], key: Callable[[Any], Any] | None, reverse: bool
) -> FoldIterator[Any]:
    """One fold of ``folds`` merged in order; closing it closes each of them."""

    def release() -> None:
        for fold in folds:
            fold.close()

    return FoldIterator(heapq.merge(*folds, key=key, reverse=reverse), release)


class ShardPool:
    """The few threads one sharded handle fans its calls out on (made on first use)."""

    def __init__(self, shards: int) -> None:
        self._size = min(FAN_OUT_THREADS, shards)
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    def map(self, indexes: Iterable[int], call: Callable[[int], Any]) -> dict[int, Any]:
        """``call(i)`` for every shard ``i`` of ``indexes``, in parallel; their answers by shard.
        The first failure is raised once every call has finished."""
        chosen = sorted(set(indexes))
        if len(chosen) <= 1:
            return {i: call(i) for i in chosen}
        with self._lock:
            if self._closed:
                pool = None
            else:
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        self._size, thread_name_prefix="inkpen-shards"
                    )
                pool = self._pool
        if pool is None:  # closing: the calls run here (each refuses or finishes its own way)
            return {i: call(i) for i in chosen}
        futures = {i: pool.submit(call, i) for i in chosen}
        concurrent.futures.wait(futures.values())
        first = next((f.exception() for f in futures.values() if f.exception()), None)
        if first is not None:
            raise first
        return {i: f.result() for i, f in futures.items()}

    def gather(
        self,
        indexes: Iterable[int],
        make: Callable[[int], T],
        undo: Callable[[int, T], object],
    ) -> dict[int, T]:
        """``make(i)`` for each shard in parallel; if any fails, ``undo(i, made)`` for the
        others and raise the first failure (so nothing is left half made)."""
        made: dict[int, T] = {}
        failures: list[BaseException] = []

        def attempt(index: int) -> None:
            try:
                made[index] = make(index)
            except BaseException as exc:
                failures.append(exc)

        self.map(indexes, attempt)
        if failures:
            for index, part in made.items():
                try:
                    undo(index, part)
                except Exception as exc:  # the first failure is what the caller must see
                    log.warning("shards.undo_failed", shard=index, error=str(exc))
            raise failures[0]
        return made

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class ShardedReads:
    """The read API over the shards of a data set (see the module docstring)."""

    _n: int
    _pool: ShardPool

    def _reader(self, index: int) -> ReadAPI:
        """Shard ``index``'s read handle (opened on first use by the subclass)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        """Refuse a call once the handle is closed."""
        raise NotImplementedError

    def _check_values(self, what: str) -> None:
        """Refuse reads of values where there are none (a ledger-only snapshot)."""

    def shard_of(self, bucket: str | bytes, key: str | bytes) -> int:
        """The shard holding (bucket, key) in this data set."""
        return self._route(
            as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)
        )

    def _route(self, bucket: bytes, key: bytes) -> int:
        return route_hash(bucket, key) % self._n

    # -- point reads ------------------------------------------------------------------------------

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The object's value from its shard, or None."""
        index = self.shard_of(bucket, key)
        self._check_values("get")
        return self._reader(index).get(bucket, key)

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata from its shard, or None."""
        return self._reader(self.shard_of(bucket, key)).head(bucket, key)

    def head_only_get(
        self, bucket: str | bytes, key: str | bytes, subkey: str | bytes = b""
    ) -> bytes | None:
        """A head-only object's value from its shard (routed by bucket and key; see
        ``Bookie.head_only_get``)."""
        index = self.shard_of(bucket, key)
        as_bytes("subkey", subkey, MAX_KEY_BYTES, allow_empty=True)
        return self._reader(index).head_only_get(bucket, key, subkey)

    def get_many(self, bucket: str | bytes, keys: Iterable[str | bytes]) -> list[bytes | None]:
        """The values of many keys of ``bucket`` in the order of ``keys`` (None where absent):
        each shard's keys are read together, the shards in parallel (each from one consistent
        state of its shard)."""
        self._check_open()
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise UsageError("keys must be a sequence of keys (str or bytes), not one key")
        encoded = [as_bytes("key", k, MAX_KEY_BYTES) for k in keys]
        self._check_values("get_many")
        slots: dict[int, list[int]] = {}
        for position, k in enumerate(encoded):
            slots.setdefault(self._route(b, k), []).append(position)
        answers = self._pool.map(
            slots, lambda i: self._reader(i).get_many(b, [encoded[p] for p in slots[i]])
        )
        values: list[bytes | None] = [None] * len(encoded)
        for index, positions in slots.items():
            for position, value in zip(positions, answers[index], strict=True):
                values[position] = value
        return values

    # -- folds ------------------------------------------------------------------------------------

    def _fold_all(
        self,
        open_fold: Callable[[ReadAPI], FoldIterator[Any]],
        key: Callable[[Any], Any] | None,
        reverse: bool,
    ) -> FoldIterator[Any]:
        self._check_open()
        folds: list[FoldIterator[Any]] = []
        try:
            for index in range(self._n):
                folds.append(open_fold(self._reader(index)))
        except BaseException:
            for fold in folds:
                fold.close()
            raise
        return merged(folds, key, reverse)

    def keys(
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reverse: bool = False,
    ) -> FoldIterator[bytes]:
        """Keys of live objects in ``bucket`` with start <= key <= end, in key order across
        every shard (descending with ``reverse``)."""
        as_bytes("bucket", bucket, MAX_KEY_BYTES)
        check_range(bucket, start, end, reverse)
        return self._fold_all(lambda h: h.keys(bucket, start, end, reverse=reverse), None, reverse)

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
        """(bucket, key, Head) of live objects in key order across every shard (``segments``,
        ``modified_range`` and ``max_objects`` as for ``Bookie.heads``; ``max_objects`` counts
        the merged fold)."""
        check_range(bucket, start, end, reverse)
        chosen = list(segments) if isinstance(segments, Iterator) else segments
        head_filter(chosen, modified_range, max_objects)
        folded = self._fold_all(
            lambda h: h.heads(
                bucket,
                start,
                end,
                segments=chosen,
                modified_range=modified_range,
                max_objects=max_objects,
                reverse=reverse,
            ),
            _bucket_key,
            reverse,
        )
        if max_objects is None:
            return folded
        return FoldIterator(itertools.islice(folded, max_objects), folded.close)

    def tictac_tree(
        self,
        bucket: str | bytes | None = None,
        *,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        segments: Iterable[int] | None = None,
        modified_range: tuple[float | None, float | None] | None = None,
    ) -> TicTacTree:
        """The tictac tree of the whole data set (as ``Bookie.tictac_tree``): every shard's
        tree, built in parallel and merged. A key lives in one shard, so the merged tree is the
        one a single database holding the same objects would have: compare it with any store's
        (another data set of any shard count, or a plain database)."""
        self._check_open()
        check_range(bucket, start, end, False)
        chosen = list(segments) if isinstance(segments, Iterator) else segments
        head_filter(chosen, modified_range, None)
        trees = self._pool.map(
            range(self._n),
            lambda i: self._reader(i).tictac_tree(
                bucket, start=start, end=end, segments=chosen, modified_range=modified_range
            ),
        )
        whole = TicTacTree()
        for index in range(self._n):
            whole = whole.merge(trees[index])
        return whole

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key", "sqn"] = "key",
        reverse: bool = False,
    ) -> FoldIterator[tuple[bytes, bytes, bytes]]:
        """(bucket, key, value) of live objects in key order across every shard (descending with
        ``reverse``). Write order (``order="sqn"``) exists only within one shard, SQNs being per
        shard: it is refused here; fold ``shard(i).objects(order="sqn")`` or
        ``changes(shard=i)``."""
        check_range(bucket, start, end, reverse)
        if order != "key":
            raise UsageError(
                f"a data set folds objects in key order only (order='key'), got {order!r}: SQNs "
                "are per shard; use shard(i).objects(order='sqn') or changes(shard=i)"
            )
        self._check_values("objects")
        return self._fold_all(
            lambda h: h.objects(bucket, start, end, reverse=reverse), _bucket_key, reverse
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
        across every shard (descending with ``reverse``); ``(term, key)`` pairs with
        ``return_terms``."""
        check_flag("return_terms", return_terms)
        check_flag("reverse", reverse)
        as_bytes("bucket", bucket, MAX_KEY_BYTES)
        as_bytes("index field", field, MAX_KEY_BYTES)
        as_bytes("start", start, MAX_KEY_BYTES, allow_empty=True)
        as_bytes("end", end, MAX_KEY_BYTES, allow_empty=True)
        if regex is not None and not isinstance(regex, str | bytes | re.Pattern):
            raise UsageError(f"regex must be a str, bytes or compiled pattern, got {regex!r}")
        if isinstance(regex, str | bytes):
            try:
                regex = re.compile(regex)
            except (re.error, OverflowError, RecursionError) as exc:
                raise UsageError(f"regex {regex!r} does not compile: {exc}") from None
        folded = self._fold_all(
            lambda h: h.index_query(
                bucket, field, start, end, regex=regex, return_terms=True, reverse=reverse
            ),
            None,
            reverse,
        )
        if return_terms:
            return folded
        return FoldIterator((key for _term, key in folded), folded.close)

    def buckets(self) -> FoldIterator[bytes]:
        """Buckets that hold at least one live object in any shard, in order."""
        folded = self._fold_all(lambda h: h.buckets(), None, False)

        def distinct() -> Iterator[bytes]:
            last: bytes | None = None
            for bucket in folded:
                if bucket != last:
                    yield bucket
                    last = bucket

        return FoldIterator(distinct(), folded.close)

    def is_empty(self) -> bool:
        """True when no shard holds a live object."""
        self._check_open()
        return all(self._pool.map(range(self._n), lambda i: self._reader(i).is_empty()).values())

    def _check_changes(
        self, since: int, shard: int, bucket: str | bytes | None, gaps: GapPolicy
    ) -> int:
        """The shard number of a ``changes`` call, once its arguments are checked."""
        index = check_shard_number(shard, self._n)
        check_since(since)
        check_gaps(gaps)
        if bucket is not None:
            as_bytes("bucket", bucket, MAX_KEY_BYTES)
        return index


def check_range(
    bucket: str | bytes | None, start: str | bytes | None, end: str | bytes | None, reverse: bool
) -> None:
    """A fold's bucket and key range, checked as the shards' handles check them."""
    if bucket is not None:
        as_bytes("bucket", bucket, MAX_KEY_BYTES)
    for name, bound in (("start", start), ("end", end)):
        if bound is not None:
            as_bytes(name, bound, MAX_KEY_BYTES, allow_empty=True)
    if bucket is None and (start is not None or end is not None):
        raise UsageError("a key range (start/end) needs a bucket")
    check_flag("reverse", reverse)


def _bucket_key(item: tuple[Any, ...]) -> tuple[Any, Any]:
    return item[0], item[1]


def shards_listed(indexes: Iterable[int]) -> str:
    """Shard numbers as a short list for messages ("0, 1, 3", or "none")."""
    shown = sorted(indexes)
    return ", ".join(str(i) for i in shown) if shown else "none"
