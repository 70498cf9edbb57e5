"""``memory://NAME``: an in-process, thread-safe object store for unit tests.

Stores with the same name share one space for the life of the process, so a test can "reopen" a
database by opening the same URL again. :func:`drop_space` forgets a space.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult

from inkpen.errors import AlreadyExistsError, NotFoundError, UsageError

from .backends import Backend, Place, StoreURL
from .base import (
    DEFAULT_PAGE_SIZE,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoreBase,
    check_data,
    check_key,
    check_keys,
    check_metadata,
    check_page,
    check_prefix,
    check_range,
)
from .parallel import MEMORY_CONCURRENCY


@dataclass(frozen=True, slots=True)
class _Stored:
    data: bytes
    metadata: Mapping[str, str]
    last_modified: float


class _Space:
    """One named key space: a dict of objects plus a sorted key list for listings."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, _Stored] = {}
        self.keys: list[str] = []

    def store(self, key: str, stored: _Stored) -> None:
        if key not in self.objects:
            bisect.insort(self.keys, key)
        self.objects[key] = stored

    def remove(self, key: str) -> None:
        if self.objects.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]


_spaces: dict[str, _Space] = {}
_spaces_lock = threading.Lock()


def drop_space(name: str) -> None:
    """Forget every object of the named in-memory space."""
    with _spaces_lock:
        _spaces.pop(name, None)


class MemoryStore(StoreBase):
    """Objects held in a process-wide dict, keyed by space name; all operations take one lock."""

    local = True
    """Its requests are slices and dict operations, not round trips
    (:func:`~inkpen.objectstore.base.is_local`)."""
    concurrency = MEMORY_CONCURRENCY

    def __init__(self, name: str, *, prefix: str = "") -> None:
        self._name = name
        self._prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self._url = f"memory://{name}" + (f"/{self._prefix.rstrip('/')}" if self._prefix else "")
        with _spaces_lock:
            self._space = _spaces.setdefault(name, _Space())

    def _full(self, key: str) -> str:
        return self._prefix + check_key(key)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        full = self._full(key)
        stored = _Stored(check_data(data), check_metadata(metadata), time.time())
        with self._space.lock:
            if full in self._space.objects:
                raise AlreadyExistsError(f"object {key!r} already exists in {self._url}", key=key)
            self._space.store(full, stored)

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        full = self._full(key)
        stored = _Stored(check_data(data), check_metadata(metadata), time.time())
        with self._space.lock:
            self._space.store(full, stored)

    def _fetch(self, key: str) -> _Stored:
        full = self._full(key)
        with self._space.lock:
            stored = self._space.objects.get(full)
        if stored is None:
            raise NotFoundError(f"object {key!r} not found in {self._url}", key=key)
        return stored

    def get(self, key: str) -> bytes:
        return self._fetch(key).data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        check_range(start, end)
        return self._fetch(key).data[start:end]

    def head(self, key: str) -> ObjectInfo:
        stored = self._fetch(key)
        return ObjectInfo(key, len(stored.data), stored.last_modified, dict(stored.metadata))

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        full_prefix = self._prefix + check_prefix(prefix)
        check_page(token, limit)
        after = self._prefix + token if token is not None else None
        with self._space.lock:
            keys = self._space.keys
            i = bisect.bisect_right(keys, after) if after is not None else 0
            i = max(i, bisect.bisect_left(keys, full_prefix))
            found: list[ObjectInfo] = []
            while i < len(keys) and keys[i].startswith(full_prefix) and len(found) < limit:
                stored = self._space.objects[keys[i]]
                rel = keys[i][len(self._prefix) :]
                found.append(ObjectInfo(rel, len(stored.data), stored.last_modified))
                i += 1
            more = i < len(keys) and keys[i].startswith(full_prefix)
        return ListPage(tuple(found), found[-1].key if more and found else None)

    def delete(self, key: str) -> None:
        full = self._full(key)
        with self._space.lock:
            self._space.remove(full)

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """Every key removed in one loop under the space's lock (nothing can fail)."""
        full = [self._prefix + key for key in check_keys(keys)]
        with self._space.lock:
            for key in full:
                self._space.remove(key)
        return DeleteResult()

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        full = self._full(dest_key)  # refuse a bad destination before reading anything
        origin = source if source is not None else self
        if isinstance(origin, MemoryStore):
            stored = origin._fetch(src_key)
            with self._space.lock:
                self._space.store(full, _Stored(stored.data, stored.metadata, time.time()))
            return
        info = origin.head(src_key)
        self.put(dest_key, origin.get(src_key), metadata=info.metadata)


def _parse(parts: SplitResult, url: str, options: dict[str, str]) -> StoreURL:
    if not parts.netloc:
        raise UsageError(f"memory URL {url!r} needs a space name: memory://NAME")
    return StoreURL("memory", parts.netloc, parts.path.strip("/"), options)


def _open(parsed: StoreURL) -> ObjectStore:
    return MemoryStore(parsed.location, prefix=parsed.prefix)


def _place(parsed: StoreURL) -> Place:
    return "memory", parsed.location, tuple(part for part in parsed.prefix.split("/") if part)


BACKEND = Backend(
    scheme="memory",
    form="memory://name",
    parse=_parse,
    open=_open,
    place=_place,
    durable=False,
)
