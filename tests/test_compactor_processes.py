"""External compaction across processes, on a local directory and on SeaweedFS: a writer
process opened with compaction="external" puts without pause while compactor processes merge
beside it. Every round SIGKILLs the writer while a compactor runs (a new writer takes over and
recovers with that compactor still running) and then the compactor, each at a random moment
(inside a merge, between a merge's files and its commit, inside GC, inside the writer's
recovery); finally a compactor is fenced by a newer one. Every acknowledged put (the writers'
``ACK`` lines, the model) must read back after the last writer closes, no object the latest
manifest names may be missing, the writer's L0 stays bounded, and what the kills left behind
are orphans only, which one GC pass removes.

The next writer and compactor are spawned a round ahead and wait on stdin
(``support/compactor_child.py``), so a round pays for no interpreter start-up.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import inkpen
from inkpen.objectstore import open_store
from support.compactor_child import OPTIONS, put_of
from support.engine import TINY, gc_leaves_no_orphans, missing_objects
from support.waiting import wait_until

CHILD = Path(__file__).parent / "support" / "compactor_child.py"
DEADLINE = 120.0
"""Seconds any one step may take on a starved 2-core machine."""


class Child:
    """A child process, spawned ready (imports done) and started with :meth:`go`; a pump
    thread keeps its stdout lines."""

    def __init__(self, role: str, directory: Path, url: str) -> None:
        self.role = role
        self.start = 0
        self.errors = directory / f"{role}-{time.monotonic_ns()}.err"
        with self.errors.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), role, str(directory), url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.lines: list[list[str]] = []
        self._lock = threading.Lock()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # killed while printing: the line is cut short (a put acknowledged
                # that way is the killed writer's put in flight)
            with self._lock:
                self.lines.append(line.split())

    def go(self, start: int = 0) -> Child:
        assert self.proc.stdin is not None
        self.start = start
        self.proc.stdin.write(f"go {start}\n")
        self.proc.stdin.flush()
        return self

    def seen(self, word: str) -> list[list[str]]:
        with self._lock:
            return [line for line in self.lines if line and line[0] == word]

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:

        def exited() -> str | None:
            if self.proc.poll() is None:
                return None
            self._pump.join(5)  # what it printed before it exited may still be on its way
            if condition():
                return None
            return f"{self.role} exited ({self.proc.returncode}): {self.errors.read_text()[-3000:]}"

        wait_until(condition, f"{what} from {self.role}", DEADLINE, give_up=exited)

    def kill(self) -> None:
        """SIGKILL, then read what it printed before it died."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE)
        self._pump.join(DEADLINE)

    def finish(self) -> int:
        code = self.proc.wait(DEADLINE)
        self._pump.join(DEADLINE)
        return code


class Spawner:
    """Keeps one process of each role spawned ahead, waiting for ``go``."""

    def __init__(self, directory: Path, url: str) -> None:
        self.directory = directory
        self.url = url
        self.children: list[Child] = []
        self._spare: dict[str, Child] = {}

    def take(self, role: str, start: int = 0) -> Child:
        child = self._spare.pop(role, None) or self._spawn(role)
        self._spare[role] = self._spawn(role)
        return child.go(start)

    def _spawn(self, role: str) -> Child:
        child = Child(role, self.directory, self.url)
        self.children.append(child)
        return child

    def close(self) -> None:
        for child in self.children:
            if child.proc.poll() is None:
                child.kill()


def _acks(child: Child) -> int:
    return len(child.seen("ACK"))


def _acked(child: Child, target: int) -> bool:
    return _acks(child) >= target


def _saw(child: Child, word: str, times: int = 1) -> bool:
    return len(child.seen(word)) >= times


def test_compactor_and_writer_processes_killed_at_random_lose_nothing(
    durable_kind: str, durable_store_url: str, tmp_path: Path
) -> None:
    url = durable_store_url
    rounds = 4 if durable_kind == "s3" else 20
    rng = random.Random(1818)
    spawner = Spawner(tmp_path, url)
    writers: list[tuple[Child, bool]] = []
    """Every writer in order, and whether it was killed."""
    compactors_killed = 0
    try:
        writer = spawner.take("writer")
        writer.wait_for(lambda: bool(writer.seen("OPENED")), "its open")
        for _ in range(rounds):
            compactor = spawner.take("compactor")
            compactor.wait_for(partial(_saw, compactor, "CLAIMED"), "its claim")
            target = _acks(writer) + rng.randrange(1, 16)
            writer.wait_for(partial(_acked, writer, target), f"{target} puts")
            if rng.random() < 0.5:  # sometimes let a round finish first
                compactor.wait_for(partial(_saw, compactor, "ROUND"), "a round")
            # The writer dies while the compactor runs; a new one recovers beside it. Its put
            # in flight (number start + acks) may have landed: the next writer skips that number.
            writer.kill()
            writers.append((writer, True))
            writer = spawner.take("writer", start=writer.start + _acks(writer) + 1)
            writer.wait_for(partial(_saw, writer, "OPENED"), "the new writer's open")
            target = rng.randrange(0, 10)
            writer.wait_for(partial(_acked, writer, target), f"{target} puts")
            compactor.kill()
            compactors_killed += 1
        # A compactor fenced by a newer one: the older ends with FENCED, the newer keeps on.
        older = spawner.take("compactor")
        older.wait_for(lambda: bool(older.seen("ROUND")), "a round")
        compactor = spawner.take("compactor")
        compactor.wait_for(partial(_saw, compactor, "CLAIMED"), "its claim")
        older.wait_for(lambda: bool(older.seen("FENCED")), "the fence")
        assert older.finish() == 0
        assert int(compactor.seen("CLAIMED")[0][1]) > int(older.seen("CLAIMED")[0][1])
        target = _acks(writer) + 50
        writer.wait_for(lambda: _acks(writer) >= target, "50 more puts")
        compactor.wait_for(partial(_saw, compactor, "ROUND", 2), "two rounds")
        (tmp_path / "stop").touch()
        writer.wait_for(lambda: bool(writer.seen("CLOSED")), "its close")
        assert writer.finish() == 0
        writers.append((writer, False))
        compactor.kill()
    finally:
        spawner.close()
    assert compactors_killed >= min(rounds, 20) and sum(k for _, k in writers) >= min(rounds, 20)
    # The model: each key's acknowledged value, or also a killed writer's put in flight (it may
    # have landed) until a later put of the key was acknowledged. None: the key may be absent.
    allowed: dict[str, set[str | None]] = {}
    for child, killed in writers:
        for _, key, value in child.seen("ACK"):
            allowed[key] = {value}
        if killed:
            key, value = put_of(child.start + _acks(child))
            allowed.setdefault(key, {None}).add(value)
    assert sum(_acks(child) for child, _ in writers) > 100
    l0_counts = [int(line[1]) for child, _ in writers for line in child.seen("L0")]
    # A flush on close may exceed the bound by one file; while putting L0 never does.
    assert l0_counts and max(l0_counts) <= OPTIONS["max_l0_files"]
    store = open_store(url)
    try:
        assert missing_objects(store) == []
    finally:
        store.close()
    gc_leaves_no_orphans(url)
    with inkpen.open(url, **TINY) as book:
        for key, values in allowed.items():
            found = book.get("c", key)
            assert (None if found is None else found.decode()) in values, (key, found, values)
        present = set(k.decode() for k in book.keys("c"))
        assert present <= set(allowed)
        assert {k for k, v in allowed.items() if None not in v} <= present
