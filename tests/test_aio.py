"""inkpen.aio on every store: coroutines over the same engine, puts that wait without threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import inkpen
import inkpen.aio
from support.engine import TINY


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
