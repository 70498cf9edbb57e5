"""The CAS manifest store: finding the latest version, contended updates, epochs, bad roots."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from inkpen.errors import (
    AlreadyExistsError,
    CorruptionError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from inkpen.manifest.model import CloneParent, Manifest, VersionedManifest, encode
from inkpen.manifest.paths import manifest_key
from inkpen.manifest.store import ManifestStore, RootState, require_live
from inkpen.objectstore import ObjectStore, open_store
from support.stores import listing


def bump(versioned: VersionedManifest) -> Manifest:
    return replace(versioned.manifest, compactor_epoch=versioned.manifest.compactor_epoch + 1)


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    return open_store(store_url)


def test_create_then_latest(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    assert ms.latest() is None
    assert ms.check_root_state() is RootState.EMPTY
    created = ms.create(Manifest(writer_epoch=0))
    assert created.id == 1
    assert ms.check_root_state() is RootState.DATABASE
    with pytest.raises(AlreadyExistsError, match="already exists"):
        ms.create(Manifest())
    fresh = ManifestStore(store)
    assert fresh.latest() == created
    assert fresh.read(1) == created.manifest
    with pytest.raises(NotFoundError, match="manifest 2 does not exist"):
        fresh.read(2)


def test_latest_sees_versions_written_by_another_store_instance(store: ObjectStore) -> None:
    mine = ManifestStore(store)
    mine.create(Manifest())
    assert mine.latest() is not None
    other = ManifestStore(store)
    for _ in range(3):
        other.update(bump)
    # The cached id is 1; probing finds 2, 3 and 4.
    latest = mine.latest()
    assert latest is not None and latest.id == 4
    assert latest.manifest.compactor_epoch == 3
    for _ in range(10):
        other.update(bump)
    # Far behind: after a few probes the store lists instead, and still finds the newest.
    latest = mine.latest()
    assert latest is not None and latest.id == 14
    assert mine.ids() == list(range(1, 15))


def test_update_skips_when_change_returns_none(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    ms.create(Manifest())
    before = listing(store)
    result = ms.update(lambda v: None)
    assert result.id == 1
    assert listing(store) == before


def test_update_contention_keeps_ids_contiguous(store: ObjectStore) -> None:
    ManifestStore(store).create(Manifest())
    threads, per_thread = 8, 50
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []

    def work() -> None:
        ms = ManifestStore(store)
        barrier.wait()
        try:
            for _ in range(per_thread):
                ms.update(bump)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert failures == []
    ms = ManifestStore(store)
    latest = ms.latest()
    assert latest is not None
    assert latest.manifest.compactor_epoch == threads * per_thread
    assert ms.ids() == list(range(1, threads * per_thread + 2))


def test_update_with_writer_epoch(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    ms.create(Manifest(writer_epoch=3))
    assert ms.update(bump, writer_epoch=3).id == 2
    before = listing(store)
    with pytest.raises(FencedError, match="epoch 3, newer than this writer's epoch 2"):
        ms.update(bump, writer_epoch=2)
    with pytest.raises(InkpenError, match="epochs only go up"):
        ms.update(bump, writer_epoch=4)
    assert listing(store) == before


def test_update_refuses_bad_arguments(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    ms.create(Manifest())
    before = listing(store)
    with pytest.raises(UsageError, match="callable"):
        ms.update("nope")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must return a Manifest or None"):
        ms.update(lambda v: {"writer_epoch": 1})  # type: ignore[arg-type,return-value]
    with pytest.raises(UsageError, match="timeout"):
        ms.update(bump, timeout=0)
    with pytest.raises(UsageError, match="writer_epoch"):
        ms.update(bump, writer_epoch="1")  # type: ignore[arg-type]
    assert listing(store) == before


def test_update_without_database(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="no inkpen database"):
        ManifestStore(store).update(bump)
    assert listing(store) == []


def test_contention_timeout_is_a_definite_error(store: ObjectStore) -> None:
    """A rival that always gets in first starves the update until its timeout."""
    ms = ManifestStore(store)
    ms.create(Manifest())
    rival = ManifestStore(store)
    calls = 0

    def change(versioned: VersionedManifest) -> Manifest:
        nonlocal calls
        calls += 1
        rival.update(bump)  # another process lands id + 1 before we write it
        return bump(versioned)

    with pytest.raises(StoreError, match="contention") as caught:
        ms.update(change, timeout=0.3)
    assert caught.value.definite
    assert calls >= 2
    # Every landed version is the rival's: ours never overwrote one.
    latest = ms.latest()
    assert latest is not None and latest.manifest.compactor_epoch == calls
    assert ms.ids() == list(range(1, calls + 2))


def test_open_database_creates_once(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    with pytest.raises(NotFoundError, match="no inkpen database"):
        ms.open_database(create_if_missing=False)
    assert listing(store) == []
    first = ms.open_database(create_if_missing=True)
    again = ManifestStore(store).open_database(create_if_missing=True)
    assert first == again and first.id == 1


def test_foreign_root_is_refused_and_left_alone(store: ObjectStore) -> None:
    store.put("photos/cat.jpg", b"\xff\xd8 not a database")
    store.put("journal/notes.txt", b"hello")
    before = listing(store)
    ms = ManifestStore(store)
    assert ms.check_root_state() is RootState.FOREIGN
    with pytest.raises(UsageError, match="holds objects but no inkpen manifest"):
        ms.open_database(create_if_missing=True)
    assert listing(store) == before


def test_destroyed_database_is_refused(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    ms.create(Manifest(destroyed_at=1_700_000_000.0))
    before = listing(store)
    with pytest.raises(NotFoundError, match=r"was destroyed at 2023-11-14 22:13:20 UTC"):
        ms.open_database(create_if_missing=True)
    assert listing(store) == before


def test_unfinished_clone_is_refused(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    created = ms.create(Manifest(initialized=False, parent=CloneParent("memory://parent", "c1")))
    with pytest.raises(UsageError, match="call create_clone again"):
        require_live(created, store.url)


def test_unfinished_backup_is_refused(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    created = ms.create(Manifest(initialized=False))
    with pytest.raises(UsageError, match="hot backup that did not finish; take the backup"):
        require_live(created, store.url)


def test_corrupt_latest_manifest_is_a_clear_error(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    ms.create(Manifest())
    ms.update(bump)
    damaged = bytearray(store.get(manifest_key(2)))
    damaged[-1] ^= 0x55
    store.delete(manifest_key(2))
    store.put_if_absent(manifest_key(2), bytes(damaged))
    before = listing(store)
    fresh = ManifestStore(store)
    with pytest.raises(CorruptionError, match=r"manifest/00000000000000000002\.manifest"):
        fresh.open_database(create_if_missing=True)
    with pytest.raises(CorruptionError, match="checksum"):
        fresh.update(bump)
    assert listing(store) == before


def test_encoded_manifest_is_what_is_stored(store: ObjectStore) -> None:
    ms = ManifestStore(store)
    manifest = Manifest(writer_epoch=9)
    ms.create(manifest)
    assert store.get(manifest_key(1)) == encode(manifest)


def test_manifest_store_needs_an_object_store() -> None:
    with pytest.raises(UsageError, match="needs an ObjectStore"):
        ManifestStore("memory://x")  # type: ignore[arg-type]


def test_update_from_a_stale_cache_lands_above_a_gc_gap(store: ObjectStore) -> None:
    """GC deletes superseded versions, leaving gaps below the latest; an updater whose cached
    latest sits below a gap must still write above the real latest, never into the gap."""
    writer = ManifestStore(store)
    writer.create(Manifest())
    assert writer.latest() is not None  # caches version 1
    other = ManifestStore(store)
    other.update(bump)
    other.update(bump)
    store.delete(manifest_key(2))  # as GC does with a superseded, unpinned version
    made = writer.update(bump)
    assert made.id == 4
    latest = ManifestStore(store).latest()
    assert latest is not None and latest.id == 4
    assert latest.manifest.compactor_epoch == 3


class CreatedAfterFirstListing:
    """A real store on which another process creates the database (manifest 1 and a journal
    fence) right after this process's first listing: the window of concurrent first opens."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self._pending = True

    def _other_process_creates(self) -> None:
        if self._pending:
            self._pending = False
            ManifestStore(self.inner).create(Manifest())
            self.inner.put_if_absent("journal/00000000000000000001.jnl", b"fence")

    def list(self, prefix: str = ""):  # type: ignore[no-untyped-def]
        found = list(self.inner.list(prefix))
        self._other_process_creates()
        return iter(found)

    def list_page(self, prefix: str = "", **kwargs):  # type: ignore[no-untyped-def]
        page = self.inner.list_page(prefix, **kwargs)
        self._other_process_creates()
        return page

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_database_created_during_the_root_check_is_opened(store: ObjectStore) -> None:
    racing = ManifestStore(CreatedAfterFirstListing(store))  # type: ignore[arg-type]
    opened = racing.open_database(create_if_missing=True)
    assert opened.id == 1
    assert listing(store)[0][0] == "journal/00000000000000000001.jnl"
