"""Ranged reads of one stored object, as the format readers want them: ``fetch(start, end)``.

SST readers cache decoded blocks themselves, so they read straight from the store. Journal
readers fetch one record per lookup. :class:`ChunkedFetch` serves them through a byte-weighted
cache shared by every journal file of a database: a range inside a chunk that is cached (a scan
or a merge read it) comes from memory; a small range (at most ``chunk // 16`` bytes: a record a
point read wants) whose chunks are not cached is read alone, sized to the record, and cached by
itself, even when it crosses a chunk boundary, so a cold get of a 100-byte value reads about
150 bytes, never a 256 KiB chunk; a larger range reads and caches whole chunks.
:meth:`ChunkedFetch.direct` reads past the cache (a scan that reads each record once must not
evict what point reads use). On a store whose ranged reads are cheap (``in_parts``), a
journal reader reads a large record in parts, past the cache (:func:`reads_in_parts`). The
table store (:mod:`inkpen.manifest.table_store`) picks which one a reader gets. Either may read
through a disk cache (:mod:`inkpen.manifest.disk_cache`): every read but a scan's batched ones
(``direct_many``) and ranges of more than eight chunks (bulk reads of whole files), which go to
the store. A chunk or record missing from the cache is read by one thread while the others that
want it wait (:meth:`~inkpen.formats.cache.LruCache.load`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from inkpen.formats.cache import LruCache
from inkpen.objectstore.base import ObjectStore, is_local

from .disk_cache import CachedObject

RANGE_OVERHEAD = 160
"""Bytes a cached range costs beyond its length (its key and the cache's bookkeeping)."""


def reads_in_parts(store: ObjectStore) -> bool:
    """Whether a large journal record is best read from ``store`` in parts (its head, then its
    body into a bytes object of its own: :data:`~inkpen.formats.journal.PARTS_FROM`): true of a
    store whose ranged reads cost a system call or a slice, not a round trip (a local
    directory, memory: :func:`~inkpen.objectstore.base.is_local`); an object store reads a
    record in one request."""
    return is_local(store)


class DirectFetch:
    """``fetch(start, end)`` straight from the store, or through the disk cache (``disk``:
    the object through a :class:`~inkpen.manifest.disk_cache.DiskCache`)."""

    __slots__ = ("_disk", "in_parts", "key", "store")

    def __init__(self, store: ObjectStore, key: str, disk: CachedObject | None = None) -> None:
        self.store = store
        self.key = key
        self.in_parts = reads_in_parts(store)
        self._disk = disk

    def __call__(self, start: int, end: int) -> bytes:
        disk = self._disk
        if disk is not None:
            return disk.get_range(start, end)
        return self.store.get_range(self.key, start, end)

    direct = __call__

    def direct_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Every ``(start, end)`` of ``ranges``, in one ``get_ranges`` of the store."""
        return self.store.get_ranges(self.key, ranges)


class ChunkedFetch:
    """``fetch(start, end)`` through a shared cache of aligned ``chunk``-byte pieces; what it
    reads for point reads (records, chunks, :meth:`direct` reads) comes through the disk
    cache when there is one (``disk``), its bulk reads (:meth:`direct_many`, ranges of more
    than eight chunks) straight from the store."""

    __slots__ = ("_cache", "_chunk", "_disk", "_id", "_size", "in_parts", "key", "store")

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        size: int,
        cache: LruCache,
        chunk: int,
        disk: CachedObject | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.in_parts = reads_in_parts(store)
        self._size = size
        self._cache = cache
        self._chunk = chunk
        self._id = (store.url, key)
        self._disk = disk

    def _read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` for a point read: through the disk cache if there is one."""
        disk = self._disk
        if disk is not None:
            return disk.get_range(start, end)
        return self.store.get_range(self.key, start, end)

    def _piece(self, index: int) -> bytes:
        piece = self._cache.get((self._id, index))
        if piece is None:
            piece = self._load(index)
        return piece  # type: ignore[return-value]

    def _record(self, start: int, end: int) -> bytes:
        """A small range whose chunk is not cached: read alone and cached under its own key
        (one thread reads it while the others that want it wait)."""
        return self._cache.load(  # type: ignore[return-value]
            (self._id, start, end), lambda: self._sized(self._read(start, end), RANGE_OVERHEAD)
        )

    @staticmethod
    def _sized(data: bytes, overhead: int) -> tuple[bytes, int]:
        return data, len(data) + overhead

    def _load(self, index: int) -> bytes:
        start = index * self._chunk
        end = min(self._size, start + self._chunk)
        return self._cache.load(  # type: ignore[return-value]
            (self._id, index), lambda: self._sized(self._read(start, end), 0)
        )

    def cached(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` if a cached chunk or a cached range holds them, else None;
        reads nothing (a multi-get answers cached records before it plans its reads)."""
        found = self._cache.get((self._id, start, end))  # a record a point read cached
        if found is not None:
            return found  # type: ignore[return-value]
        chunk = self._chunk
        index = start // chunk
        if 0 <= start < end <= self._size and (end - 1) // chunk == index:
            piece = self._cache.get((self._id, index))
            if piece is not None:
                offset = start - index * chunk
                return cast(bytes, piece)[offset : offset + end - start]
        return None

    def cached_across(self, start: int, end: int, first: int) -> bytes | None:
        """Bytes ``[start, end)`` across the boundary after chunk ``first`` if both chunks are
        cached, else None."""
        cache = self._cache
        head = cache.get((self._id, first))
        tail = cache.get((self._id, first + 1)) if head is not None else None
        if tail is None:
            return None
        offset = start - first * self._chunk
        head_part = cast(bytes, head)[offset:]
        return head_part + cast(bytes, tail)[: end - start - len(head_part)]

    def keep(self, start: int, end: int, data: bytes) -> None:
        """Cache ``data``, bytes ``[start, end)`` read past the cache, as the record-sized read
        of a point read is cached (only ranges small enough that a point read reads them alone;
        nothing if their chunk is cached). A range across two chunks is kept too: a point read
        reads it with its chunks, a multi-get finds it by :meth:`cached`."""
        chunk = self._chunk
        index = start // chunk
        if (end - start) * 16 > chunk or len(data) != end - start:
            return  # a point read would read it with its chunk, not alone
        if (end - 1) // chunk != index or self._cache.get((self._id, index)) is None:
            self._cache.put((self._id, start, end), data, len(data) + RANGE_OVERHEAD)

    def direct(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` past the chunk cache (from the store, or through the disk
        cache: an index, a multi-get's run, a slot page)."""
        return self._read(start, min(end, self._size))

    def direct_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """:meth:`direct` of every ``(start, end)`` of ``ranges``, in one ``get_ranges`` of the
        store (a local directory reads them through one open file; obstore joins neighbours)."""
        size = self._size
        return self.store.get_ranges(self.key, [(start, min(end, size)) for start, end in ranges])

    def __call__(self, start: int, end: int) -> bytes:
        chunk = self._chunk
        index = start // chunk
        if 0 <= start < end <= self._size and (end - 1) // chunk == index:
            cache = self._cache
            piece = cache.get((self._id, index))  # the common case: one cached chunk
            if piece is None:
                if (end - start) * 16 <= chunk:
                    return self._record(start, end)
                piece = self._load(index)
            offset = start - index * chunk
            return cast(bytes, piece)[offset : offset + end - start]
        end = min(end, self._size)
        if end <= start:
            return b""
        first, last = index, (end - 1) // chunk
        if first == last:
            offset = start - first * chunk
            return self._piece(first)[offset : offset + end - start]
        if (end - start) * 16 <= chunk:
            # A small range across a chunk boundary: from the cached chunks if both are there,
            # else read alone (as a small range inside one chunk is), never two whole chunks.
            found = self.cached_across(start, end, first)
            return found if found is not None else self._record(start, end)
        if last - first > 8:
            return self.store.get_range(self.key, start, end)
        parts = [self._piece(i) for i in range(first, last + 1)]
        joined = b"".join(parts)
        offset = start - first * chunk
        return joined[offset : offset + end - start]
