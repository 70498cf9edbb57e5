"""A bounded, thread-safe cache of read-only file descriptors for ranged reads.

Ranged reads of SST blocks and journal records are inkpen's hot read path. Opening and closing
a file per read costs more than the read itself, so a local directory store keeps recently read
files open and serves ranges with ``os.pread`` (no shared file offset, so threads never
interfere).

A cached descriptor is used only while its file still has a name: every read checks the link
count with ``fstat`` (about a microsecond, half the cost of a ``stat`` by path), so an object
deleted or replaced by anyone, in this process or another, is opened afresh. The one case this
check cannot see is an object replaced while its old bytes keep another name (a hard-link copy
under another key); inkpen never rewrites the objects it reads by range, and a store forgets its
own cached descriptor whenever it writes or deletes a key itself.

A descriptor is closed only when it has been evicted *and* no read is using it, so a concurrent
eviction can never close a descriptor under a ``pread`` (nor let its number be reused for
another file mid-read).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from inkpen.errors import UsageError

DEFAULT_MAX_OPEN_FILES = 256


@dataclass(slots=True)
class _OpenFile:
    fd: int
    readers: int = 0
    evicted: bool = False


class OpenFileCache:
    """Owns up to ``capacity`` open read-only descriptors, least recently used evicted first."""

    def __init__(self, capacity: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if capacity < 1:
            raise UsageError(f"max_open_files must be at least 1, got {capacity}")
        self._capacity = capacity
        self._lock = threading.Lock()
        self._files: OrderedDict[str, _OpenFile] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

    def pread(self, path: str, size: int, offset: int) -> bytes:
        """Read up to ``size`` bytes at ``offset`` of the regular file at ``path``.

        Raises :class:`FileNotFoundError` when ``path`` does not name a regular file, and any
        other :class:`OSError` as it comes.
        """
        entry = self._take(path)
        try:
            return _pread_fully(entry.fd, size, offset)
        finally:
            self._release(entry)

    def pread_many(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """:meth:`pread` of every ``(start, end)`` of ``ranges`` of one file: its descriptor is
        taken and checked once for all of them."""
        entry = self._take(path)
        try:
            fd = entry.fd
            return [_pread_fully(fd, end - start, start) for start, end in ranges]
        finally:
            self._release(entry)

    def _take(self, path: str) -> _OpenFile:
        """The entry of ``path``, pinned for reads (release it after): the cached one while its
        file still has a name, else the file opened afresh."""
        entry = self._cached(path)
        if entry is not None and not _still_linked(entry.fd):
            self._release(entry, drop_path=path)
            entry = None
        return self._open(path) if entry is None else entry

    def forget(self, path: str) -> None:
        """Stop caching ``path`` (its object was just replaced or deleted)."""
        with self._lock:
            entry = self._files.pop(path, None)
            if entry is not None:
                self._retire(entry)

    def close(self) -> None:
        """Close every descriptor not in use now; the rest close when their reads finish."""
        with self._lock:
            for entry in self._files.values():
                self._retire(entry)
            self._files.clear()

    def _cached(self, path: str) -> _OpenFile | None:
        """The cached entry for ``path``, pinned for one read, or None."""
        with self._lock:
            entry = self._files.get(path)
            if entry is None:
                return None
            self._files.move_to_end(path)
            entry.readers += 1
            return entry

    def _open(self, path: str) -> _OpenFile:
        """Open ``path``, cache it (evicting the least recently used) and pin it for one read."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a regular file", path)
        except OSError:
            os.close(fd)
            raise
        fresh = _OpenFile(fd, readers=1)
        with self._lock:
            stale = self._files.pop(path, None)
            if stale is not None:
                self._retire(stale)
            self._files[path] = fresh
            while len(self._files) > self._capacity:
                _, oldest = self._files.popitem(last=False)
                self._retire(oldest)
        return fresh

    def _release(self, entry: _OpenFile, *, drop_path: str | None = None) -> None:
        """Unpin ``entry``; with ``drop_path``, also stop caching it under that path."""
        with self._lock:
            entry.readers -= 1
            if drop_path is not None and self._files.get(drop_path) is entry:
                del self._files[drop_path]
                entry.evicted = True
            if entry.evicted and entry.readers == 0:
                os.close(entry.fd)

    @staticmethod
    def _retire(entry: _OpenFile) -> None:
        """Mark an entry evicted (caller holds the lock); close it unless a read is using it."""
        entry.evicted = True
        if entry.readers == 0:
            os.close(entry.fd)


def _still_linked(fd: int) -> bool:
    try:
        return os.fstat(fd).st_nlink > 0
    except OSError:
        return False


def _pread_fully(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
