"""A Reader reads only files its checkpoint pins, and says so when the pin lapsed.

Each test puts another party's step exactly where a Reader's protocol once left a gap: a flush
between the checkpoint's segment listing and its CAS, a lease refresh landing after the expiry
it extended, a writer judging a checkpoint by a stale manifest, a checkpoint dropped under a
Reader. Every file a Reader reads is pinned by its checkpoint at that moment; a file that
vanished because the pin lapsed is reported as a lapsed lease, never as corruption.
"""

from __future__ import annotations

import time

import pytest

import inkpen
from inkpen.actors.files import registry
from inkpen.actors.files.registry import CheckpointGuard
from inkpen.actors.kernel.keeper import ManifestKeeper
from inkpen.manifest.checkpoints import create_checkpoint, delete_checkpoint, refresh_checkpoint
from inkpen.manifest.gc import MIN_AGE_WITHOUT_WRITER, GcOptions, run_gc
from inkpen.manifest.model import LedgerState, Manifest, SstDescriptor, VersionedManifest
from inkpen.manifest.paths import manifest_key, new_file_id, sst_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.hooks import HookedStore
from support.latency_proxy import DURABLE_KIND_PARAMS, with_latency
from support.logs import capture_logs
from support.waiting import wait_until

DEADLINE = 60.0

QUIET = {
    "ledger_cache_entries": 10_000,
    "l0_cache_entries": 10_000,
    "roll_segments": 10_000,
    "roll_bytes": 64 * 1024 * 1024,
    "gc_min_age": 0.0,
    "delete_poll_interval": 0.05,
}
"""Nothing flushes or rolls unless the test says so."""


@pytest.fixture(params=with_latency(DURABLE_KIND_PARAMS, tier=True))
def durable_kind(request: pytest.FixtureRequest) -> str:
    """A directory, SeaweedFS, and SeaweedFS behind the latency proxy (the latency tier)."""
    return str(request.param)


@pytest.fixture
def url(durable_store_url: str) -> str:
    """A fresh store root another process can open too: a directory, or SeaweedFS."""
    return durable_store_url


@pytest.mark.parametrize("durable_kind", with_latency(DURABLE_KIND_PARAMS, tier=False))
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
    wait_until(lambda: time.time() > expired, "the first expiry time to pass", DEADLINE)
    assert guard.holds(name), "a refreshed checkpoint was judged expired by a stale manifest"
    delete_checkpoint(manifests, checkpoint.id)
    keeper.refresh()
    assert not guard.holds(name)
    store.close()


def rewrite_everything(book: inkpen.Bookie, keys: list[str], value: bytes) -> None:
    """Overwrite every key and merge and compact, so no file of before is needed any more."""
    for key in keys:
        book.put("r", key, value)
    book.flush()
    book.compact_ledger()
    for _ in range(10):
        if not book.compact_journal().compacted:
            break


def pinned_files(url: str, checkpoint_id: str) -> set[str]:
    manifests = ManifestStore(open_store(url))
    latest = manifests.latest()
    assert latest is not None
    found = latest.manifest.checkpoint(checkpoint_id)
    assert found is not None
    return {n for _, n in manifests.read(found.manifest_id).referenced_objects()}


def stored(url: str) -> set[str]:
    return {info.key for info in open_store(url).list("")}


def test_a_reader_whose_checkpoint_was_dropped_says_its_lease_lapsed(url: str) -> None:
    keys = [f"k{i:02d}" for i in range(40)]
    with inkpen.open(url, **QUIET) as book:
        rewrite_everything(book, keys, b"old")
        with inkpen.open_reader(url, checkpoint_lifetime=600.0) as reader:
            checkpoint_id = reader.checkpoint_id
            pinned = pinned_files(url, checkpoint_id)
            rewrite_everything(book, keys, b"new")
            # GC elsewhere, as if the lease had lapsed long ago: the checkpoint is dropped, then
            # the files only it named are deleted.
            # (min_age at its floor for a GC run beside a writer: an hour on, every file is older)
            report = run_gc(
                url, options=GcOptions(min_age=MIN_AGE_WITHOUT_WRITER), now=time.time() + 3600
            )
            assert checkpoint_id in report.dropped_checkpoints
            assert pinned - stored(url), "no file of the reader's checkpoint was deleted"
            with capture_logs() as logs:
                with pytest.raises(inkpen.CheckpointLapsedError, match=checkpoint_id) as raised:
                    reader.get("r", "k00")
                assert raised.value.key == checkpoint_id
                with pytest.raises(inkpen.CheckpointLapsedError, match="lapsed"):
                    list(reader.objects("r"))
            lapsed = [e for e in logs if e["event"] == "reader.lease_lapsed"]
            assert len(lapsed) == 1 and lapsed[0]["checkpoint"] == checkpoint_id
            assert lapsed[0]["log_level"] == "warning"
        assert book.get("r", "k00") == b"new"


def test_a_file_missing_under_a_live_checkpoint_is_not_corruption(url: str) -> None:
    keys = [f"k{i:02d}" for i in range(40)]
    with inkpen.open(url, **QUIET) as book:
        rewrite_everything(book, keys, b"old")
        with inkpen.open_reader(url, checkpoint_lifetime=600.0) as reader:
            ssts = [n for n in pinned_files(url, reader.checkpoint_id) if n.startswith("ledger/")]
            assert ssts
            store = open_store(url)
            for name in ssts:
                store.delete(name)  # not inkpen's doing: the checkpoint is live
            with pytest.raises(inkpen.NotFoundError, match="although checkpoint") as raised:
                reader.get("r", "k00")
            assert not isinstance(raised.value, inkpen.CheckpointLapsedError)
            assert raised.value.key in ssts
            store.close()


def test_a_refresh_that_lands_after_the_expiry_lapses_the_lease(url: str) -> None:
    store = HookedStore(open_store(url))
    with inkpen.open(url, **QUIET) as book:
        book.put("r", "k", b"v")
        book.flush()
        with capture_logs() as logs, inkpen.open_reader(store, checkpoint_lifetime=4.0) as reader:
            lease = reader._lease
            assert lease is not None
            expiry = lease.checkpoint.expire_time
            assert expiry is not None
            assert reader.get("r", "k") == b"v"

            def slow_request() -> None:
                # The refresh's manifest write reaches the store only after the expiry it is
                # meant to extend; meanwhile anyone may have judged the checkpoint expired.
                wait_until(lambda: time.time() > expiry, "the lease's expiry to pass", DEADLINE)

            store.before_create("manifest/", slow_request)
            manifests = ManifestStore(open_store(url))

            def refresh_landed() -> bool:
                latest = manifests.latest()
                assert latest is not None
                stored_checkpoint = latest.manifest.checkpoint(reader.checkpoint_id)
                assert stored_checkpoint is not None
                return (stored_checkpoint.expire_time or 0) > expiry

            wait_until(refresh_landed, "the late refresh to land", DEADLINE)
            # The refresh thread either takes the new expiry (a healthy lease) or lapses.
            wait_until(
                lambda: lease.checkpoint.expire_time != expiry or not lease._thread.is_alive(),
                "the refresh thread to take the refresh's outcome",
                DEADLINE,
            )
            with pytest.raises(inkpen.CheckpointLapsedError, match=reader.checkpoint_id):
                reader.get("r", "k")
        lost = [e for e in logs if e["event"] == "checkpoint.lease_lost"]
        assert len(lost) == 1 and "after its expiry" in lost[0]["reason"]
        assert [e["event"] for e in logs].count("reader.lease_lapsed") == 1
        latest = ManifestStore(open_store(url)).latest()
        assert latest is not None
        assert latest.manifest.checkpoint(reader.checkpoint_id) is None  # close deleted it
    store.close()


def test_gc_finding_a_lapsed_checkpoints_manifest_gone_reports_no_corruption(url: str) -> None:
    store = HookedStore(open_store(url))
    manifests = ManifestStore(store)
    manifests.create(Manifest())
    now = time.time()
    checkpoint = create_checkpoint(manifests, lifetime=100.0, now=now)
    manifests.update(lambda v: v.manifest.with_ledger(LedgerState((), 0)))  # a newer latest

    def other_gc_later() -> None:
        # Another process's GC, after the checkpoint expired, drops it and its manifest.
        report = run_gc(open_store(url), options=GcOptions(min_age=0, offline=True), now=now + 200)
        assert manifest_key(checkpoint.manifest_id) in report.deleted

    store.before_get(manifest_key(checkpoint.manifest_id), other_gc_later)
    with pytest.raises(inkpen.NotFoundError, match="run GC again") as raised:
        run_gc(store, options=GcOptions(min_age=0, offline=True), now=now + 50)
    assert store.fired == [manifest_key(checkpoint.manifest_id)]
    assert not isinstance(raised.value, inkpen.CorruptionError)
    store.close()


def test_a_checkpoint_whose_version_was_collected_before_it_landed_is_made_again(
    url: str,
) -> None:
    # The Reader reads the latest manifest n, then creates n + 1 holding its checkpoint. If, in
    # between, the writer commits n + 1 and n + 2 (dropping files n names) and its GC (min_age
    # 0) collects version n + 1 with those files, the create finds the slot free and lands below
    # the latest: a version nobody builds on, naming files that are gone.
    keys = [f"k{i:02d}" for i in range(40)]
    with inkpen.open(url, **QUIET) as book:
        rewrite_everything(book, keys, b"old")
        manifests = ManifestStore(open_store(url))
        before = manifests.latest()
        assert before is not None
        old_files = {n for _, n in before.manifest.referenced_objects()}
        store = HookedStore(open_store(url))

        def writer_moves_on_and_collects() -> None:
            rewrite_everything(book, keys, b"new")
            book.run_gc(min_age=0)
            latest = manifests.latest()
            assert latest is not None and latest.id > before.id + 1
            names = stored(url)
            assert manifest_key(before.id + 1) not in names, "the next version was not collected"
            assert old_files - names, "no file of version n was collected"

        store.before_create("manifest/", writer_moves_on_and_collects)
        with capture_logs() as logs, inkpen.open_reader(store, checkpoint_lifetime=60.0) as reader:
            assert store.fired == ["manifest/"]
            stray = [e for e in logs if e["event"] == "checkpoint.landed_below_latest"]
            assert [(e["checkpoint"], e["manifest_id"]) for e in stray] == [
                (reader.checkpoint_id, before.id + 1)
            ]
            assert reader.manifest_id > before.id + 1
            seen = {key.decode(): value for _, key, value in reader.objects("r")}
            assert seen == dict.fromkeys(keys, b"new")
            latest = manifests.latest()
            assert latest is not None
            assert latest.manifest.checkpoint(reader.checkpoint_id) is not None
            book.run_gc(min_age=0)  # the checkpoint, in the latest, keeps what the Reader reads
            assert reader.get("r", "k00") == b"new"
        latest = manifests.latest()
        assert latest is not None
        assert not [cp for cp in latest.manifest.checkpoints if cp.kind == "reader"]
        manifests.store.close()
        store.close()


@pytest.mark.parametrize("step", ["refresh", "delete"])
def test_a_refresh_or_delete_whose_version_was_collected_before_it_landed_is_made_again(
    url: str, step: str
) -> None:
    store = HookedStore(open_store(url))
    manifests = ManifestStore(store)
    manifests.create(Manifest())
    checkpoint = create_checkpoint(manifests, lifetime=60.0, metadata={"kind": "reader"})
    before = manifests.latest()
    assert before is not None
    others = ManifestStore(open_store(url))

    def two_versions_and_a_gc() -> None:
        # After this update read version n and before it creates n + 1: n + 1 and n + 2 are
        # written elsewhere and n + 1 is collected, so the create finds the slot free.
        for persisted in (1, 2):

            def persist(latest: VersionedManifest, p: int = persisted) -> Manifest:
                return latest.manifest.with_ledger(LedgerState((), p))

            others.update(persist)
        run_gc(open_store(url), options=GcOptions(min_age=0, offline=True))
        assert manifest_key(before.id + 1) not in stored(url)

    store.before_create("manifest/", two_versions_and_a_gc)
    if step == "refresh":
        refreshed = refresh_checkpoint(manifests, checkpoint.id, lifetime=600.0)
        assert refreshed.expire_time is not None
        assert checkpoint.expire_time is not None
        assert refreshed.expire_time > checkpoint.expire_time
    else:
        delete_checkpoint(manifests, checkpoint.id)
    assert store.fired == ["manifest/"]
    latest = others.latest()
    assert latest is not None and latest.id > before.id + 2
    assert latest.manifest.ledger.persisted_sqn == 2
    found = latest.manifest.checkpoint(checkpoint.id)
    if step == "refresh":
        assert found is not None and found.expire_time == refreshed.expire_time
    else:
        assert found is None
    others.store.close()
    store.close()
