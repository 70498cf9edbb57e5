"""Destroy: soft (fence, mark, GC removes after the grace period and the last checkpoint) and
hard (refused while checkpoints live, then everything, the manifest last)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from inkpen.errors import FencedError, NotFoundError, StoreError, UsageError
from inkpen.formats.journal import JournalEntry, Kind, build_journal
from inkpen.manifest.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from inkpen.manifest.clones import create_clone
from inkpen.manifest.destroy import destroy
from inkpen.manifest.fencing import claim_writer, write_segment
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import Manifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.faults import FaultPlan, FaultyStore
from support.stores import listing


def segment(sqn: int, epoch: int) -> bytes:
    entry = JournalEntry(sqn, Kind.OBJECT, b"k%d" % sqn, b"v", (), None, 0)
    return build_journal([entry], writer_epoch=epoch)


@pytest.fixture
def database(store: ObjectStore) -> ManifestStore:
    ms = ManifestStore(store)
    ms.create(Manifest())
    claim = claim_writer(ms)
    write_segment(store, 2, segment(1, claim.epoch), writer_epoch=claim.epoch)
    store.put_if_absent("ledger/0190000000000aaaaaaaaaaaa.sst", b"sst")
    return ms


def test_soft_destroy_fences_the_writer_and_gc_removes_later(
    database: ManifestStore, store: ObjectStore
) -> None:
    latest = database.latest()
    assert latest is not None
    old_epoch = latest.manifest.writer_epoch
    reader = create_checkpoint(database, lifetime=None, metadata={"kind": "reader"})
    marked = destroy(store, soft=True, now=5000.0)
    assert marked.manifest.destroyed_at == 5000.0
    assert marked.manifest.writer_epoch == old_epoch + 1
    assert [cp for cp in marked.manifest.checkpoints if cp.kind == "writer"] == []
    with pytest.raises(FencedError):
        write_segment(store, 3, segment(2, old_epoch), writer_epoch=old_epoch)
    with pytest.raises(NotFoundError, match="was destroyed"):
        ManifestStore(store).open_database(create_if_missing=True)
    assert destroy(store, soft=True, now=6000.0) == marked  # again: nothing more happens

    before = listing(store)
    within_grace = run_gc(store, options=GcOptions(destroy_grace=100), now=5050.0)
    assert not within_grace.destroyed and listing(store) != []
    held = run_gc(store, options=GcOptions(destroy_grace=100), now=5500.0)
    assert not held.destroyed  # a reader still holds a checkpoint
    assert {k for k, _ in listing(store)} >= {k for k, _ in before if not k.startswith("manifest")}

    delete_checkpoint(database, reader.id)
    gone = run_gc(store, options=GcOptions(destroy_grace=100), now=5500.0)
    assert gone.destroyed
    assert listing(store) == []
    assert gone.deleted[-1].startswith("manifest/")


def test_hard_destroy_refuses_live_checkpoints(database: ManifestStore, store: ObjectStore) -> None:
    reader = create_checkpoint(database, lifetime=3600)
    before = listing(store)
    with pytest.raises(UsageError, match="still has live checkpoints") as caught:
        destroy(store, soft=False)
    message = str(caught.value)
    assert reader.id in message and "kind writer" in message and "delete_checkpoint" in message
    assert listing(store) == before

    for cp in list_checkpoints(database):
        delete_checkpoint(database, cp.id)
    destroy(store.url, soft=False)
    assert listing(store) == []
    with pytest.raises(NotFoundError, match="no inkpen database"):
        destroy(store, soft=False)


def test_hard_destroy_fences_a_running_writer(database: ManifestStore, store: ObjectStore) -> None:
    latest = database.latest()
    assert latest is not None
    epoch = latest.manifest.writer_epoch
    for cp in latest.manifest.checkpoints:
        delete_checkpoint(database, cp.id)
    faulty = FaultyStore(store, FaultPlan(seed=5, before={"delete": 0.5, "delete_many": 0.5}))
    with pytest.raises(StoreError, match="call destroy again to finish") as caught:
        destroy(faulty, soft=False)
    assert "injected failure before" in str(caught.value)
    assert caught.value.key in [key for key, _ in listing(store)]  # an object still there
    # Interrupted: the database reads as destroyed, and its writer is fenced.
    with pytest.raises(NotFoundError, match="was destroyed"):
        ManifestStore(store).open_database(create_if_missing=False)
    with pytest.raises(FencedError):
        database.update(lambda v: v.manifest, writer_epoch=epoch)
    destroy(store, soft=False)  # finishes the job
    assert listing(store) == []


def test_destroying_a_clone_releases_its_parent_pin(
    database: ManifestStore,
    store: ObjectStore,
    store_kind: str,
    make_store_url: Callable[[str], str],
) -> None:
    clone = open_store(make_store_url(store_kind))
    create_clone(store, clone)
    pins = [cp for cp in list_checkpoints(database) if cp.kind == "clone"]
    assert len(pins) == 1
    destroy(clone, soft=True)
    assert [cp for cp in list_checkpoints(database) if cp.kind == "clone"] == pins
    report = run_gc(clone, options=GcOptions(destroy_grace=0), now=time.time() + 1)
    assert report.destroyed and listing(clone) == []
    assert [cp for cp in list_checkpoints(database) if cp.kind == "clone"] == []


def test_destroy_refuses_missing_and_foreign_roots(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="no inkpen database"):
        destroy(store, soft=True)
    store.put("photos/cat.jpg", b"meow")
    before = listing(store)
    for soft in (True, False):
        with pytest.raises(UsageError, match="not an inkpen database"):
            destroy(store, soft=soft)
    with pytest.raises(UsageError, match="soft=True"):
        destroy(store, soft="yes")  # type: ignore[arg-type]
    assert listing(store) == before
