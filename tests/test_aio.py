"""inkpen.aio on every store: coroutines over the same engine, puts that wait without threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

import inkpen
import inkpen.aio
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY
from support.waiting import wait_until_async


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_put_get_head_delete_folds_and_reopen(store_url: str) -> None:
    model: dict[bytes, bytes] = {}

    async def write() -> str:
        async with inkpen.aio.open(store_url, **TINY) as book:
            assert await book.get("b", "missing") is None
            for i in range(60):
                key, value = f"k{i:03d}".encode(), f"value {i}".encode()
                await book.put("b", key, value, indexes=[("add", "n_bin", f"{i % 3}")])
                model[key] = value
            for i in range(0, 60, 7):
                await book.delete("b", f"k{i:03d}", indexes=[("remove", "n_bin", f"{i % 3}")])
                del model[f"k{i:03d}".encode()]
            head = await book.head("b", "k001")
            assert head is not None and head.size == len(model[b"k001"])
            assert [k async for k in book.keys("b")] == sorted(model)
            assert {k: v async for _, k, v in book.objects("b")} == model
            assert [b async for b in book.buckets()] == [b"b"]
            assert not await book.is_empty()
            expected = sorted(k for k in model if int(k[1:]) % 3 == 1)
            assert [k async for k in book.index_query("b", "n_bin", "1", "1")] == expected
            async with await book.snapshot() as snap:
                await book.put("b", "k001", b"after the snapshot")
                assert await snap.get("b", "k001") == model[b"k001"]
            assert await book.get("b", "k001") == b"after the snapshot"
            model[b"k001"] = b"after the snapshot"
            await book.flush()
            checkpoint = await book.checkpoint(600)
        assert book.closed
        return checkpoint

    checkpoint = run(write())
    with inkpen.open_reader(store_url, checkpoint=checkpoint) as reader:
        assert dict((k, v) for _, k, v in reader.objects("b")) == model

    async def read() -> None:
        reader = await inkpen.aio.open_reader(store_url)
        try:
            assert {k: v async for _, k, v in reader.objects("b")} == model
            assert await reader.get("b", "k001") == b"after the snapshot"
        finally:
            await reader.close()

    run(read())


def test_a_closed_handle_names_the_asyncio_open_to_call_again(store_url: str) -> None:
    async def main() -> list[str]:
        async with inkpen.aio.open(store_url) as book:
            await book.put("b", "k", b"v")
        async with inkpen.aio.open_reader(store_url) as reader:
            pass
        said: list[str] = []
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: book.put("b", "k", b"v"),
            lambda: book.get("b", "k"),
            lambda: book.merge("b", "k", b"v", operator="x"),
            lambda: book.flush(),
            lambda: reader.get("b", "k"),
        ]
        for call in calls:
            with pytest.raises(inkpen.UsageError) as refused:
                await call()
            said.append(str(refused.value))
        return said

    said = run(main())
    assert [m.endswith(" with inkpen.aio.open") for m in said] == [True] * 4 + [False]
    assert said[4].endswith(" with inkpen.aio.open_reader")
    with inkpen.open(store_url) as book:  # the synchronous handles name their own
        pass
    with pytest.raises(inkpen.UsageError, match=r"with inkpen\.open$"):
        book.get("b", "k")


def test_fold_chunks_and_early_close_release_the_snapshot(store_url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(store_url, fold_chunk=5, **TINY) as book:
            for i in range(23):
                await book.put("b", f"k{i:02d}", b"x")
            seen = [k async for k in book.keys("b")]
            assert seen == [f"k{i:02d}".encode() for i in range(23)]
            fold = book.keys("b")
            assert await fold.__anext__() == b"k00"
            assert (await book.stats())["snapshots"] == 1
            await fold.aclose()
            assert (await book.stats())["snapshots"] == 0

    run(main())


def test_bad_input_raises_usage_error_and_writes_nothing(store_url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(store_url) as book:
            with pytest.raises(inkpen.UsageError):
                await book.put("b", "", b"x")
            with pytest.raises(inkpen.UsageError):
                await book.put("b", "k", "not bytes")  # type: ignore[arg-type]
            with pytest.raises(inkpen.UsageError):
                [k async for k in book.heads(None, "a", "b")]
            assert await book.is_empty()
        with pytest.raises(inkpen.UsageError):
            await book.put("b", "k", b"x")

    run(main())


def test_fenced_async_put_raises_fenced_error(store_url: str) -> None:
    async def main() -> None:
        book = await inkpen.aio.open(store_url)
        await book.put("b", "k", b"first")
        newer = inkpen.open(store_url)
        try:
            with pytest.raises(inkpen.FencedError):
                await asyncio.gather(*(book.put("b", f"z{i}", b"x") for i in range(50)))
            assert newer.get("b", "k") == b"first"
            assert newer.get("b", "z0") is None
        finally:
            newer.close()
            await book.abandon()

    run(main())


def test_ten_thousand_concurrent_puts_start_no_thread_per_put(store_url: str) -> None:
    n = 10_000
    model = {f"k{i:05d}".encode(): f"v{i}".encode() for i in range(n)}
    baseline = threading.active_count()
    peak = {"threads": 0, "in_flight": 0, "max_in_flight": 0}

    async def one(book: inkpen.aio.AsyncBookie, key: bytes, value: bytes) -> None:
        peak["in_flight"] += 1
        peak["max_in_flight"] = max(peak["max_in_flight"], peak["in_flight"])
        task = asyncio.ensure_future(book.put("b", key, value))
        await asyncio.sleep(0)  # let the put join its batch before the thread count is read
        peak["threads"] = max(peak["threads"], threading.active_count())
        await task
        peak["in_flight"] -= 1

    async def main() -> None:
        async with inkpen.aio.open(store_url) as book:
            opened = threading.active_count()
            written = (await book.stats())["segments_written"]
            await asyncio.gather(*(one(book, k, v) for k, v in model.items()))
            after = threading.active_count()
            got = {k: v async for _, k, v in book.objects("b")}
            assert got == model
            # the engine's own threads (actors, scheduler) are there before the first put
            assert peak["threads"] <= opened + 4, (baseline, opened, peak)
            assert after <= opened + 4
            assert peak["max_in_flight"] > 1000  # the puts really did wait at once
            # and shared segments: a few worker threads each waiting on one put would not
            segments = (await book.stats())["segments_written"] - written
            assert 0 < segments <= n // 50, segments

    run(main())
    with inkpen.open_reader(store_url) as reader:
        assert sum(1 for _ in reader.keys("b")) == n


def test_batches_conditional_writes_get_many_reverse_and_changes(store_url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(store_url, **TINY) as book:
            batch = inkpen.Batch()
            for i in range(5):
                batch.put("b", f"k{i}", b"v%d" % i)
            batch.delete("b", "k0")
            await book.write(batch)
            assert await book.get_many("b", ["k0", "k1", "k4", "zz"]) == [None, b"v1", b"v4", None]
            assert [k async for k in book.keys("b", reverse=True)] == [b"k4", b"k3", b"k2", b"k1"]
            head = await book.head("b", "k1")
            assert head is not None
            await book.put("b", "k1", b"next", if_sqn=head.sqn)
            with pytest.raises(inkpen.ConflictError):
                await book.put("b", "k1", b"lost", if_sqn=head.sqn)  # k1 moved on
            with pytest.raises(inkpen.ConflictError):
                await book.delete("b", "k2", if_sqn=0)  # k2 is there
            assert await book.get("b", "k1") == b"next"
            changes = [c async for c in book.changes(0, bucket="b")]
            assert [(c.key, c.kind) for c in changes] == [
                *((f"k{i}".encode(), "put") for i in range(5)),
                (b"k0", "delete"),
                (b"k1", "put"),
            ]
            assert [c.sqn for c in changes] == sorted(c.sqn for c in changes)

    run(main())


# -- the methods the async handles share with the sync ones, the sync results as oracle -------


def outcome(url: str, call: Callable[[], Any]) -> Any:
    """What a call answered, comparable across two databases: values without their times and
    URLs, or the type and message of the error it raised."""
    try:
        return _comparable(call(), url)
    except inkpen.InkpenError as exc:
        return type(exc).__name__, str(exc).replace(url, "URL")


async def async_outcome(url: str, call: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return _comparable(await call(), url)
    except inkpen.InkpenError as exc:
        return type(exc).__name__, str(exc).replace(url, "URL")


def _comparable(value: Any, url: str) -> Any:
    if isinstance(value, inkpen.FeedCursor):
        return (value.name, value.sqn, value.lifetime, value.owner, value.expire_time is None)
    if isinstance(value, tuple | list):
        return [_comparable(v, url) for v in value]
    if isinstance(value, inkpen.Head):
        return (value.size, value.content_hash, value.subkey, value.value)
    return value


UNROLLED = {**TINY, "roll_segments": 100_000, "roll_bytes": 1 << 30}
"""Nothing rolls while the handle is open: every change stays whole in a segment."""

CURSOR_SCRIPT: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("create_feed_cursor", ("a",), {"lifetime": 60.0}),
    ("create_feed_cursor", ("b", 5), {"owner": "tests"}),
    ("create_feed_cursor", ("a", 9), {}),  # already exists
    ("create_feed_cursor", ("", 0), {}),  # a bad name
    ("advance_feed_cursor", ("a", 7), {}),
    ("advance_feed_cursor", ("a", 6), {}),  # back over a change the journal holds whole
    ("advance_feed_cursor", ("missing", 3), {}),
    ("feed_cursors", (), {}),
    ("advance_feed_cursor", ("a", 11), {}),  # past the last SQN
    ("create_feed_cursor", ("c", 10**9), {}),  # past the last SQN
    ("delete_feed_cursor", ("b",), {}),
    ("delete_feed_cursor", ("b",), {}),  # gone already
    ("feed_cursors", (), {}),
]


def test_feed_cursors_answer_as_the_sync_bookie_does(
    store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    sync_url, async_url = make_store_url(store_kind), make_store_url(store_kind)
    with inkpen.open(sync_url, **UNROLLED) as book:
        for i in range(10):  # SQNs 1 to 10, all in segments: held whole
            book.put("b", f"k{i}", b"v")
        expected = [
            outcome(sync_url, partial(getattr(book, name), *args, **kw))
            for name, args, kw in CURSOR_SCRIPT
        ]

    async def main() -> list[Any]:
        async with inkpen.aio.open(async_url, **UNROLLED) as book:
            for i in range(10):
                await book.put("b", f"k{i}", b"v")
            got = [
                await async_outcome(async_url, partial(getattr(book, name), *args, **kw))
                for name, args, kw in CURSOR_SCRIPT
            ]
            assert await book.feed_cursors() == book.sync.feed_cursors()
            return got

    got = run(main())
    assert got == expected
    assert expected[2][0] == "UsageError" and sorted(expected[7]) == [
        ("a", 6, 60.0, None, False),
        ("b", 5, None, "tests", True),
    ]
    assert [e[0] for e in expected[8:10]] == ["UsageError", "UsageError"]
    assert "the last SQN of" in expected[8][1] and " is 10," in expected[8][1]
    with inkpen.open(async_url) as book:  # the async handle's cursors are in the manifest
        assert [(c.name, c.sqn) for c in book.feed_cursors()] == [("a", 6)]


MPUTS: list[Any] = [
    [
        ("add", "a", "k1", "", b"one"),
        ("add", "a", "k1", "x", b"one-x"),
        ("add", "b", "k2", "", b""),
    ],
    [("remove", "a", "k1", "x", None), ("add", "a", "k3", "y", b"three")],
    [("add", "a", "k4", "", b"four"), ("bad op", "a", "k5", "", b"five")],  # rejected whole
    "not a list of specs",
    [],
    [("add", "b", "k2", "", b"again")],
    *([("add", "c", f"n{i:02d}", "", b"%d" % i)] for i in range(12)),  # rolls journal files
]
LOOKUPS = [("a", "k1", ""), ("a", "k1", "x"), ("a", "k3", "y"), ("a", "k4", ""), ("b", "k2", "")]
HEAD_ONLY = {**TINY, "roll_segments": 2, "head_only": "with_lookup"}


def journal_files(url: str) -> tuple[str, ...]:
    with open_store(url) as store:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return tuple(f.name for f in latest.manifest.journal.files)


def test_mput_and_trim_journal_answer_as_the_sync_bookie_does(
    store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    sync_url, async_url = make_store_url(store_kind), make_store_url(store_kind)
    with inkpen.open(sync_url, **HEAD_ONLY) as book:
        expected = [outcome(sync_url, partial(book.mput, specs)) for specs in MPUTS]
        expected_heads = outcome(sync_url, lambda: list(book.heads()))
        expected_gets = [book.head_only_get(*slot) for slot in LOOKUPS]

    async def main() -> None:
        async with inkpen.aio.open(async_url, **HEAD_ONLY) as book:
            got = [await async_outcome(async_url, partial(book.mput, specs)) for specs in MPUTS]
            assert got == expected
            assert [x is None for x in got[:6]] == [True, True, False, False, True, True]
            heads = [h async for h in book.heads()]
            assert heads == list(book.sync.heads())
            assert _comparable(heads, async_url) == expected_heads
            assert [await book.head_only_get(*slot) for slot in LOOKUPS] == expected_gets
            await book.flush()
            await wait_until_async(lambda: journal_files(async_url), "a rolled journal file")
            before = journal_files(async_url)
            trim = await book.trim_journal()
            assert trim.compacted and trim.written == ()
            assert set(trim.compacted) & set(before)
            assert not set(trim.compacted) & set(journal_files(async_url))
            assert [await book.head_only_get(*slot) for slot in LOOKUPS] == expected_gets
            assert [h async for h in book.heads()] == heads

    run(main())


def test_mput_and_trim_journal_are_refused_as_sync_refuses_them(
    store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    plain = make_store_url(store_kind)
    with inkpen.open(plain) as sync_book:
        expected = [
            outcome(plain, lambda: sync_book.mput(MPUTS[0])),
            outcome(plain, sync_book.trim_journal),
        ]

    async def main() -> list[Any]:
        async with inkpen.aio.open(plain) as book:
            return [
                await async_outcome(plain, lambda: book.mput(MPUTS[0])),
                await async_outcome(plain, book.trim_journal),
            ]

    assert run(main()) == expected
    assert [error[0] for error in expected] == ["UsageError", "UsageError"]


def contents(url: str) -> dict[tuple[bytes, bytes], bytes]:
    with inkpen.open_reader(url) as reader:
        return {(b, k): v for b, k, v in reader.objects()}


def test_hot_backup_answers_a_backup_to_await_as_the_sync_bookie_does(
    store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    source = make_store_url(store_kind)
    dests = {name: make_store_url(store_kind) for name in ("sync", "async", "old", "closed")}

    async def main() -> dict[tuple[bytes, bytes], bytes]:
        async with inkpen.aio.open(source, **TINY) as book:
            for i in range(30):
                await book.put("b", f"k{i:02d}", b"v%d" % i)
            sync_report = book.sync.hot_backup()(dests["sync"])
            backup = await book.hot_backup()
            assert isinstance(backup, inkpen.aio.AsyncHotBackup)
            assert isinstance(backup.sync, inkpen.HotBackup)
            report = await backup(dests["async"])
            assert isinstance(report, inkpen.BackupReport)
            assert (report.files, report.files_kept) == (sync_report.files, 0)
            with pytest.raises(inkpen.UsageError, match="already taken"):
                await backup(dests["async"])  # a backup is taken once, as a sync one is
            async with await book.hot_backup() as unused:  # released without copying
                assert isinstance(unused, inkpen.aio.AsyncHotBackup)
            with pytest.raises(inkpen.UsageError, match="already taken"):
                await unused(dests["closed"])
            with pytest.warns(DeprecationWarning, match=r"await backup\(dest\)"):
                old = await book.hot_backup(dests["old"])
            assert isinstance(old, inkpen.BackupReport) and old.files == sync_report.files
            assert (await book.stats())["snapshots"] == 0  # every backup released its snapshot
            return {(b, k): v async for b, k, v in book.objects()}

    written = run(main())
    assert len(written) == 30
    for name in ("sync", "async", "old"):
        assert contents(dests[name]) == written, name
    with pytest.raises(inkpen.NotFoundError):
        inkpen.open_reader(dests["closed"])


def test_a_following_async_reader_refreshes_and_knows_its_last_sqn(store_url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(store_url) as book:  # no flushes or merges: no re-pins
            await book.put("b", "k0", b"v")
            fixed = await inkpen.aio.open_reader(store_url)
            follower = await inkpen.aio.open_reader(store_url, follow=True, refresh_interval=3600)
            try:
                assert (fixed.following, follower.following) == (False, True)
                assert fixed.last_sqn == follower.last_sqn == fixed.sync.last_sqn == 1
                with pytest.raises(inkpen.UsageError, match="follow=True"):
                    await fixed.refresh()
                for i in range(1, 6):
                    await book.put("b", f"k{i}", b"v")
                sqn = (await book.stats())["sqn"]
                assert sqn == 6
                assert follower.last_sqn == 1  # no refresh yet (the interval is an hour)
                assert await follower.refresh() is True
                assert follower.last_sqn == follower.sync.last_sqn == sqn
                assert await follower.refresh() is False  # nothing new
                assert fixed.last_sqn == 1  # a checkpoint's Reader stays where it was
                assert [k async for k in follower.keys("b")] == [b"k%d" % i for i in range(6)]
            finally:
                await fixed.close()
                await follower.close()
            with pytest.raises(inkpen.UsageError, match="closed"):
                await follower.refresh()

    run(main())


def test_changes_with_wait_tail_in_the_loop_holding_no_worker_thread(store_url: str) -> None:
    """A put made after the tail caught up arrives; while the tail waits, the reader's only
    worker thread still serves a get, and the loop still runs the writer's puts."""

    async def main() -> None:
        async with inkpen.aio.open(store_url, **TINY) as book:
            for i in range(3):
                await book.put("t", f"k{i}", b"first %d" % i)
            async with inkpen.aio.open_reader(
                store_url, follow=True, refresh_interval=0.05, workers=1
            ) as reader:
                follower = reader.sync._follower
                assert follower is not None
                tail = reader.changes(0, bucket="t", wait=120.0)
                first = [await tail.__anext__() for _ in range(3)]
                assert first == list(book.sync.changes(0, bucket="t"))
                pending = asyncio.ensure_future(tail.__anext__())
                # the tail has given all there is and waits for the follower's news
                await wait_until_async(lambda: follower._listeners, "the tail to wait")
                assert not pending.done()
                assert await asyncio.wait_for(reader.get("t", "k0"), 30) == b"first 0"
                await book.put("t", "late", b"after the tail caught up")
                await book.put("other", "skipped", b"another bucket")
                await book.put("t", "later", b"and one more")
                late = await asyncio.wait_for(pending, 60)
                later = await asyncio.wait_for(tail.__anext__(), 60)
                oracle = list(book.sync.changes(first[-1].sqn, bucket="t"))
                assert [late, later] == oracle
                assert (late.key, late.value, later.key) == (
                    b"late",
                    b"after the tail caught up",
                    b"later",
                )
                await tail.aclose()
                assert not follower._listeners  # the tail stopped listening
                with pytest.raises(StopAsyncIteration):
                    await tail.__anext__()
                # with nothing new, a tail ends once ``wait`` seconds pass, as the sync one does
                short = reader.changes(reader.last_sqn, wait=0.2)
                assert [c async for c in short] == []
                assert list(reader.sync.changes(reader.last_sqn, wait=0.2)) == []
                # and without ``wait``, the feed ends at what is readable now
                everything = [c async for c in reader.changes()]
                assert everything == list(reader.sync.changes())
                assert len(everything) == 6

    run(main())


def test_changes_with_wait_refuses_what_the_sync_reader_refuses(store_url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(store_url) as book:
            await book.put("b", "k", b"v")
        async with inkpen.aio.open_reader(store_url) as fixed:
            with pytest.raises(inkpen.UsageError, match="follow=True"):
                fixed.sync.changes(wait=1.0)
            with pytest.raises(inkpen.UsageError, match="follow=True"):
                [c async for c in fixed.changes(wait=1.0)]
        async with inkpen.aio.open_reader(store_url, follow=True) as follower:
            bad_waits: tuple[Any, ...] = (-1, "1", True)  # the last two of the wrong type
            for bad in bad_waits:
                with pytest.raises(inkpen.UsageError):
                    follower.sync.changes(wait=bad)
                with pytest.raises(inkpen.UsageError):
                    [c async for c in follower.changes(wait=bad)]
        # a tail waiting when its Reader closes ends, as the sync one does
        async with inkpen.aio.open_reader(store_url, follow=True, refresh_interval=3600) as r:
            tail = r.changes(0, wait=600.0)
            assert (await tail.__anext__()).key == b"k"
            pending = asyncio.ensure_future(tail.__anext__())
            tailed = r.sync._follower
            assert tailed is not None
            await wait_until_async(lambda: tailed._listeners, "the tail to wait")
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(pending, 30)

    run(main())


def test_fold_keywords_and_snapshot_shapes_match_the_sync_bookie(store_url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(store_url, **TINY) as book:
            for i in range(40):
                await book.put("b", f"k{i:02d}", b"v%d" % i)
            sync = book.sync
            heads = [h async for h in book.heads("b", "k05", "k30", max_objects=7, reverse=True)]
            assert heads == list(sync.heads("b", "k05", "k30", max_objects=7, reverse=True))
            assert [k for _, k, _ in heads] == [b"k%02d" % i for i in range(30, 23, -1)]
            tree = await book.tictac_tree("b", start="k10", end="k19")
            assert tree == sync.tictac_tree("b", start="k10", end="k19")
            assert tree != sync.tictac_tree("b")
            segments = tree.compare(sync.tictac_tree("b"))
            picked = [h async for h in book.heads("b", segments=segments)]
            assert picked == list(sync.heads("b", segments=segments)) and picked
            async with book.snapshot(ledger_only=True) as snap:  # no await needed
                assert isinstance(snap, inkpen.aio.AsyncSnapshot) and snap.ledger_only
                assert (await book.stats())["snapshots"] == 1
                await book.put("b", "k00", b"after")
                assert [k async for k in snap.keys("b", end="k01")] == [b"k00", b"k01"]
            assert (await book.stats())["snapshots"] == 0
            snap = await book.snapshot()  # awaited: the caller closes it
            try:
                assert not snap.ledger_only and await snap.get("b", "k00") == b"after"
            finally:
                await snap.close()
            assert (await book.stats())["snapshots"] == 0

    run(main())
