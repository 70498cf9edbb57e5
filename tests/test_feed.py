"""The change feed: Bookie.changes / Reader.changes against a model of every write, in SQN order;
gaps that journal compaction leaves, and feed cursors that prevent them."""

from __future__ import annotations

import asyncio
import random

import pytest

import inkpen
import inkpen.aio
from inkpen.formats.journal import Kind, iter_journal
from inkpen.manifest.feed_cursors import (
    advance_feed_cursor,
    create_feed_cursor,
    delete_feed_cursor,
    hold_feed_cursor,
)
from inkpen.manifest.feed_history import StoredHistory
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import LedgerState, Manifest, VersionedManifest
from inkpen.manifest.paths import manifest_key, parse_segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY
from support.hooks import HookedStore
from support.logs import capture_logs
from support.waiting import wait_until

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


def overwrite(book: inkpen.Bookie) -> None:
    for round_ in range(4):
        for i in range(60):
            book.put("r", f"k{i:02d}", f"{round_}".encode() * 50)


def overwrite_and_compact(book: inkpen.Bookie) -> None:
    overwrite(book)
    compact_all(book)


def compact_all(book: inkpen.Bookie) -> None:
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
        cursor = book.create_feed_cursor("exporter", 0)  # a cursor names SQNs written
        assert (cursor.name, cursor.sqn, cursor.expire_time) == ("exporter", 0, None)
        overwrite(book)
        assert book.advance_feed_cursor("exporter", 30).sqn == 30
        compact_all(book)
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
        for i in range(10):  # a cursor names SQNs the database has
            book.put("x", f"k{i}", b"v")
        book.create_feed_cursor("b", 5)
        assert sorted((c.name, c.sqn) for c in book.feed_cursors()) == [("a", 0), ("b", 5)]
        with pytest.raises(inkpen.UsageError, match="already exists"):
            book.create_feed_cursor("a", 9)
        moved = book.advance_feed_cursor("a", 7)
        assert moved.sqn == 7 and moved.expire_time is not None
        assert moved.expire_time >= made.expire_time
        # Back over what the journal holds whole (cursor "a" at 0 kept every body), and on.
        assert book.advance_feed_cursor("a", 6).sqn == 6
        assert book.advance_feed_cursor("a", 7).sqn == 7
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
    # The close left the small value of SQN 1 to the ledger: the journal does not hold it.
    assert "SQN 1 whole" in fails(1, "feed", "advance", url, "job", "0").stderr
    fails(2, "feed", "create", url, "job")
    assert "the last SQN" in fails(2, "feed", "create", url, "c2", "--sqn", "2").stderr
    ok("feed", "delete", url, "other")
    fails(1, "feed", "delete", url, "other")
    import json

    rows = json.loads(ok("feed", "list", url, "--json").out)
    assert [(r["name"], r["sqn"], r["live"]) for r in rows] == [("job", 1, True)]


def wait_until_expired(cursor: inkpen.FeedCursor, timeout: float = 30.0) -> None:
    """Poll the clock (with a deadline) until ``cursor`` has expired."""
    import time

    assert cursor.expire_time is not None
    wait_until(
        lambda: not cursor.is_live(time.time()),
        f"cursor {cursor.name} to expire",
        timeout,
        interval=0.05,
    )


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


# -- where a cursor may be: up to the last SQN, back over what the journal holds -----------------


def whole_sqns(url: str) -> dict[int, bool]:
    """Every SQN the journal holds (the latest manifest's journal files, then the segments it
    has not rolled), read from the store's objects: True where its change is there whole."""
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        journal = latest.manifest.journal
        found: dict[int, bool] = {}
        keys = [f.name for f in journal.files]
        keys += [
            i.key
            for i in store.list("journal/")
            if (n := parse_segment_key(i.key)) is not None and n > journal.last_rolled_segment
        ]
        for key in keys:
            for entry in iter_journal(store.get(key), key):
                found[entry.sqn] = entry.kind in (Kind.OBJECT, Kind.TOMBSTONE)
        return found
    finally:
        store.close()


def first_not_whole(url: str, since: int, upto: int) -> int | None:
    held = whole_sqns(url)
    return next((n for n in range(since + 1, upto + 1) if not held.get(n, False)), None)


@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_a_cursor_above_the_last_sqn_is_refused(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for i in range(30):
            book.put("b", f"k{i}", b"v")
        book.create_feed_cursor("c", 10)
        for bad in (31, 10**9):
            with pytest.raises(inkpen.UsageError, match=r"the last SQN of .* is 30"):
                book.create_feed_cursor("c2", bad)
            with pytest.raises(inkpen.UsageError, match=r"the last SQN of .* is 30"):
                book.advance_feed_cursor("c", bad)
        assert [(c.name, c.sqn) for c in book.feed_cursors()] == [("c", 10)]  # nothing changed
        assert book.create_feed_cursor("c2", 30).sqn == 30
        book.put("b", "k30", b"v")
        assert book.advance_feed_cursor("c", 31).sqn == 31  # the last SQN moves with the writes


def test_the_async_twins_refuse_a_cursor_above_the_last_sqn(store_url: str) -> None:
    async def run() -> None:
        async with await inkpen.aio.open(store_url) as book:
            await book.put("b", "k", b"v")
            with pytest.raises(inkpen.UsageError, match="is 1"):
                await book.create_feed_cursor("c", 2)
            await book.create_feed_cursor("c", 1)
            with pytest.raises(inkpen.UsageError, match="is 1"):
                await book.advance_feed_cursor("c", 99999999)
            assert [c.sqn for c in await book.feed_cursors()] == [1]

    asyncio.run(run())


@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_a_cursor_moves_back_over_what_the_journal_still_holds(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        book.create_feed_cursor("c", 0)  # holds every body while the writes roll
        overwrite(book)
        # Straight back: nothing has let go of the changes in between.
        book.advance_feed_cursor("c", 240)
        assert first_not_whole(store_url, 20, 240) is None
        assert book.advance_feed_cursor("c", 20).sqn == 20
        compact_all(book)  # the cursor at 20 keeps everything above it
        assert [c.sqn for c in book.changes(20)] == list(range(21, 241))
        # Forward, then compaction (and rolls) let go of what lies below: back is refused at
        # the first change the journal no longer holds whole, and nothing moves.
        book.advance_feed_cursor("c", 200)
        compact_all(book)
        book.put("r", "k00", b"again")  # a roll after the advance leaves small bodies out
        book.flush()
        book._engine.roll()
        first = first_not_whole(store_url, 20, 200)
        assert first is not None
        with pytest.raises(inkpen.FeedGapError, match=f"SQN {first} whole") as caught:
            book.advance_feed_cursor("c", 20)
        assert caught.value.sqn == first
        assert [c.sqn for c in book.feed_cursors()] == [200]
        # It names the lowest SQN the cursor can move back to, and that one works.
        lowest = int(str(caught.value).rsplit("back to SQN ", 1)[1].split()[0])
        assert first <= lowest < 200 and first_not_whole(store_url, lowest, 200) is None
        if lowest > 0:
            assert first_not_whole(store_url, lowest - 1, 200) == lowest
        assert book.advance_feed_cursor("c", lowest).sqn == lowest
        assert [c.sqn for c in book.changes(lowest, gaps="raise")][:1] == [lowest + 1]


def test_a_cursor_set_past_the_end_before_can_come_back(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for i in range(20):
            book.put("b", f"k{i}", b"v")
        # As versions that did not check made it: far above the last SQN.
        create_feed_cursor(book._engine.manifests, "typo", 99999999)
        assert book.advance_feed_cursor("typo", 20).sqn == 20  # nothing above 20 to hold
        assert book.advance_feed_cursor("typo", 0).sqn == 0


def test_moving_back_is_checked_again_when_the_journal_changes_meanwhile(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Another process moves a cursor back while the writer compacts: the range it checked
    held every change, but a compaction committed between its check and its update dropped
    some. The update finds other journal files over the range and checks again."""
    url = str(tmp_path / "db")
    # What the compaction replaces stays on the store: the check reads it whole.
    keep = {**TINY, "delete_poll_interval": 3600.0, "gc_min_age": 3600.0}
    with inkpen.open(url, **keep) as book:
        book.create_feed_cursor("c", 0)
        overwrite(book)  # 240 puts over 60 keys, every body kept
        book.flush()
        book.advance_feed_cursor("c", 240)  # from now on compaction may drop what is replaced
        assert first_not_whole(url, 100, 240) is None
        store = HookedStore(open_store(url))
        compacted: list[int] = []

        def the_writer_compacts(key: str) -> None:  # during the other process's check
            for _ in range(20):
                if not book.compact_journal().compacted:
                    break
                compacted.append(1)

        store.before_read("journal/compacted/", the_writer_compacts)
        try:
            with StoredHistory(store) as history, pytest.raises(inkpen.FeedGapError) as caught:
                advance_feed_cursor(ManifestStore(store), "c", 100, history=history)
        finally:
            store.close()
        assert compacted
        assert caught.value.sqn == first_not_whole(url, 100, 240)
        assert [c.sqn for c in book.feed_cursors()] == [240]  # it did not move


def test_the_command_line_counts_the_writes_a_live_writer_acknowledged(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The manifest of a database a writer holds knows only what it has rolled; the command
    line's last SQN also counts the segments the writer has stored: every acknowledged write."""
    from support.cli import error_line, fails, ok

    url = str(tmp_path / "db")
    with inkpen.open(url, roll_segments=100_000, roll_bytes=1 << 30) as book:
        for i in range(12):
            book.put("b", f"k{i}", b"v")
        manifests = ManifestStore(open_store(url))
        latest = manifests.latest()
        assert latest is not None
        assert latest.manifest.journal.files == () and latest.manifest.ledger.persisted_sqn == 0
        ok("feed", "create", url, "c", "--sqn", "12")
        assert "the last SQN" in error_line(fails(2, "feed", "create", url, "d", "--sqn", "13"))
        assert " is 12" in error_line(fails(2, "feed", "advance", url, "c", "99999999"))
        book.put("b", "k12", b"v")
        ok("feed", "advance", url, "c", "13")
        ok("feed", "advance", url, "c", "5")  # back over segments, which hold every change
        assert [(c.name, c.sqn) for c in book.feed_cursors()] == [("c", 5)]
        manifests.store.close()
