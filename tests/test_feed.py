"""The change feed: Bookie.changes / Reader.changes against a model of every write, in SQN order;
gaps that journal compaction leaves, and feed cursors that prevent them."""

from __future__ import annotations

import random

import pytest

import inkpen
from inkpen.manifest.feed_cursors import (
    advance_feed_cursor,
    create_feed_cursor,
    delete_feed_cursor,
    hold_feed_cursor,
)
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import LedgerState, Manifest, VersionedManifest
from inkpen.manifest.paths import manifest_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY
from support.hooks import HookedStore
from support.logs import capture_logs

Logged = list[tuple[str, str, str, bytes | None]]


def write_some(book: inkpen.Bookie, n: int, seed: int = 7) -> Logged:
    """Random puts and deletes over a few buckets; answers the model log (bucket, key, kind,
    value)."""
    rng = random.Random(seed)
    log: Logged = []
    for i in range(n):
        bucket = rng.choice(["a", "b", "c"])
        key = f"k{rng.randrange(20):02d}"
        if rng.random() < 0.2:
            book.delete(bucket, key)
            log.append((bucket, key, "delete", None))
        else:
            value = f"v{i}".encode() * rng.randrange(1, 40)
            book.put(bucket, key, value, indexes=[("add", "f", f"t{i}")])
            log.append((bucket, key, "put", value))
    return log


def as_model(changes: list[inkpen.Change]) -> Logged:
    return [(c.bucket.decode(), c.key.decode(), c.kind, c.value) for c in changes]


def test_feed_gives_every_change_in_sqn_order(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        # A cursor at 0 keeps the whole history: without one, the journal leaves small values
        # to the ledger once it persists them, and a value replaced since is gone (a gap).
        book.create_feed_cursor("history", 0)
        log = write_some(book, 120)
        changes = list(book.changes())
        assert as_model(changes) == log
        sqns = [c.sqn for c in changes]
        assert sqns == list(range(sqns[0], sqns[0] + len(sqns)))
        assert all(isinstance(c, inkpen.Change) for c in changes)
        put = next(c for c in changes if c.kind == "put")
        assert put.indexes == (("add", b"f", f"t{sqns.index(put.sqn)}".encode()),)
        assert put.last_modified > 0
        with pytest.raises(AttributeError):
            put.sqn = 5  # type: ignore[misc]
        # since: exactly the changes above it
        middle = sqns[50]
        assert as_model(list(book.changes(middle))) == log[51:]
        assert list(book.changes(sqns[-1])) == []
        # bucket filter: that bucket's changes, still in order
        assert as_model(list(book.changes(bucket="b"))) == [e for e in log if e[0] == "b"]
        assert as_model(list(book.changes(middle, bucket=b"c"))) == [
            e for e in log[51:] if e[0] == "c"
        ]
    # after close everything is rolled into journal files; a Reader sees the same feed
    with inkpen.open_reader(store_url) as reader:
        assert as_model(list(reader.changes())) == log
        assert as_model(list(reader.changes(middle, bucket="a"))) == [
            e for e in log[51:] if e[0] == "a"
        ]


def test_concurrent_puts_share_segments_and_keep_sqn_order(store_url: str) -> None:
    import threading

    with inkpen.open(store_url, **TINY) as book:

        def writer(t: int) -> None:
            for i in range(30):
                book.put("t", f"{t}-{i}", f"{t}:{i}".encode())

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        changes = list(book.changes())
    assert [c.sqn for c in changes] == list(range(1, 121))
    assert {(c.key, c.value) for c in changes} == {
        (f"{t}-{i}".encode(), f"{t}:{i}".encode()) for t in range(4) for i in range(30)
    }
    for t in range(4):  # each thread's own puts in its order
        mine = [c.key for c in changes if c.key.startswith(f"{t}-".encode())]
        assert mine == [f"{t}-{i}".encode() for i in range(30)]


def test_bad_arguments_are_usage_errors(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for since in (-1, "3", 1.5, True):
            with pytest.raises(inkpen.UsageError):
                book.changes(since)  # type: ignore[arg-type]
        with pytest.raises(inkpen.UsageError):
            book.changes(gaps="ignore")  # type: ignore[arg-type]
        with pytest.raises(inkpen.UsageError):
            book.changes(bucket=5)  # type: ignore[arg-type]


def overwrite_and_compact(book: inkpen.Bookie) -> None:
    for round_ in range(4):
        for i in range(60):
            book.put("r", f"k{i:02d}", f"{round_}".encode() * 50)
    book.flush()
    book.compact_ledger()
    for _ in range(20):
        if not book.compact_journal().compacted:
            break


@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_compaction_gap_raises_unless_skipped(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        overwrite_and_compact(book)
        with pytest.raises(inkpen.FeedGapError) as caught:
            list(book.changes())
        assert caught.value.sqn == 1  # round 0 was replaced, so compaction dropped SQN 1
        assert "SQN 1" in str(caught.value)
        survivors = list(book.changes(gaps="skip"))
        # exactly the current values survive, in SQN order
        assert [c.sqn for c in survivors] == sorted(c.sqn for c in survivors)
        latest = {c.key: c.value for c in survivors}
        assert latest == {f"k{i:02d}".encode(): b"3" * 50 for i in range(60)}
        # from the last round on there is no gap
        assert len(list(book.changes(180))) == 60


@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_a_feed_cursor_keeps_compaction_off_what_it_has_not_read(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        cursor = book.create_feed_cursor("exporter", 30)
        assert (cursor.name, cursor.sqn, cursor.expire_time) == ("exporter", 30, None)
        overwrite_and_compact(book)
        # everything above the cursor survives, values included
        after = list(book.changes(30))
        assert [c.sqn for c in after] == list(range(31, 241))
        assert all(c.kind == "put" and c.value for c in after)
        # below it compaction worked as usual
        with pytest.raises(inkpen.FeedGapError):
            list(book.changes())
        book.advance_feed_cursor("exporter", 240)
        for _ in range(20):
            if not book.compact_journal().compacted:
                break
        with pytest.raises(inkpen.FeedGapError) as caught:
            list(book.changes(30))
        assert caught.value.sqn == 31
        book.delete_feed_cursor("exporter")
        assert book.feed_cursors() == ()


def test_feed_cursor_protocol(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        made = book.create_feed_cursor("a", lifetime=60.0)
        assert made.expire_time is not None and made.lifetime == 60.0 and made.sqn == 0
        book.create_feed_cursor("b", 5)
        assert sorted((c.name, c.sqn) for c in book.feed_cursors()) == [("a", 0), ("b", 5)]
        with pytest.raises(inkpen.UsageError, match="already exists"):
            book.create_feed_cursor("a", 9)
        moved = book.advance_feed_cursor("a", 7)
        assert moved.sqn == 7 and moved.expire_time is not None
        assert moved.expire_time >= made.expire_time
        with pytest.raises(inkpen.UsageError, match="cannot move back"):
            book.advance_feed_cursor("a", 6)
        for bad in (("", 0), ("x", -1), ("x", "1"), (5, 0)):
            with pytest.raises(inkpen.UsageError):
                book.create_feed_cursor(*bad)
        with pytest.raises(inkpen.UsageError):
            book.create_feed_cursor("c", lifetime=0)
        with pytest.raises(inkpen.NotFoundError):
            book.advance_feed_cursor("missing", 3)
        with pytest.raises(inkpen.NotFoundError):
            book.delete_feed_cursor("missing")
        assert sorted((c.name, c.sqn) for c in book.feed_cursors()) == [("a", 7), ("b", 5)]
        book.put("x", "y", b"z")  # the writer commits on top of cursors it did not make
        book.flush()
    with inkpen.open(store_url, **TINY) as book:
        assert sorted((c.name, c.sqn) for c in book.feed_cursors()) == [("a", 7), ("b", 5)]
        book.delete_feed_cursor("b")
        assert [c.name for c in book.feed_cursors()] == ["a"]


def test_feed_cli(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from support.cli import fails, ok

    url = str(tmp_path / "db")
    with inkpen.open(url, **TINY) as book:
        book.put("b", "k", b"v")
    assert "feed cursor job at sqn 0" in ok("feed", "create", url, "job").out
    ok("feed", "create", url, "other", "--sqn", "1", "--lifetime", "2h")
    listed = ok("feed", "list", url).out
    assert "job\tsqn 0\tlive" in listed and "other\tsqn 1\tlive" in listed
    ok("feed", "advance", url, "job", "1")
    fails(2, "feed", "advance", url, "job", "0")
    fails(2, "feed", "create", url, "job")
    ok("feed", "delete", url, "other")
    fails(1, "feed", "delete", url, "other")
    import json

    rows = json.loads(ok("feed", "list", url, "--json").out)
    assert [(r["name"], r["sqn"], r["live"]) for r in rows] == [("job", 1, True)]


def wait_until_expired(cursor: inkpen.FeedCursor, timeout: float = 30.0) -> None:
    """Poll the clock (with a deadline) until ``cursor`` has expired."""
    import time

    assert cursor.expire_time is not None
    deadline = time.monotonic() + timeout
    while cursor.is_live(time.time()):
        assert time.monotonic() < deadline, f"cursor {cursor.name} did not expire"
        time.sleep(0.05)


def test_hold_creates_renews_advances_and_recreates_a_lapsed_cursor(store_url: str) -> None:
    import time

    from inkpen.manifest.feed_cursors import hold_feed_cursor, list_feed_cursors
    from inkpen.manifest.store import ManifestStore
    from inkpen.objectstore import open_store

    with inkpen.open(store_url, **TINY) as book:
        book.put("b", "k", b"v")
        book.flush()
    manifests = ManifestStore(open_store(store_url))
    try:
        made = hold_feed_cursor(manifests, "q", 3, lifetime=60.0, owner="spark stream on h")
        assert made.outcome == "created" and made.lapsed is None
        assert (made.cursor.sqn, made.cursor.owner, made.cursor.lifetime) == (
            3,
            "spark stream on h",
            60.0,
        )
        # without advance a live cursor stays where it is, renewed with the new lifetime
        kept = hold_feed_cursor(manifests, "q", 9, lifetime=120.0, owner="someone else")
        assert kept.outcome == "renewed" and kept.cursor.sqn == 3
        assert kept.cursor.owner == "spark stream on h" and kept.cursor.lifetime == 120.0
        assert kept.cursor.expire_time is not None and made.cursor.expire_time is not None
        assert kept.cursor.expire_time > made.cursor.expire_time
        # with advance it moves forward, never back
        moved = hold_feed_cursor(manifests, "q", 9, lifetime=120.0, advance=True)
        assert moved.outcome == "renewed" and moved.cursor.sqn == 9
        assert hold_feed_cursor(manifests, "q", 4, lifetime=1.0, advance=True).cursor.sqn == 9
        short = manifests.latest()
        assert short is not None
        lapsing = short.manifest.feed_cursor("q")
        assert lapsing is not None and lapsing.lifetime == 1.0
        wait_until_expired(lapsing)
        again = hold_feed_cursor(manifests, "q", 9, lifetime=60.0, owner="spark stream on h2")
        assert again.outcome == "recreated" and again.lapsed == lapsing
        assert (again.cursor.sqn, again.cursor.owner) == (9, "spark stream on h2")
        assert again.cursor.is_live(time.time())
        with pytest.raises(inkpen.UsageError):
            hold_feed_cursor(manifests, "q", -1, lifetime=60.0)
        with pytest.raises(inkpen.UsageError):
            hold_feed_cursor(manifests, "q", 1, lifetime=60.0, owner="tab\there")
        # the refused holds changed nothing
        assert [c.sqn for c in list_feed_cursors(manifests)] == [9]
    finally:
        manifests.store.close()


def test_feed_list_shows_each_cursors_owner_and_age(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import time

    from support.cli import ok

    url = str(tmp_path / "db")
    with inkpen.open(url, **TINY) as book:
        book.put("b", "k", b"v")
        book.create_feed_cursor("mine", 1, owner="nightly export")
    ok("feed", "create", url, "by-cli")
    # a cursor made without an owner (as every cursor was before owners were recorded)
    with inkpen.open(url, **TINY) as book:
        book.create_feed_cursor("anonymous")
    lines = {
        line.split("\t")[0]: line.split("\t") for line in ok("feed", "list", url).out.splitlines()
    }
    assert lines["mine"][1:3] == ["sqn 1", "live, expires never"]
    assert lines["mine"][3].startswith("age ") and " ago" in lines["mine"][3]
    assert lines["mine"][4] == "owner nightly export"
    assert lines["by-cli"][4].startswith("owner inkpen feed create by ")
    assert lines["anonymous"][4] == "owner -"
    rows = {r["name"]: r for r in json.loads(ok("feed", "list", url, "--json").out)}
    assert rows["mine"]["owner"] == "nightly export" and rows["anonymous"]["owner"] is None
    now = time.time()
    for row in rows.values():
        assert 0 <= row["age"] <= now - row["created"] + 1
        assert row["advanced"] >= row["created"]


@pytest.mark.parametrize("step", ["create", "advance", "hold", "delete"])
@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_a_cursor_change_whose_version_was_collected_before_it_landed_is_made_again(
    store_url: str, step: str
) -> None:
    # Between this process's read of version n and its create of n + 1, the writer commits
    # n + 1 and n + 2 and its GC collects n + 1: the create finds the slot free and lands below
    # the latest, where no compaction would see the cursor. The change must be made again.
    store = HookedStore(open_store(store_url))
    manifests = ManifestStore(store)
    manifests.create(Manifest())
    if step != "create":
        create_feed_cursor(manifests, "c", 5, lifetime=600.0)
    before = manifests.latest()
    assert before is not None
    others = ManifestStore(open_store(store_url))

    def two_versions_and_a_gc() -> None:
        for persisted in (1, 2):

            def persist(latest: VersionedManifest, p: int = persisted) -> Manifest:
                return latest.manifest.with_ledger(LedgerState((), p))

            others.update(persist)
        report = run_gc(open_store(store_url), options=GcOptions(min_age=0, offline=True))
        assert manifest_key(before.id + 1) in report.deleted

    store.before_create("manifest/", two_versions_and_a_gc)
    with capture_logs() as logs:
        if step == "create":
            create_feed_cursor(manifests, "c", 5, lifetime=600.0)
        elif step == "advance":
            advance_feed_cursor(manifests, "c", 9)
        elif step == "hold":
            hold_feed_cursor(manifests, "c", 9, lifetime=900.0, advance=True)
        else:
            delete_feed_cursor(manifests, "c")
    assert store.fired == ["manifest/"]
    stray = [e for e in logs if e["event"] == "feed.cursor_landed_below_latest"]
    assert [(e["cursor"], e["manifest_id"]) for e in stray] == [("c", before.id + 1)]
    latest = others.latest()
    assert latest is not None and latest.id > before.id + 2
    assert latest.manifest.ledger.persisted_sqn == 2, "the other versions were kept"
    found = latest.manifest.feed_cursor("c")
    if step == "delete":
        assert found is None
    else:
        assert found is not None
        assert found.sqn == (5 if step == "create" else 9)
        assert found.lifetime == (900.0 if step == "hold" else 600.0)
    others.store.close()
    store.close()
