"""Files another process deletes under a live writer: it never commits a manifest naming a missing
object, and a lost ledger file makes it fail loudly instead of retrying its merge for ever."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

import inkpen
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY, missing_objects

DEADLINE = 30.0


class DeletingStore:
    """A store that deletes the first SST it stores right after storing it, as a GC with too
    short a ``min_age`` in another process would; ``deleted`` names it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.deleted: str | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._inner.put_if_absent(key, data, metadata=metadata)
        with self._lock:
            if key.startswith("ledger/") and self.deleted is None:
                self.deleted = key
                self._inner.delete(key)


def test_a_file_deleted_before_its_commit_is_written_again_never_committed(
    store_url: str,
) -> None:
    store = open_store(store_url)
    deleting = DeletingStore(store)
    with inkpen.open(deleting, **TINY) as book:
        for n in range(60):
            book.put("b", f"k{n}", b"v%d" % n)
        book.flush()
        book.compact_ledger()
        assert deleting.deleted is not None
        for n in range(60):
            assert book.get("b", f"k{n}") == b"v%d" % n
    manifests = ManifestStore(store)
    latest = manifests.latest()
    assert latest is not None
    for info in store.list("manifest/"):  # every version still stored
        named = {n for _, n in manifests.read(int(info.key[9:29])).referenced_objects()}
        assert deleting.deleted not in named, f"{info.key} names a deleted file"
    assert missing_objects(store) == []
    store.close()


def test_a_lost_ledger_file_stops_the_writer_loudly(store_url: str) -> None:
    """A committed SST vanishes (another process deleted it): the merge that needs it must not
    be retried for ever; compact_ledger and later puts raise CorruptionError naming it."""
    store = open_store(store_url)
    book = inkpen.open(store_url, **{**TINY, "max_l0_files": 4, "l0_cache_entries": 8})
    try:
        for n in range(30):
            book.put("b", f"k{n}", b"before")
        book.flush()
        book.compact_ledger()
        latest = ManifestStore(store).latest()
        assert latest is not None
        victim = min(latest.manifest.ledger.ssts(), key=lambda d: d.first_key).name
        store.delete(victim)
        with pytest.raises(inkpen.CorruptionError, match=victim):
            for n in range(30):  # a merge needs the lost file; once it has failed, puts fail
                book.put("b", f"k{n}", b"v")
            book.compact_ledger()
        with pytest.raises(inkpen.CorruptionError, match=victim):
            book.compact_ledger()
        with pytest.raises(inkpen.CorruptionError, match=victim):
            book.put("b", "after", b"x")
    finally:
        book.abandon()
    store.close()
