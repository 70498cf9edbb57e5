"""A local disk cache of the parts of SST and journal files (option ``cache_dir``).

(SlateDB's object-store cache, RFC-0027: parts of objects kept on local disk.) The file readers'
ranged reads (:mod:`inkpen.manifest.fetch`) go through a :class:`CachedObject` when the options
name a ``cache_dir``. A read is cut into aligned parts of :data:`PART_BYTES`; the parts found on
disk answer from there, and the missing ones are read from the store in **one** ranged read
(from the first missing part to the last: a part in between that is cached is read again, as
one request beats two), kept on disk, and answered. So a cold point read stays one request, and
a process that starts again (or another process sharing the directory) reads the parts it
wants with no request at all.

**Only immutable objects.** Caching by name is safe because the objects cached never change:
SST and journal files (``ledger/<file-id>.sst``, ``journal/compacted/<file-id>.jnl``) take a
fresh name of 48 random bits and the time in ms each (:func:`~inkpen.manifest.paths.new_file_id`),
are created with create-if-absent and never rewritten; a copy (backup, restore, clone) carries
the same bytes under the same name; a database destroyed and made again at the same URL writes
new names. Journal segments (``journal/<id>.jnl``, whose slot a later writer may take after a
definite failure) and manifests are never read through this cache (segments are read whole at
open; manifests by the manifest store). The key of a part is the store's URL, the object's name,
its size (from the manifest's descriptor, no request) and the part's number, so even a name
reused with other bytes of another size could not answer from an older object.

**On disk.** One file per part, ``<cache_dir>/inkpen-parts-1/<2 hex>/<sha-256 of the key>``:
a magic, the key itself (checked on read, so a hash collision or a renamed file is a miss), the
part's bytes and a CRC-32C of all of it. A file is written under a temporary name in the same
directory and renamed into place (atomic), so a reader sees a whole part or none, whatever
other processes write at the same time. A part that fails its check (flipped bytes, truncated)
is deleted, logged (``cache.part_damaged``) and read from the store again: damaged bytes are
never answered. A part deleted under a reader (another process evicted it) is a miss; one that
was open already is read whole (the file lives on until closed).

**Bounded.** ``cache_dir_bytes`` bounds the bytes of the files. Each process counts what it
writes over what it found when it last listed the directory; a write that would pass the bound
first evicts (one thread at a time per process; a write that finds an eviction under way is not
kept): the directory is listed, and the least recently used files are deleted until the files
take at most :data:`LOW_WATER` of the bound. A process lists again (and evicts if the bound is
passed) once it has written an eighth of the bound since its last listing, or 30 s have passed
(:data:`RELIST_AFTER`), so what other processes sharing the directory write is counted too;
between two listings their writes may overshoot the bound by what they wrote since. Recency is
the file's modification time, set when it is written and again when it is read if older than
:data:`TOUCH_AFTER` (so a hit costs no write most of the time, and processes need no shared
state): an LRU to within a minute, which is what a cache of parts read again over hours
needs.

**Admission.** Point reads (gets, ``get_many``), opens (SST footers and indexes, journal
headers and block indexes) and SST scans admit what they read, as the block cache does; a
journal scan's batches (``direct_many``) and bulk reads of journal files (journal compaction,
replay, feeds reading several MiB at once) neither read nor fill the cache, so a scan of a
database larger than the disk cache does not wash out the parts gets use. A read larger than an
eighth of the bound is not kept.

Errors of the disk (full, unwritable) never fail a read: the part is read from the store and
not kept (logged once per cache, ``cache.write_failed``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import struct
import threading
import time
from dataclasses import dataclass

from inkpen.errors import UsageError
from inkpen.formats.cache import SingleFlight
from inkpen.formats.crc import CRC32C
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore
from inkpen.options import Options

log = get_logger("inkpen.manifest")

PART_BYTES = 64 * 1024
"""Objects are cached in aligned parts of this many bytes (the last part of an object is
shorter). A cold point read of a ~16 KiB SST run or a ~4 KiB journal block reads its part or
two (64 to 128 KiB: on an object store, a round trip costs more than the bytes)."""
LOW_WATER = 0.9
"""An eviction deletes files until they take at most this share of ``cache_dir_bytes``."""
TOUCH_AFTER = 60.0
"""Seconds: a part read is marked recently used (its modification time set) when its mark is
older than this."""
STALE_TEMPORARY = 3600.0
"""Seconds after which a temporary file (a writer that died before its rename) is deleted by
an eviction."""
RELIST_SHARE = 8
RELIST_AFTER = 30.0
"""A process lists the directory again (counting what other processes wrote) once it has
written an eighth of the bound since its last listing, or 30 s have passed, before its next
write."""
LAYOUT = "inkpen-parts-1"
"""The folder of ``cache_dir`` holding the parts (its name carries the file format's version)."""

_MAGIC = b"INKPART1"
_HEAD = struct.Struct(">8sI")
"""The head of a part file: magic, length of the key that follows."""
_CRC = struct.Struct(">I")
_TEMPORARY = ".tmp-"
_checksum = CRC32C.checksum


@dataclass(frozen=True, slots=True)
class DiskCacheStats:
    """What one process's disk cache did since it was opened."""

    hits: int
    """Parts answered from disk."""
    misses: int
    """Parts read from the store."""
    written: int
    """Parts kept on disk."""
    damaged: int
    """Part files that failed their check and were deleted."""
    evicted: int
    """Part files deleted to keep the bound."""
    bytes: int
    """Bytes of the part files as this process counts them (its last listing plus what it
    wrote since)."""


class DiskCache:
    """The parts kept under one directory, bounded by ``capacity`` bytes (see the module
    docstring). Thread-safe; several processes may share one directory."""

    def __init__(self, directory: str, capacity: int) -> None:
        root = os.path.join(directory, LAYOUT)
        try:
            os.makedirs(root, exist_ok=True)
            probe = os.path.join(root, f"{_TEMPORARY}probe-{os.getpid()}-{secrets.token_hex(4)}")
            with open(probe, "wb") as handle:
                handle.write(b"")
            os.unlink(probe)
        except OSError as exc:
            raise UsageError(
                f"option cache_dir={directory!r} cannot be used as a disk cache ({exc}); name a "
                "directory this process may create and write, or leave cache_dir unset"
            ) from None
        self.directory = directory
        self.capacity = capacity
        self._root = root
        self._lock = threading.Lock()
        self._evicting = threading.Lock()
        self._used: int | None = None
        self._unlisted = 0
        """Bytes this process wrote since it last listed the directory."""
        self._listed_at = 0.0
        self._flights = SingleFlight()
        self._counts = [0, 0, 0, 0, 0]  # hits, misses, written, damaged, evicted
        self._write_failed = False

    def object(self, store: ObjectStore, key: str, size: int) -> CachedObject:
        """Ranged reads of object ``key`` (``size`` bytes, immutable) of ``store`` through
        this cache."""
        return CachedObject(self, store, key, size)

    def stats(self) -> DiskCacheStats:
        """The counters of this process's cache."""
        hits, misses, written, damaged, evicted = self._counts
        return DiskCacheStats(hits, misses, written, damaged, evicted, self._used or 0)

    def _count(self, at: int, amount: int = 1) -> None:
        with self._lock:
            self._counts[at] += amount

    # -- one part ---------------------------------------------------------------------------

    def path_of(self, identity: bytes) -> str:
        """The file of the part whose key is ``identity``."""
        digest = hashlib.sha256(identity).hexdigest()
        return os.path.join(self._root, digest[:2], digest[2:])

    def read(self, identity: bytes, length: int) -> bytes | None:
        """The part whose key is ``identity`` (``length`` bytes), or None when it is not on
        disk or fails its check (then it is deleted)."""
        path = self.path_of(identity)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
                changed = os.fstat(handle.fileno()).st_mtime
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cache.part_unreadable", path=path, error=str(exc))
            return None
        found = self._checked(data, identity, length)
        if found is None:
            self._count(3)
            log.warning("cache.part_damaged", path=path, bytes=len(data))
            _unlink(path)
            return None
        if time.time() - changed > TOUCH_AFTER:
            with contextlib.suppress(OSError):  # evicted since: it was read whole all the same
                os.utime(path)
        return found

    @staticmethod
    def _checked(data: bytes, identity: bytes, length: int) -> bytes | None:
        """The part's bytes if ``data`` is a whole, undamaged part file of ``identity`` holding
        ``length`` bytes, else None."""
        head = _HEAD.size + len(identity)
        if len(data) != head + length + _CRC.size:
            return None
        magic, key_length = _HEAD.unpack_from(data, 0)
        if magic != _MAGIC or key_length != len(identity):
            return None
        view = memoryview(data)
        if view[_HEAD.size : head] != identity:
            return None
        (stored,) = _CRC.unpack_from(data, head + length)
        if _checksum(view[: head + length], 0) != stored:
            return None
        return data[head : head + length]

    def write(self, identity: bytes, data: bytes) -> None:
        """Keep ``data`` as the part whose key is ``identity`` (a whole file renamed into
        place); nothing when the bound leaves no room or the disk refuses."""
        body = _HEAD.pack(_MAGIC, len(identity)) + identity + data
        content = body + _CRC.pack(_checksum(body, 0))
        if not self._reserve(len(content)):
            return
        path = self.path_of(identity)
        temporary = f"{os.path.dirname(path)}/{_TEMPORARY}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            _write_file(temporary, content)
            os.replace(temporary, path)
        except OSError as exc:
            with self._lock:
                self._used = (self._used or 0) - len(content)
                first = not self._write_failed
                self._write_failed = True
            if first:
                log.warning("cache.write_failed", directory=self.directory, error=str(exc))
            _unlink(temporary)
            return
        self._count(2)

    # -- the bound --------------------------------------------------------------------------

    def _reserve(self, size: int) -> bool:
        """Count ``size`` more bytes, listing the directory (and evicting if the bound is
        passed) first when they would pass the bound or the last listing is stale; False when
        there is no room (another thread is evicting, or the part alone is too large)."""
        if size * 8 > self.capacity:
            return False
        with self._lock:
            used = self._used
            if (
                used is not None
                and used + size <= self.capacity
                and self._unlisted < self.capacity // RELIST_SHARE
                and time.monotonic() - self._listed_at < RELIST_AFTER
            ):
                self._used = used + size
                self._unlisted += size
                return True
        if not self._evicting.acquire(blocking=False):
            return False  # another thread makes room now; this part is not kept
        try:
            self._evict(size)
        finally:
            self._evicting.release()
        with self._lock:
            used = self._used or 0
            if used + size > self.capacity:
                return False
            self._used = used + size
            return True

    def _evict(self, room: int) -> None:
        """List the parts; if they and ``room`` more bytes pass the bound, delete the least
        recently used until they take at most :data:`LOW_WATER` of it (see the module
        docstring). Also deletes temporary files older than :data:`STALE_TEMPORARY`."""
        files: list[tuple[float, int, str]] = []
        total = 0
        now = time.time()
        for path, size, changed in _listing(self._root):
            if os.path.basename(path).startswith(_TEMPORARY):
                if now - changed > STALE_TEMPORARY:
                    _unlink(path)
                continue
            files.append((changed, size, path))
            total += size
        evicted = 0
        if total + room > self.capacity:
            files.sort()
            goal = int(self.capacity * LOW_WATER) - room
            for _, size, path in files:
                if total <= goal:
                    break
                if _unlink(path):
                    evicted += 1
                total -= size
            log.debug("cache.evicted", directory=self.directory, files=evicted, bytes=total)
        with self._lock:
            self._used = total
            self._unlisted = 0
            self._listed_at = time.monotonic()
            self._counts[4] += evicted


_shared: dict[tuple[str, int], DiskCache] = {}
_shared_lock = threading.Lock()


def disk_cache_for(options: Options) -> DiskCache | None:
    """The process's disk cache of the options' ``cache_dir`` (one per directory and bound,
    shared by every handle of the process that names them), or None when they name none.
    Raises :class:`~inkpen.errors.UsageError` when the directory cannot be made or written: an
    open checks this before it touches the store."""
    directory = options.cache_dir
    if directory is None:
        return None
    key = (os.path.realpath(directory), options.cache_dir_bytes)
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = DiskCache(directory, options.cache_dir_bytes)
        return found


def _listing(root: str) -> list[tuple[str, int, float]]:
    """``(path, size, modification time)`` of every file under the parts folder ``root``; files
    that vanish while it is listed are left out."""
    found: list[tuple[str, int, float]] = []
    try:
        folders = list(os.scandir(root))
    except OSError:
        return found
    for folder in folders:
        if not folder.is_dir(follow_symlinks=False):
            continue
        try:
            entries = list(os.scandir(folder.path))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append((entry.path, st.st_size, st.st_mtime))
    return found


def _write_file(path: str, content: bytes) -> None:
    """Write ``content`` as a new file ``path`` (its folder made if missing)."""
    try:
        handle = open(path, "wb")  # noqa: SIM115 - closed below, whichever open made it
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(path, "wb")  # noqa: SIM115
    with handle:
        handle.write(content)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


class CachedObject:
    """Ranged reads of one immutable object through a :class:`DiskCache` (see the module
    docstring): parts from disk, the missing ones in one ranged read of the store."""

    __slots__ = ("_cache", "_id", "key", "size", "store")

    def __init__(self, cache: DiskCache, store: ObjectStore, key: str, size: int) -> None:
        self._cache = cache
        self.store = store
        self.key = key
        self.size = size
        self._id = f"{store.url}\x00{key}\x00{size}\x00".encode()

    def _identity(self, part: int) -> bytes:
        return self._id + str(part).encode()

    def _length(self, part: int) -> int:
        return min(PART_BYTES, self.size - part * PART_BYTES)

    def get_range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, clipped at its end (as a store clips)."""
        end = min(end, self.size)
        if end <= start:
            return b""
        cache = self._cache
        first, last = start // PART_BYTES, (end - 1) // PART_BYTES
        parts: dict[int, bytes] = {}
        missing: list[int] = []
        for part in range(first, last + 1):
            found = cache.read(self._identity(part), self._length(part))
            if found is None:
                missing.append(part)
            else:
                parts[part] = found
        if missing:
            low, high = missing[0], missing[-1]
            fetched = cache._flights.run(
                (self._id, low, high), lambda: self._fetch(low, high, missing)
            )
            if fetched is None:  # the store answered short: let the reader see it
                return self.store.get_range(self.key, start, end)
            parts.update(fetched)
        cache._count(0, len(parts) - len(missing))
        base = first * PART_BYTES
        joined = (
            parts[first] if first == last else b"".join(parts[p] for p in range(first, last + 1))
        )
        if start == base and end - start == len(joined):
            return joined
        return joined[start - base : end - base]

    def _fetch(self, low: int, high: int, missing: list[int]) -> dict[int, bytes] | None:
        """Parts ``low`` to ``high`` read from the store in one ranged read, the ``missing``
        ones kept; None if the store answers fewer bytes than the object's size says (nothing
        kept)."""
        cache = self._cache
        start = low * PART_BYTES
        end = min(self.size, (high + 1) * PART_BYTES)
        data = self.store.get_range(self.key, start, end)
        cache._count(1, len(missing))
        if len(data) != end - start:
            return None
        parts: dict[int, bytes] = {}
        for part in range(low, high + 1):
            at = (part - low) * PART_BYTES
            parts[part] = data[at : at + PART_BYTES] if low != high else data
        if (end - start) * 8 <= cache.capacity:
            for part in missing:
                cache.write(self._identity(part), parts[part])
        return parts


__all__ = [
    "LAYOUT",
    "PART_BYTES",
    "CachedObject",
    "DiskCache",
    "DiskCacheStats",
    "disk_cache_for",
]
