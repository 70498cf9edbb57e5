"""The writer tails its own change feed: ``book.changes(since, wait=...)``, sync and asyncio.

Having given every change readable, the tail waits for the writer's next applied batch (woken by
it: the Bookie actor advances the writer's news after it publishes a batch), ends once ``wait``
seconds pass with nothing new, and ends when the Bookie closes. Each test checks what the tail
gave against a model of the writes: every SQN once, in order, with its change.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

import inkpen
import inkpen.aio
from support.engine import TINY
from support.waiting import wait_until, wait_until_async

LONG = 120.0
"""A tail's ``wait`` when the test ends it by itself (a marker, a close): never reached."""

Written = dict[str, list[tuple[str, str, bytes | None]]]
"""The model: by writer, the (kind, key, value) of each change it wrote, in its order."""


def as_written(change: inkpen.Change) -> tuple[str, str, bytes | None]:
    return change.kind, change.key.decode(), change.value


def check(seen: list[inkpen.Change], written: Written, *, last: int) -> None:
    """``seen`` is every change up to SQN ``last`` exactly once, in SQN order: each writer's
    changes in the order it wrote them, and nothing else."""
    assert [c.sqn for c in seen] == list(range(1, last + 1))
    by_writer: Written = {}
    for change in seen:
        by_writer.setdefault(change.key.decode().split("-")[0], []).append(as_written(change))
    assert by_writer == written
    assert {c.bucket for c in seen} == {b"b"}


def change_of(t: int, i: int) -> tuple[str, str, bytes | None]:
    """Writer ``t``'s ``i``-th change: puts and deletes of its own keys."""
    key = f"t{t}-{i % 7}"
    if i % 5 == 4:
        return "delete", key, None
    return "put", key, f"{t}:{i}".encode() * (1 + i % 40)


def write(book: inkpen.Bookie, t: int, count: int, written: Written) -> None:
    mine = written.setdefault(f"t{t}", [])
    for i in range(count):
        kind, key, value = change_of(t, i)
        if value is None:
            book.delete("b", key)
        else:
            book.put("b", key, value)
        mine.append((kind, key, value))


@pytest.mark.parametrize("store_kind", ["memory", "local", "s3"], indirect=True)
def test_a_writer_tails_its_own_feed_from_another_thread(store_url: str) -> None:
    written: Written = {}
    seen: list[inkpen.Change] = []
    # Small files: the tail reads journal files the writer rolls meanwhile, then segments.
    with inkpen.open(store_url, **TINY) as book:
        book.create_feed_cursor("tail", 0)  # the journal keeps every change for it
        ended = threading.Event()
        marker: list[int] = []

        def tail() -> None:
            for change in book.changes(0, wait=LONG):
                seen.append(change)
                if marker and change.sqn >= marker[0]:
                    break
            ended.set()

        consumer = threading.Thread(target=tail)
        consumer.start()
        writers = [threading.Thread(target=write, args=(book, t, 120, written)) for t in range(3)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        marker.append(3 * 120 + 1)
        book.put("b", "end-marker", b"end")  # wakes the tail if it waits, and ends it
        written["end"] = [("put", "end-marker", b"end")]
        consumer.join(timeout=LONG)
        assert ended.is_set()
        check(seen, written, last=marker[0])
        # A tail from the middle starts there.
        with book.changes(200, wait=0.01) as rest:
            assert [as_written(c) for c in rest] == [as_written(c) for c in seen[200:]]


@pytest.mark.parametrize("store_kind", ["memory", "local"], indirect=True)
def test_a_writer_tails_its_own_feed_from_an_asyncio_task(store_url: str) -> None:
    async def run() -> tuple[list[inkpen.Change], Written]:
        written: Written = {}
        seen: list[inkpen.Change] = []
        async with await inkpen.aio.open(store_url, **TINY) as book:
            await book.create_feed_cursor("tail", 0)
            marker: list[int] = []

            async def tail() -> None:
                async for change in book.changes(0, wait=LONG):
                    seen.append(change)
                    if marker and change.sqn >= marker[0]:
                        return

            async def writes(t: int) -> None:
                mine = written.setdefault(f"t{t}", [])
                for i in range(100):
                    kind, key, value = change_of(t, i)
                    if value is None:
                        await book.delete("b", key)
                    else:
                        await book.put("b", key, value)
                    mine.append((kind, key, value))

            consumer = asyncio.create_task(tail())
            await asyncio.gather(*(writes(t) for t in range(3)))
            marker.append(3 * 100 + 1)
            await book.put("b", "end-marker", b"end")
            written["end"] = [("put", "end-marker", b"end")]
            await asyncio.wait_for(consumer, LONG)
        return seen, written

    seen, written = asyncio.run(run())
    check(seen, written, last=3 * 100 + 1)


def waits_of(book: inkpen.Bookie, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set each time a tail of ``book`` begins to wait for the writer's news."""
    news = book._engine.applied
    began = threading.Event()
    wait_for_change: Callable[[int, float], bool] = news.wait_for_change

    def watched(version: int, timeout: float) -> bool:
        began.set()
        return wait_for_change(version, timeout)

    monkeypatch.setattr(news, "wait_for_change", watched)
    return began


def test_a_waiting_tail_wakes_on_a_commit_with_the_new_change(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with inkpen.open(store_url) as book:
        book.put("b", "a", b"1")
        began = waits_of(book, monkeypatch)
        tail = book.changes(0, wait=LONG)
        assert next(tail).value == b"1"
        got: list[inkpen.Change] = []
        consumer = threading.Thread(target=lambda: got.append(next(tail)))
        consumer.start()
        assert began.wait(LONG)  # the tail gave everything and waits
        book.put("b", "b", b"2")
        consumer.join(LONG)
        assert [(c.sqn, c.key, c.value) for c in got] == [(2, b"b", b"2")]
        tail.close()


def test_an_async_tail_waits_in_the_loop_and_wakes_on_a_commit(store_url: str) -> None:
    async def run() -> None:
        async with await inkpen.aio.open(store_url) as book:
            await book.put("b", "a", b"1")
            news = book.sync._engine.applied
            tail = book.changes(0, wait=LONG)
            first = await tail.__anext__()
            assert first.value == b"1"
            waiting = asyncio.create_task(tail.__anext__())
            # The tail waits in the loop on a listener of the writer's news, holding no thread.
            await wait_until_async(lambda: bool(news._listeners), "the tail's listener")
            await book.put("b", "b", b"2")
            second = await asyncio.wait_for(waiting, LONG)
            assert (second.sqn, second.key, second.value) == (2, b"b", b"2")
            await tail.aclose()
            assert not news._listeners

    asyncio.run(run())


def test_a_tail_ends_after_wait_with_what_there_is(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for i in range(30):
            book.put("b", f"k{i}", b"v%d" % i)
        found = list(book.changes(10, wait=0.2))  # nothing more comes: it ends
        assert [c.sqn for c in found] == list(range(11, 31))
        assert [c.value for c in found] == [b"v%d" % i for i in range(10, 30)]
        assert list(book.changes(30, wait=0.05)) == []
        only = list(book.changes(0, bucket="other", wait=0.05))
        assert only == []


def test_closing_the_bookie_ends_a_waiting_tail(store_url: str) -> None:
    book = inkpen.open(store_url)
    book.put("b", "a", b"1")
    seen: list[inkpen.Change] = []
    errors: list[BaseException] = []

    def tail() -> None:
        try:
            seen.extend(book.changes(0, wait=LONG))
        except BaseException as exc:  # the tail must end quietly
            errors.append(exc)

    consumer = threading.Thread(target=tail)
    consumer.start()
    wait_until(lambda: seen, "the first change")
    book.close()
    consumer.join(LONG)
    assert not consumer.is_alive() and errors == []
    assert [c.value for c in seen] == [b"1"]
    with pytest.raises(inkpen.UsageError, match="closed"):
        book.changes(0, wait=1.0)


def test_bad_tail_arguments_are_usage_errors(store_url: str) -> None:
    with inkpen.open(store_url) as book:
        bad: list[dict[str, Any]] = [
            {"wait": -1.0},
            {"wait": "1"},
            {"wait": float("nan")},
            {"gaps": "maybe", "wait": 1.0},
        ]
        for kwargs in bad:
            with pytest.raises(inkpen.UsageError):
                book.changes(0, **kwargs)
        with pytest.raises(inkpen.UsageError):
            book.changes(-1, wait=1.0)
