"""ShardedBookie: one handle on every database of a sharded data set.

``inkpen.shards.open(url, shards=None, **options)`` gives a :class:`ShardedBookie`. It routes each
object to its shard with :func:`~inkpen._shard_layout.shard_of` and speaks to that shard's
database: a :class:`~inkpen.Bookie` for the shards this process writes, a following
:class:`~inkpen.Reader` for the others.

Shard handles open on first use (under a lock per shard, so threads racing to the same shard
open it once) and stay open until :meth:`ShardedBookie.close`. Each shard's Bookie claims and
fences its own database exactly as ``inkpen.open`` does: two processes that both write shard 3
fence each other, while processes writing disjoint shards run side by side.

Owned shards (``shards=``): a process that writes only some shards names them; a put, delete or
batch routed to another shard is refused with :class:`UsageError` before anything is written.
Reads of a shard it does not own go through a following Reader (``inkpen.open_reader(url,
follow=True)``): they see the other writer's acknowledged writes within the Reader's refresh
interval (a second by default), or at once after :meth:`ShardedBookie.refresh`.

Reads that span shards: ``get_many`` groups its keys by shard and reads the shards in parallel;
folds (``keys``, ``heads``, ``objects``, ``index_query``, ``buckets``) open one fold per shard and
merge them in key order (``heapq.merge``; each key lives in exactly one shard, so nothing is
repeated). Each shard's fold is a consistent view of that shard; the merge is not one
cross-shard snapshot (the shards have no common clock). A batch is atomic within one database,
so :meth:`ShardedBookie.write` takes only batches whose keys all route to one shard.

State machine: open (shard handles open lazily) -> closed (every handle closed; any later call
is a :class:`UsageError`).
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from inkpen.actors.journal.changes import ChangeMaker, as_bytes
from inkpen.actors.read.feed import Change, GapPolicy, check_gaps, check_since
from inkpen.actors.read.path import Head
from inkpen.formats.keys import MAX_KEY_BYTES
from inkpen.logs import get_logger

from ._shard_layout import Descriptor, check_shard_number, route_hash, shard_url
from .batch import Batch
from .bookie import Bookie
from .bookie import open as open_bookie
from .checks import check_flag
from .errors import UsageError
from .options import Options
from .read_api import FoldIterator, ReadAPI, head_filter
from .reader import Reader, open_reader

log = get_logger("inkpen.shards")

IndexSpecs = Iterable[tuple[str, str | bytes, str | bytes]]
_FAN_OUT_THREADS = 8
"""The most shards one call (``get_many``, ``flush``) works on at once."""


def _merged(
    folds: list[FoldIterator[Any]], key: Callable[[Any], Any] | None, reverse: bool
) -> FoldIterator[Any]:
    """One fold of ``folds`` merged in order; closing it closes each of them."""

    def release() -> None:
        for fold in folds:
            fold.close()

    return FoldIterator(heapq.merge(*folds, key=key, reverse=reverse), release)


class ShardedBookie:
    """An open sharded data set: the Bookie's object API over its N databases. Use
    ``inkpen.shards.open`` to get one; close it when done (or use it as a context manager)."""

    def __init__(
        self, url: str, descriptor: Descriptor, owned: frozenset[int], options: Options
    ) -> None:
        self._url = url
        self._descriptor = descriptor
        self._n = descriptor.shards
        self._owned = owned
        self._options = options
        self._locks = [threading.Lock() for _ in range(self._n)]
        self._handles: dict[int, Bookie | Reader] = {}
        self._state_lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._checker = ChangeMaker(options)

    # -- what it is -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The data set's root URL."""
        return self._url

    @property
    def descriptor(self) -> Descriptor:
        """The data set's descriptor (its shard count, hash and format version)."""
        return self._descriptor

    @property
    def owned_shards(self) -> frozenset[int]:
        """The shards this handle writes (all of them unless ``shards=`` said otherwise)."""
        return self._owned

    @property
    def closed(self) -> bool:
        return self._closed

    def shard_of(self, bucket: str | bytes, key: str | bytes) -> int:
        """The shard holding (bucket, key) in this data set."""
        return self._route(
            as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)
        )

    def _route(self, bucket: bytes, key: bytes) -> int:
        return route_hash(bucket, key) % self._n

    # -- shard handles ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this ShardedBookie is closed; open the data set again")

    def _handle(self, index: int) -> Bookie | Reader:
        """Shard ``index``'s handle, opened on first use: a Bookie if owned, else a Reader."""
        self._check_open()
        found = self._handles.get(index)
        if found is not None:
            return found
        with self._locks[index]:
            found = self._handles.get(index)
            if found is not None:
                return found
            url = shard_url(self._url, index)
            opened: Bookie | Reader
            if index in self._owned:
                opened = open_bookie(url, self._options)
            else:
                opened = open_reader(url, self._options, follow=True)
            with self._state_lock:
                if self._closed:  # closed while this one opened: do not leak it
                    opened.close()
                    raise UsageError("this ShardedBookie is closed; open the data set again")
                self._handles[index] = opened
            log.debug("shards.opened", url=url, shard=index, writer=index in self._owned)
            return opened

    def _opened(self, index: int) -> bool:
        """Whether shard ``index``'s handle is open already. A call whose shard is not open yet
        checks its arguments before opening it, so that a refused call opens (claims) nothing."""
        return index in self._handles

    def _writer(self, index: int, what: str) -> Bookie:
        if index not in self._owned:
            raise UsageError(
                f"{what} routes to shard {index}, which this handle does not write (it writes "
                f"shards {_listed(self._owned)}); open the data set with a shards= that includes "
                f"{index}, or send the write to the process that owns it"
            )
        handle = self._handle(index)
        assert isinstance(handle, Bookie)
        return handle

    def shard(self, index: int) -> ReadAPI:
        """Shard ``index``'s own handle (its Bookie if this handle writes it, else its Reader),
        for what the data set's API does not cover: ``tictac_tree``, ``stats``, ..."""
        return self._handle(check_shard_number(index, self._n))

    def _map(self, indexes: Iterable[int], call: Callable[[int], Any]) -> dict[int, Any]:
        """``call(i)`` for every shard ``i`` of ``indexes``, in parallel; their answers by shard.
        The first failure is raised once every call has finished."""
        chosen = sorted(set(indexes))
        if len(chosen) <= 1:
            return {i: call(i) for i in chosen}
        with self._state_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    min(_FAN_OUT_THREADS, self._n), thread_name_prefix="inkpen-shards"
                )
            pool = self._pool
        futures = {i: pool.submit(call, i) for i in chosen}
        concurrent.futures.wait(futures.values())
        return {i: f.result() for i, f in futures.items()}

    # -- writes ----------------------------------------------------------------------------------

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
        """``Bookie.put`` on the shard of (bucket, key); returns once durable there."""
        index = self.shard_of(bucket, key)
        if not self._opened(index):
            indexes = _replayable(indexes)
            self._checker.put(bucket, key, value, indexes, ttl, if_sqn=if_sqn)
        self._writer(index, "this put").put(
            bucket, key, value, indexes=indexes, ttl=ttl, if_sqn=if_sqn
        )

    def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> None:
        """``Bookie.delete`` on the shard of (bucket, key)."""
        index = self.shard_of(bucket, key)
        if not self._opened(index):
            indexes = _replayable(indexes)
            self._checker.delete(bucket, key, indexes, if_sqn=if_sqn)
        self._writer(index, "this delete").delete(bucket, key, indexes=indexes, if_sqn=if_sqn)

    def write(self, batch: Batch) -> None:
        """``Bookie.write`` of a batch whose keys all route to one shard (atomic there).

        A batch whose keys route to several shards is refused with :class:`UsageError` naming
        them, and nothing is written: split it by :meth:`shard_of` (a batch is atomic within one
        database only). An empty batch is a no-op."""
        self._check_open()
        if not isinstance(batch, Batch):
            raise UsageError(f"write takes an inkpen.Batch, got {type(batch).__name__}")
        by_shard: dict[int, bytes] = {}
        for op in batch._pending():
            by_shard.setdefault(self._route(op.bucket, op.key), op.key)
        if not by_shard:
            batch._mark_written()
            return
        if len(by_shard) > 1:
            shown = ", ".join(f"{i} (key {k!r})" for i, k in sorted(by_shard.items())[:8])
            raise UsageError(
                f"this batch's keys route to {len(by_shard)} shards: {shown}; a batch is atomic "
                "within one shard only: split it by ShardedBookie.shard_of(bucket, key)"
            )
        (index,) = by_shard
        if not self._opened(index):
            for op in batch._pending():
                if op.delete:
                    self._checker.delete(op.bucket, op.key, op.indexes, if_sqn=op.if_sqn)
                else:
                    self._checker.put(
                        op.bucket, op.key, op.value, op.indexes, op.ttl, if_sqn=op.if_sqn
                    )
        self._writer(index, "this batch").write(batch)

    # -- point reads ------------------------------------------------------------------------------

    def get(self, bucket: str | bytes, key: str | bytes) -> bytes | None:
        """The object's value from its shard, or None."""
        return self._handle(self.shard_of(bucket, key)).get(bucket, key)

    def head(self, bucket: str | bytes, key: str | bytes) -> Head | None:
        """The object's metadata from its shard, or None."""
        return self._handle(self.shard_of(bucket, key)).head(bucket, key)

    def get_many(self, bucket: str | bytes, keys: Iterable[str | bytes]) -> list[bytes | None]:
        """The values of many keys of ``bucket`` in the order of ``keys`` (None where absent):
        each shard's keys are read together, the shards in parallel (each from one consistent
        state of its shard)."""
        self._check_open()
        b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise UsageError("keys must be a sequence of keys (str or bytes), not one key")
        encoded = [as_bytes("key", k, MAX_KEY_BYTES) for k in keys]
        slots: dict[int, list[int]] = {}
        for position, k in enumerate(encoded):
            slots.setdefault(self._route(b, k), []).append(position)
        answers = self._map(
            slots, lambda i: self._handle(i).get_many(b, [encoded[p] for p in slots[i]])
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
                folds.append(open_fold(self._handle(index)))
        except BaseException:
            for fold in folds:
                fold.close()
            raise
        return _merged(folds, key, reverse)

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
        _check_range(bucket, start, end, reverse)
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
        _check_range(bucket, start, end, reverse)
        chosen = list(segments) if isinstance(segments, Iterator) else segments
        head_filter(chosen, modified_range, max_objects)
        merged = self._fold_all(
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
            return merged
        return FoldIterator(itertools.islice(merged, max_objects), merged.close)

    def objects(
        self,
        bucket: str | bytes | None = None,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        order: Literal["key"] = "key",
        reverse: bool = False,
    ) -> FoldIterator[tuple[bytes, bytes, bytes]]:
        """(bucket, key, value) of live objects in key order across every shard (descending with
        ``reverse``). Write order (``order="sqn"``) exists only within one shard: fold
        ``shard(i).objects(order="sqn")`` or ``changes(shard=i)``."""
        _check_range(bucket, start, end, reverse)
        if order != "key":
            raise UsageError(
                f"a data set folds objects in key order only (order='key'), got {order!r}: SQNs "
                "are per shard; use shard(i).objects(order='sqn') or changes(shard=i)"
            )
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
        merged = self._fold_all(
            lambda h: h.index_query(
                bucket, field, start, end, regex=regex, return_terms=True, reverse=reverse
            ),
            None,
            reverse,
        )
        if return_terms:
            return merged
        return FoldIterator((key for _term, key in merged), merged.close)

    def buckets(self) -> FoldIterator[bytes]:
        """Buckets that hold at least one live object in any shard, in order."""
        merged = self._fold_all(lambda h: h.buckets(), None, False)

        def distinct() -> Iterator[bytes]:
            last: bytes | None = None
            for bucket in merged:
                if bucket != last:
                    yield bucket
                    last = bucket

        return FoldIterator(distinct(), merged.close)

    def is_empty(self) -> bool:
        """True when no shard holds a live object."""
        self._check_open()
        return all(self._map(range(self._n), lambda i: self._handle(i).is_empty()).values())

    def changes(
        self,
        since: int = 0,
        *,
        shard: int,
        bucket: str | bytes | None = None,
        gaps: GapPolicy = "raise",
    ) -> FoldIterator[Change]:
        """Shard ``shard``'s change feed (``Bookie.changes``): SQNs are per shard, so each
        shard has its own feed and its consumer keeps one cursor per shard."""
        index = check_shard_number(shard, self._n)
        check_since(since)
        check_gaps(gaps)
        if bucket is not None:
            as_bytes("bucket", bucket, MAX_KEY_BYTES)
        return self._handle(index).changes(since, bucket=bucket, gaps=gaps)

    # -- upkeep ------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the Readers of shards this handle does not write up to date now (they follow
        their writers by themselves every ``refresh_interval`` otherwise)."""
        self._check_open()
        readers = [i for i, h in list(self._handles.items()) if isinstance(h, Reader)]
        self._map(readers, lambda i: self._handles[i].refresh())  # type: ignore[union-attr]

    def flush(self) -> None:
        """``Bookie.flush`` on every shard this handle has opened for writing, in parallel."""
        self._check_open()
        writers = [i for i, h in list(self._handles.items()) if isinstance(h, Bookie)]
        self._map(writers, lambda i: self._handles[i].flush())  # type: ignore[union-attr]

    def close(self) -> None:
        """Close every shard handle (each Bookie as ``Bookie.close`` does); idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
        handles = list(self._handles.values())
        first: BaseException | None = None
        for handle in handles:
            try:
                handle.close()
            except BaseException as exc:
                first = first or exc
        if pool is not None:
            pool.shutdown(wait=True)
        if first is not None:
            raise first

    def __enter__(self) -> ShardedBookie:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<inkpen.shards.ShardedBookie {self._url} {self._n} shards {state}>"


def _replayable(indexes: IndexSpecs) -> IndexSpecs:
    """Index specs that can be read twice (checked here, then by the shard's Bookie)."""
    return list(indexes) if isinstance(indexes, Iterator) else indexes


def _check_range(
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


def _listed(indexes: Iterable[int]) -> str:
    shown = sorted(indexes)
    return ", ".join(str(i) for i in shown) if shown else "none"
