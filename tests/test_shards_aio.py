"""``inkpen.aio.shards``: the sharded handle for asyncio against a model (a dict per shard):
puts that join their shard's group commit without a thread, folds, merges, batches, one-shard
transactions, snapshots, data-set checkpoints and open_reader, a tail in the loop, hot backups,
metrics; on a local directory and on SeaweedFS."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

import inkpen
import inkpen.aio
from inkpen import shards
from inkpen.aio.shards import AsyncShardedBookie
from inkpen.errors import UsageError

MakeUrl = Callable[[str], str]
SHARDS = 3


def _add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return str(int(existing or b"0") + sum(int(o) for o in operands)).encode()


def key_in(shard: int, prefix: str = "k") -> str:
    return next(
        k for i in range(10_000) if shards.shard_of("b", (k := f"{prefix}{i}"), SHARDS) == shard
    )


def test_the_async_handle_reads_and_writes_every_shard(
    durable_store_url: str, make_store_url: MakeUrl, durable_kind: str
) -> None:
    url = durable_store_url
    shards.create(url, shards=SHARDS)
    dest = make_store_url(durable_kind)
    model: dict[tuple[bytes, bytes], bytes] = {}

    async def main() -> None:
        async with inkpen.aio.shards.open(url, merge_operators={"add": _add}) as book:
            assert isinstance(book, AsyncShardedBookie) and book.descriptor.shards == SHARDS
            await asyncio.gather(*(book.put("b", f"k{i:03d}", f"v{i}".encode()) for i in range(60)))
            model.update({(b"b", f"k{i:03d}".encode()): f"v{i}".encode() for i in range(60)})
            await book.delete("b", "k000")
            del model[(b"b", b"k000")]
            for _ in range(3):
                await book.merge("c", "n", b"2", operator="add")
            model[(b"c", b"n")] = b"6"
            same = [k for k in (f"k{i:03d}" for i in range(60)) if book.shard_of("b", k) == 1]
            batch = inkpen.Batch().put("b", same[0], b"batched").put("b", same[1], b"batched")
            await book.write(batch)
            model[(b"b", same[0].encode())] = model[(b"b", same[1].encode())] = b"batched"
            with pytest.raises(UsageError, match="route to 2 shards"):
                await book.write(inkpen.Batch().put("b", key_in(0), b"x").put("b", key_in(2), b"y"))
            assert await book.get("c", "n") == b"6"
            assert await book.get_many("b", ["k000", same[0]]) == [None, b"batched"]
            assert [(b, k, v) async for b, k, v in book.objects()] == sorted(
                (b, k, v) for (b, k), v in model.items()
            )
            assert [k async for k in book.keys("b", reverse=True)][:2] == [b"k059", b"k058"]
            async with book.transaction() as txn:
                assert await txn.get("b", same[2]) == model[(b"b", same[2].encode())]
                await txn.put("b", same[2], b"in a transaction")
                assert txn.shard == 1
                with pytest.raises(UsageError, match="this transaction is in shard 1"):
                    await txn.put("b", key_in(0), b"x")
            model[(b"b", same[2].encode())] = b"in a transaction"
            async with book.snapshot() as snap:
                await book.put("b", "k001", b"after the snapshot")
                assert await snap.get("b", "k001") == b"v1"
            model[(b"b", b"k001")] = b"after the snapshot"
            checkpoint = await book.checkpoint(600, name="async")
            assert [c.id for c in await book.checkpoints()] == [checkpoint]
            async with inkpen.aio.shards.open_reader(url, checkpoint="async") as reader:
                found = {(b, k): v async for b, k, v in reader.objects()}
                assert found == model
            await book.delete_checkpoint(checkpoint)
            backup = await book.hot_backup()
            report = await backup(dest)
            assert len(report.shards) == SHARDS
            total = await book.metrics()
            assert total.puts == 64 and total.deletes == 1  # 60 puts, 3 merges, 1 more put
            assert total.batches == 2  # the batch, the transaction's commit
            assert sum([(await book.metrics(shard=i)).puts for i in range(SHARDS)]) == 64
            assert sorted(await book.stats()) == list(range(SHARDS))
            own = await book.shard(1)
            assert isinstance(own, inkpen.aio.AsyncBookie)
            assert await own.get("b", same[0]) == b"batched"
        with pytest.raises(UsageError, match="closed"):
            await book.get("b", "k001")

    asyncio.run(main())
    with shards.open_reader(dest) as copy:  # a Reader needs no merge operators
        held = {(b, k): v for b, k, v in copy.objects()}
    model[(b"b", b"k001")] = b"after the snapshot"
    assert held == model


def test_an_async_tail_waits_in_the_loop_and_wakes_on_a_commit(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    shards.create(url, shards=SHARDS)
    first, second = key_in(2, "a"), key_in(2, "z")

    async def main() -> list[bytes]:
        async with inkpen.aio.shards.open(url) as book:
            await book.put("b", first, b"1")
            seen: list[bytes] = []
            started = asyncio.Event()

            async def tail() -> None:
                async for change in book.changes(0, shard=2, wait=60):
                    seen.append(change.key)
                    started.set()
                    if change.key == second.encode():
                        return

            task = asyncio.create_task(tail())
            await asyncio.wait_for(started.wait(), 60)
            await book.put("b", second, b"2")
            await asyncio.wait_for(task, 60)  # woken by the commit, not by 60 s of quiet
            with pytest.raises(UsageError, match="a shard number"):
                book.changes(0, shard=SHARDS, wait=1)
            return seen

    assert asyncio.run(main()) == [first.encode(), second.encode()]
