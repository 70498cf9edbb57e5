"""A Reader reads only files its checkpoint pins, and says so when the pin lapsed.

Each test puts another party's step exactly where a Reader's protocol once left a gap: a flush
between the checkpoint's segment listing and its CAS, a lease refresh landing after the expiry
it extended, a writer judging a checkpoint by a stale manifest, a checkpoint dropped under a
Reader. Every file a Reader reads is pinned by its checkpoint at that moment; a file that
vanished because the pin lapsed is reported as a lapsed lease, never as corruption.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import inkpen
from inkpen.actors import registry
from inkpen.actors.keeper import ManifestKeeper
from inkpen.actors.registry import CheckpointGuard
from inkpen.manifest.checkpoints import create_checkpoint, delete_checkpoint, refresh_checkpoint
from inkpen.manifest.model import LedgerState, Manifest, SstDescriptor
from inkpen.manifest.paths import new_file_id, sst_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.hooks import HookedStore

DEADLINE = 60.0

QUIET = {
    "ledger_cache_entries": 10_000,
    "l0_cache_entries": 10_000,
    "fold_segments": 10_000,
    "fold_bytes": 64 * 1024 * 1024,
    "gc_min_age": 0.0,
    "delete_poll_interval": 0.05,
}
"""Nothing flushes or folds unless the test says so."""


def wait_until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def url(request: pytest.FixtureRequest, make_store_url: Callable[[str], str]) -> str:
    return make_store_url(request.param)


def test_a_flush_between_listing_segments_and_the_checkpoint_is_covered(url: str) -> None:
    model = {f"k{i}": b"old" for i in range(5)}
    with inkpen.open(url, **QUIET) as book:
        for key, value in model.items():
            book.put("r", key, value)
        store = HookedStore(open_store(url))

        def writer_moves_on() -> None:
            # Lands after the Reader listed the journal and before its checkpoint's CAS: the
            # flushed ledger names SQNs of segments that listing never saw.
            for key, value in {"k0": b"new", "late": b"late"}.items():
                book.put("r", key, value)
                model[key] = value
            book.flush()

        store.after_list("journal/", writer_moves_on)
        with inkpen.open_reader(store, checkpoint_lifetime=60.0) as reader:
            assert store.fired == ["journal/"]
            seen = {key.decode(): value for _, key, value in reader.objects("r")}
            assert seen == model
            assert reader.get("r", "late") == b"late"
        store.close()


def test_the_writers_delete_check_never_expires_a_checkpoint_by_a_stale_manifest(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer re-reads the manifest at most once a refresh interval; made endless here, the
    # copy it holds is as stale as it gets while a reader refreshes its lease in time.
    monkeypatch.setattr(registry, "CHECKPOINT_REFRESH_INTERVAL", 3600.0)
    store = open_store(url)
    manifests = ManifestStore(store)
    manifests.create(Manifest())
    name = sst_key(new_file_id())
    store.put_if_absent(name, b"sst bytes")
    sst = SstDescriptor(name, b"a", b"z", 1, 2, len(b"sst bytes"), 2, 0)
    manifests.update(lambda v: v.manifest.with_ledger(LedgerState(((sst,),), 0)))
    latest = manifests.latest()
    assert latest is not None
    keeper = ManifestKeeper(
        manifests,
        epoch=latest.manifest.writer_epoch,
        writer_checkpoint=None,
        latest=latest,
        timeout=30.0,
    )
    guard = CheckpointGuard(keeper)
    checkpoint = create_checkpoint(manifests, lifetime=2.0, metadata={"kind": "reader"})
    keeper.refresh()  # the writer's last look at the manifest
    assert guard.holds(name)  # the reader's checkpoint names the file
    refresh_checkpoint(manifests, checkpoint.id, lifetime=600.0)  # in time
    expired = checkpoint.expire_time
    assert expired is not None
    wait_until(lambda: time.time() > expired, "the first expiry time to pass")
    assert guard.holds(name), "a refreshed checkpoint was judged expired by a stale manifest"
    delete_checkpoint(manifests, checkpoint.id)
    keeper.refresh()
    assert not guard.holds(name)
    store.close()
