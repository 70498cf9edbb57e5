"""Fencing between writer processes on SeaweedFS: racing opens, and a writer paused while another
takes over.

Each writer is a separate process (``support/fence_writer.py``) that prints every acknowledged,
refused or failed put. Tiny backpressure thresholds keep its puts held back by the throttle much
of the time, and a GC thread runs ``run_gc(min_age=0)`` in a loop, so a writer is often fenced
while its puts wait and while its GC runs without knowing of the fence. Every process must end
each round by a deadline (a put that never returns fails the test), no two writers may share an
epoch, and every acknowledged put must be in the database afterwards, with nothing missing that
its manifest names.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import inkpen
from inkpen.objectstore import open_store
from support import waiting
from support.cli import ok
from support.engine import TINY, missing_objects
from support.latency_proxy import latency_param

pytestmark = pytest.mark.s3

WRITER = Path(__file__).parent / "support" / "fence_writer.py"
ROUNDS = 10
PROCESSES = 3
SURVIVOR_ACKS = 5
DEADLINE = 120.0
"""Seconds any one step may take: an open on SeaweedFS takes well under a second here, but a
suite run beside other suites on 2 cores has been seen to starve a process for over a minute."""


class Child:
    """One writer process; a pump thread (the only reader of its stdout) keeps its lines."""

    def __init__(self, name: str, directory: Path, urls: list[str], *, hold: bool = False) -> None:
        self.name = name
        self.errors = directory / f"{name}.err"
        flags = ["--hold"] if hold else []
        with self.errors.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WRITER), *flags, name, str(directory), *urls],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._lines: list[list[str]] = []
        self._lock = threading.Lock()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self._lines.append(line.split())

    def lines(self, tag: str, r: int | None = None) -> list[list[str]]:
        with self._lock:
            return [w for w in self._lines if w[0] == tag and (r is None or w[1:2] == [str(r)])]

    def keys(self, tag: str, r: int) -> set[str]:
        return {w[2] for w in self.lines(tag, r)}

    def epoch(self, r: int) -> int | None:
        opened = self.lines("OPENED", r)
        return int(opened[0][2]) if opened else None

    def ended(self, r: int) -> bool:
        return bool(self.lines("END", r))

    def finish(self) -> None:
        try:
            self.proc.wait(timeout=DEADLINE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._pump.join(timeout=DEADLINE)
        assert self.proc.returncode == 0, self.errors.read_text()[-3000:]

    def describe(self) -> str:
        with self._lock:
            last = [" ".join(words) for words in self._lines[-5:]]
        return f"{self.name}: last lines {last}; stderr: {self.errors.read_text()[-1500:]!r}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def wait_until(
    condition: Callable[[], bool],
    what: str,
    deadline: float = DEADLINE,
    children: Sequence[Child] = (),
) -> None:
    """Poll ``condition``; fail at the deadline, or at once if one of ``children`` died, with
    what each child printed last and its stderr."""

    def died() -> str | None:
        # A child that printed DONE has ended its last round and may exit while others close.
        dead = [c for c in children if c.proc.poll() is not None and not c.lines("DONE")]
        return f"{', '.join(c.name for c in dead)} exited" if dead else None

    waiting.wait_until(
        condition,
        what,
        deadline,
        give_up=died,
        detail=lambda: "\n".join(c.describe() for c in children),
    )


def check_database(url: str, acknowledged: set[str], refused: set[str]) -> None:
    """Every acknowledged put is there, no refused one is, the manifest names nothing missing."""
    with inkpen.open(url, **TINY) as book:
        stored = {key.decode() for key in book.keys("fence")}
        lost = acknowledged - stored
        assert not lost, f"{len(lost)} acknowledged puts lost, e.g. {sorted(lost)[:3]}"
        assert not refused & stored, f"refused puts landed: {sorted(refused & stored)[:3]}"
        for key in sorted(acknowledged)[:: max(1, len(acknowledged) // 50)]:
            assert book.get("fence", key) == key.encode()
    store = open_store(url)
    try:
        assert missing_objects(store) == []
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["s3", latency_param(tier=True)])
def test_writer_processes_racing_to_open_one_database(
    kind: str, make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    urls = [make_store_url(kind) for _ in range(ROUNDS)]
    children = [Child(f"w{i}", tmp_path, urls) for i in range(PROCESSES)]
    try:
        wait_until(lambda: all(c.lines("READY") for c in children), "the writers to start")
        for r in range(ROUNDS):
            (tmp_path / f"go-{r}").touch()

            def opened_or_failed(r: int = r) -> bool:
                return all(c.epoch(r) is not None or c.ended(r) for c in children)

            wait_until(
                opened_or_failed, f"every writer to open or fail in round {r}", children=children
            )
            opened = {c: epoch for c in children if (epoch := c.epoch(r)) is not None}
            epochs = list(opened.values())
            assert len(set(epochs)) == len(epochs), f"two writers share an epoch: {epochs}"
            survivor = max(opened, key=opened.__getitem__)

            def settled(r: int = r, survivor: Child = survivor) -> bool:
                fenced = all(c.ended(r) for c in children if c is not survivor)
                return fenced and len(survivor.keys("ACK", r)) >= SURVIVOR_ACKS

            wait_until(
                settled, f"every fenced writer's puts to end in round {r}", children=children
            )
            (tmp_path / f"stop-{r}").touch()

            def ended(r: int = r) -> bool:
                return all(c.ended(r) for c in children)

            wait_until(ended, f"round {r} to end", children=children)
            for child in children:
                assert not child.lines("FAILED", r), child.lines("FAILED", r)[:3]
                if child is not survivor and child.epoch(r) is not None:
                    # Each put thread of a fenced writer ended refused, its GC fenced.
                    assert len(child.lines("REFUSED", r)) == 4, child.name
                    assert child.lines("GC", r)[0][2] == "fenced", child.lines("GC", r)
            check_database(
                urls[r],
                set().union(*(c.keys("ACK", r) for c in children)),
                set().union(*(c.keys("REFUSED", r) for c in children)),
            )
        for child in children:
            child.finish()
    finally:
        for child in children:
            child.kill()


@pytest.mark.parametrize("kind", ["s3", latency_param(tier=True)])
def test_a_paused_writer_resumed_after_another_opened_ends_every_put(
    kind: str, make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    """Writer A is paused (SIGSTOP) while every put of it is held by backpressure (its ledger
    writes are held back); B opens the database and writes, and goes on writing while A resumes
    (SIGCONT) and its ledger writes go on. Every put of A returns: acknowledged (and then
    present) or refused with FencedError; A's GC, resumed without knowing of B, deletes nothing
    of B's."""
    url = make_store_url(kind)
    a = Child("a", tmp_path, [url], hold=True)
    try:
        wait_until(lambda: bool(a.lines("READY")), "writer A to start")
        (tmp_path / "go-0").touch()
        wait_until(lambda: len(a.keys("ACK", 0)) >= 20, "writer A to acknowledge puts")
        (tmp_path / "hold-0").touch()
        wait_until(lambda: bool(a.lines("HELD", 0)), "writer A's puts to be held back")
        a.proc.send_signal(signal.SIGSTOP)
        b = inkpen.open(url, **TINY)
        try:
            for n in range(40):
                b.put("fence", f"b-{n}", f"b-{n}".encode())
            b.flush()
            more_error: list[BaseException] = []

            def write_more() -> None:
                try:
                    for n in range(40, 160):
                        b.put("fence", f"b-{n}", f"b-{n}".encode())
                except BaseException as exc:
                    more_error.append(exc)

            more = threading.Thread(target=write_more, daemon=True)
            more.start()
            a.proc.send_signal(signal.SIGCONT)
            (tmp_path / "release-0").touch()
            wait_until(lambda: a.ended(0), "every put of the resumed writer A to return")
            more.join(timeout=DEADLINE)
            assert not more.is_alive() and not more_error, more_error
            b.flush()
            b.compact_ledger()
        finally:
            b.close()
        assert not a.lines("FAILED", 0), a.lines("FAILED", 0)[:3]
        assert len(a.lines("REFUSED", 0)) == 4
        assert a.lines("GC", 0)[0][2] == "fenced"
        a.finish()
        acknowledged = a.keys("ACK", 0) | {f"b-{n}" for n in range(160)}
        check_database(url, acknowledged, a.keys("REFUSED", 0))
        assert ok("verify", url).lines[-1].startswith("result: all ")
    finally:
        a.kill()
