"""Helpers for engine tests: tiny file sizes, a clock tests can move, a model comparison."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import inkpen

TINY: dict[str, Any] = {
    "ledger_cache_entries": 8,
    "l0_cache_entries": 24,
    "max_l0_files": 2,
    "sst_target_bytes": 2048,
    "sst_block_bytes": 256,
    "l1_target_files": 2,
    "level_fanout": 2,
    "roll_segments": 6,
    "roll_bytes": 64 * 1024,
    "roll_link_bytes": 4096,  # a one-put segment is about 2.2 KiB: both kinds of roll happen
    "journal_file_target_bytes": 4096,
    "delete_poll_interval": 0.05,
    "gc_min_age": 0.0,
    "block_cache_bytes": 64 * 1024,
    "journal_cache_bytes": 64 * 1024,
    "journal_chunk_bytes": 4096,
}
"""Options that make every few puts flush, merge and roll."""


class GatedLedgerStore:
    """A store whose SST writes wait for a gate: the ledger cannot flush until it opens.

    ``waiting`` is set once an SST write is held at the gate."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        if key.startswith("ledger/"):
            self.waiting.set()
            self.gate.wait()
        self._inner.put_if_absent(key, data, metadata=metadata)


class HoldingStore:
    """A store that holds the first new SST or journal file it stores: once the file has landed,
    the writing thread waits for ``release`` (the file is on the store, not yet committed).
    ``held`` is set, and ``name`` set to its key, once it waits."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.held = threading.Event()
        self.release = threading.Event()
        self.name: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._inner.put_if_absent(key, data, metadata=metadata)
        if key.startswith(("ledger/", "journal/compacted/")) and self.name is None:
            self.name = key
            self.held.set()
            self.release.wait()


def missing_objects(store: Any) -> list[str]:
    """Objects of this root the latest manifest names that the store does not hold."""
    from inkpen.manifest.store import ManifestStore

    latest = ManifestStore(store).latest()
    assert latest is not None
    present = {info.key for info in store.list("")}
    named = {name for root, name in latest.manifest.referenced_objects() if root is None}
    return sorted(named - present)


def checkpoints(url: str) -> tuple[Any, ...]:
    """The checkpoints the latest manifest of the database at ``url`` holds."""
    from inkpen.manifest.store import ManifestStore
    from inkpen.objectstore import open_store

    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return latest.manifest.checkpoints
    finally:
        store.close()


def gc_leaves_no_orphans(url: str) -> None:
    """With no writer or compactor running, one offline GC pass must leave no SST or journal
    file that no remaining manifest names: whatever killed processes left unnamed was an
    orphan GC removes. The latest manifest's objects must all be there."""
    from inkpen.manifest.gc import GcOptions, run_gc
    from inkpen.manifest.paths import is_journal_file_key, is_sst_key, parse_manifest_key
    from inkpen.manifest.store import ManifestStore
    from inkpen.objectstore import open_store

    report = run_gc(url, options=GcOptions(min_age=0.0, offline=True))
    store = open_store(url)
    try:
        manifests = ManifestStore(store)
        listing = [info.key for info in store.list("")]
        named: set[str] = set()
        for key in listing:
            manifest_id = parse_manifest_key(key)
            if manifest_id is not None:
                named.update(n for root, n in manifests.read(manifest_id).referenced_objects())
        assert missing_objects(store) == []
    finally:
        store.close()
    files = {key for key in listing if is_sst_key(key) or is_journal_file_key(key)}
    assert files <= named, (
        f"GC ({report.counts()}) left files no manifest names: {sorted(files - named)}"
    )


class FakeClock:
    """A wall clock that only moves when told to; thread-safe."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def contents(
    book: inkpen.Bookie | inkpen.Snapshot | inkpen.Reader, bucket: str
) -> dict[bytes, bytes]:
    """Every live object of a bucket, by key."""
    return {key: value for _, key, value in book.objects(bucket)}


SMALL: dict[str, Any] = {
    **TINY,
    "ledger_cache_entries": 100,
    "l0_cache_entries": 400,
    "sst_target_bytes": 16 * 1024,
    "sst_block_bytes": 1024,
    "roll_segments": 32,
    "roll_bytes": 256 * 1024,
    "journal_file_target_bytes": 48 * 1024,
}
"""Small enough that thousands of writes still flush, merge and roll many times, large enough
that they make hundreds of objects rather than thousands (object stores pay per request)."""


class RacingWriters:
    """Threads that put distinct keys (``w<thread>-<n>``, value = key) into bucket ``race`` of
    one Bookie until it refuses one with :class:`inkpen.FencedError`, recording which puts were
    acknowledged and which refused. :meth:`start` returns once every thread is writing."""

    def __init__(self, book: inkpen.Bookie, threads: int, *, limit: int) -> None:
        self.book = book
        self.limit = limit
        self.acknowledged: list[str] = []
        self.refused: list[str] = []
        self._lock = threading.Lock()
        self._started = threading.Barrier(threads + 1)
        self.threads = [threading.Thread(target=self._write, args=(i,)) for i in range(threads)]

    def _write(self, index: int) -> None:
        self._started.wait()
        for n in range(self.limit):
            key = f"w{index}-{n}"
            try:
                self.book.put("race", key, key.encode())
            except inkpen.FencedError:
                with self._lock:
                    self.refused.append(key)
                return
            with self._lock:
                self.acknowledged.append(key)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        self._started.wait()

    def join(self, timeout: float = 120.0) -> None:
        for thread in self.threads:
            thread.join(timeout=timeout)
            assert not thread.is_alive(), "a writer thread is still running"
