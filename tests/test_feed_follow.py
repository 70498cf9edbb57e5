"""Following Readers in another process: they see acknowledged writes within about their refresh
interval, across L0 writes, merges, rolls, journal compaction and GC, and agree with a model."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import inkpen
from support.engine import TINY

FOLLOWER = Path(__file__).parent / "support" / "follower_process.py"


@pytest.fixture
def url(durable_store_url: str) -> str:
    """A fresh store root another process can open too: a directory, or SeaweedFS."""
    return durable_store_url


class Child:
    def __init__(self, url: str, interval: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(FOLLOWER), url, str(interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        first = self.read().split()
        assert first[0] == "ready", first
        self.start_sqn = int(first[1])

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"follower process ended (status {self.proc.poll()})"
        return line.strip()

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.ask("close") == "closed"
            finally:
                self.proc.wait(timeout=60)


@pytest.fixture
def child_factory() -> Iterator[Callable[[str, float], Child]]:
    made: list[Child] = []

    def make(url: str, interval: float) -> Child:
        child = Child(url, interval)
        made.append(child)
        return child

    yield make
    for child in made:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()


def test_follower_in_another_process_keeps_up_across_maintenance(
    url: str, child_factory: Callable[[str, float], Child]
) -> None:
    rng = random.Random(3)
    model: dict[str, str] = {}
    log: list[tuple[int, str, str, str | None]] = []
    with inkpen.open(url, **TINY) as book:
        book.put("r", "seed", b"0")
        model["seed"] = "0"
        child = child_factory(url, 0.1)
        assert child.start_sqn == 1
        last = 1
        steps = ["flush", "merge", "compact", "gc", "none", "none"]
        tail_from = 0
        for round_ in range(8):
            if round_ == 7:  # the feed's last round is checked whole: a cursor keeps it so
                tail_from = last
                book.create_feed_cursor("tail", tail_from)
            for i in range(rng.randrange(5, 40)):
                key = f"k{rng.randrange(30):02d}"
                if rng.random() < 0.15 and key in model:
                    book.delete("r", key)
                    del model[key]
                    last += 1
                    log.append((last, key, "delete", None))
                else:
                    value = f"{round_}.{i}"
                    book.put("r", key, value.encode())
                    model[key] = value
                    last += 1
                    log.append((last, key, "put", value))
            step = steps[round_ % len(steps)]
            if step == "flush":
                book.flush()
            elif step == "merge":
                book.flush()
                book.compact_ledger()
            elif step == "compact":
                book.flush()
                book.compact_ledger()
                for _ in range(5):
                    if not book.compact_journal().compacted:
                        break
            elif step == "gc":
                book.run_gc(min_age=0)
            at = child.ask(f"wait {last}").split()
            assert at[0] == "at" and int(at[1]) >= last, at
            dumped = child.ask("dump")
            assert dumped.startswith("objects ")
            assert json.loads(dumped[len("objects ") :]) == model, f"round {round_} ({step})"
        book.run_gc(min_age=0)
        # the follower's feed of the last round (which a cursor held) agrees with the write log
        fed = json.loads(child.ask(f"feed {tail_from}")[len("feed ") :])
        assert [tuple(r) for r in fed] == [e for e in log if e[0] > tail_from]
        child.close()


def test_changes_wait_tails_new_writes(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        book.put("t", "0", b"0")
        with inkpen.open_reader(store_url, follow=True, refresh_interval=0.05) as reader:
            assert reader.following and reader.last_sqn == 1
            got: list[inkpen.Change] = []
            done = threading.Event()

            def tail() -> None:
                for change in reader.changes(1, wait=30.0):
                    got.append(change)
                    if len(got) == 20:
                        break
                done.set()

            thread = threading.Thread(target=tail)
            thread.start()
            for i in range(1, 21):
                book.put("t", str(i), str(i).encode())
            assert done.wait(60), "the tail did not see 20 new changes"
            thread.join()
            assert [(c.sqn, c.key, c.value) for c in got] == [
                (i + 1, str(i).encode(), str(i).encode()) for i in range(1, 21)
            ]
            # without wait the feed ends at what is readable now
            assert len(list(reader.changes())) == 21
            # a tail with nothing new ends after its wait
            assert list(reader.changes(reader.last_sqn, wait=0.2)) == []


def test_follower_arguments_are_checked(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        book.put("t", "0", b"0")
        checkpoint = book.checkpoint(60)
        with pytest.raises(inkpen.UsageError):
            inkpen.open_reader(store_url, follow=True, checkpoint=checkpoint)
        bad_intervals: tuple[Any, ...] = (0, -1, "1", True)  # the last two of the wrong type
        for bad in bad_intervals:
            with pytest.raises(inkpen.UsageError):
                inkpen.open_reader(store_url, follow=True, refresh_interval=bad)
        with inkpen.open_reader(store_url) as fixed:
            with pytest.raises(inkpen.UsageError):
                fixed.changes(wait=1.0)
            with pytest.raises(inkpen.UsageError):
                fixed.refresh()
        with (
            inkpen.open_reader(store_url, follow=True) as follower,
            pytest.raises(inkpen.UsageError),
        ):
            follower.changes(wait=-1)
