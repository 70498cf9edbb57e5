"""Crash torture: a writer killed with SIGKILL inside flushes, merges, journal compaction, hot
backups and GC loses nothing it acknowledged, and invents nothing.

A subprocess (``support/torture_writer.py``) follows a plan of writes that is a pure function of
its seed, prints each acknowledgement, and runs one kind of maintenance step every few writes.
It dies by SIGKILL at a random point: most runs it kills itself at a chosen object-store write
(before the write, or after it landed) once a chosen step has started, so the kill lands inside
the flush, merge, compaction, backup or GC (or inside the open and recovery of a database an
earlier writer left crashed); the other runs the test kills it between steps, after a random
number of acknowledgements. The plan tells exactly which write was in flight, so the
reopened database must hold exactly the state after the acknowledged writes, or after those and
the one in flight: every object, every index entry, and the SQN. A second writer is then started
and killed on top of the recovered database. A hot backup interrupted by the kill must open as the
last backup that finished or as the one interrupted, never as anything else. At the end one GC
pass must leave no file that no manifest names, and change nothing the database reads.
"""

from __future__ import annotations

import queue
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import pytest

import inkpen
from inkpen.manifest.store import ManifestStore, RootState
from inkpen.objectstore import open_store
from support.engine import TINY, gc_leaves_no_orphans
from support.latency_proxy import LATENCY_KIND
from support.profiles import budget
from support.torture_writer import BUCKET, HOT_KEYS, INDEX_FIELD, PHASES, Operation, operations
from support.waiting import held_within

WRITER = Path(__file__).parent / "support" / "torture_writer.py"
STALL_LIMIT = 120.0
"""A writer silent this long is stuck: the test fails, naming the step it was in."""
KILL_WRITES = (1, 1, 2, 2, 3, 4, 6, 9, 13)
"""Which store write after the step starts kills the writer: a flush writes two objects, a merge
or a GC a few more, so small numbers land inside the step and larger ones in what follows it."""


@dataclass(frozen=True)
class State:
    """What the database holds: live objects and (term, key) index entries of the bucket."""

    objects: dict[bytes, bytes] = field(default_factory=dict)
    index: frozenset[tuple[bytes, bytes]] = frozenset()

    def apply(self, op: Operation) -> State:
        objects = dict(self.objects)
        key = op.key.encode()
        if op.value is None:
            objects.pop(key, None)
        else:
            objects[key] = op.value
        index = set(self.index)
        if op.value is None:  # a delete takes every index entry of its object
            index = {entry for entry in index if entry[1] != key}
        for kind, _, term in op.indexes:
            entry = (term.encode(), key)
            if kind == "add":
                index.add(entry)
            else:
                index.discard(entry)
        return State(objects, frozenset(index))

    def visible(self) -> State:
        """What reads show: index entries of a deleted object answer no query."""
        return State(self.objects, frozenset(e for e in self.index if e[1] in self.objects))


@dataclass
class Run:
    """What one writer printed before it died."""

    acked: int = 0
    steps_started: list[tuple[str, int]] = field(default_factory=list)
    steps_done: list[tuple[str, int]] = field(default_factory=list)


def read_lines(child: subprocess.Popen[str], log: Path) -> Iterator[str]:
    """The child's lines, failing the test with its thread stacks if it goes silent too long."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    last = "(nothing yet)"
    while True:
        try:
            line = lines.get(timeout=STALL_LIMIT)
        except queue.Empty:
            child.send_signal(signal.SIGUSR1)
            stacks = wait_for_stacks(log)
            raise AssertionError(
                f"the writer printed nothing for {STALL_LIMIT:.0f} s after {last!r}; its "
                f"threads:\n{stacks}"
            ) from None
        if line is None:
            return
        last = line.strip()
        yield last


def wait_for_stacks(log: Path) -> str:
    """The thread dump a stuck writer writes to its log on SIGUSR1 (polled, 10 s deadline)."""
    held_within(lambda: "most recent call first" in log.read_text(), 10.0, interval=0.05)
    return log.read_text()[-20000:]


def run_and_kill(
    url: str, seed: int, phase: str, backup_url: str, rng: random.Random, log: Path
) -> Run:
    """Start the writer, kill it with SIGKILL at a random moment, and say what it acknowledged."""
    command = [sys.executable, str(WRITER), url, str(seed), phase, backup_url]
    in_step = rng.random() < 0.8
    target_acks = rng.randrange(1, 150)
    if in_step:
        when = rng.choice(("before", "after"))
        step = 0 if rng.random() < 0.15 else rng.randrange(1, 6)
        command += [str(step), str(rng.choice(KILL_WRITES)), when]
    with log.open("w") as errors:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    run = Run()
    try:
        for line in read_lines(child, log):
            words = line.split()
            if words[0] == "ack":
                run.acked = int(words[1])
            elif words[0] == "phase":
                (run.steps_started if words[3] == "start" else run.steps_done).append(
                    (words[1], int(words[2]))
                )
            if not in_step and run.acked >= target_acks and child.poll() is None:
                child.send_signal(signal.SIGKILL)
        # Lines printed before the signal landed were read too: they count as acknowledged.
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, (
        f"the writer exited with {child.returncode} instead of dying by SIGKILL:\n"
        f"{log.read_text()[-3000:]}"
    )
    return run


def read_state(book: inkpen.Bookie) -> State:
    objects = {key: value for _, key, value in book.objects(BUCKET)}
    index = frozenset(book.index_query(BUCKET, INDEX_FIELD, "", "z", return_terms=True))
    for n in range(HOT_KEYS):
        key = f"k{n}".encode()
        assert book.get(BUCKET, key) == objects.get(key)
    for key, value in objects.items():
        assert book.get(BUCKET, key) == value
    return State(objects, index)


def state_after(base: State, plan: list[Operation], upto: int) -> State:
    """The state after the first ``upto`` writes of the plan."""
    state = base
    for op in plan[:upto]:
        state = state.apply(op)
    return state


def check_recovery(url: str, base: State, base_sqn: int, seed: int, run: Run) -> tuple[State, int]:
    """Reopen after a kill: the state is exactly the acknowledged writes, plus perhaps the one
    in flight; the SQN agrees. Returns the state and SQN found."""
    plan = list(islice(operations(seed), run.acked + 1))
    acked_only = state_after(base, plan, run.acked)
    with_in_flight = acked_only.apply(plan[run.acked])
    with inkpen.open(url, **TINY) as book:
        found = read_state(book)
        sqn = book.stats()["sqn"]
    landed = sqn - base_sqn
    assert landed in (run.acked, run.acked + 1), (
        f"{run.acked} writes acknowledged, but the database recovered SQN {sqn} from {base_sqn}"
    )
    expected = with_in_flight if landed == run.acked + 1 else acked_only
    visible = expected.visible()
    assert found.objects == visible.objects, describe(found, visible, "objects")
    assert found.index == visible.index, describe(found, visible, "index entries")
    # The model goes on from the expected state (a delete dropped its object's entries, so a
    # later put of the key answers only for the terms it adds).
    return expected, sqn


def describe(found: State, expected: State, what: str) -> str:
    if what == "objects":
        keys = set(found.objects) | set(expected.objects)
        wrong = {
            k: (found.objects.get(k, b"(absent)")[:24], expected.objects.get(k, b"(absent)")[:24])
            for k in sorted(keys)
            if found.objects.get(k) != expected.objects.get(k)
        }
        return f"recovered objects differ (found, expected): {wrong}"
    return (
        f"recovered index entries differ: extra {sorted(found.index - expected.index)}, "
        f"missing {sorted(expected.index - found.index)}"
    )


def check_backup(backup_url: str, base: State, seed: int, run: Run) -> None:
    """An interrupted backup opens as the last finished backup or as the interrupted one; with
    no finished backup, the destination may also hold nothing or only copied files."""
    done = [n for name, n in run.steps_done if name == "backup"]
    started = [n for name, n in run.steps_started if name == "backup"]
    if not started:
        return
    candidates = {started[-1]} | ({done[-1]} if done else set())
    plan = list(islice(operations(seed), max(candidates)))
    allowed = [state_after(base, plan, n) for n in sorted(candidates)]
    store = open_store(backup_url)
    try:
        root = ManifestStore(store).check_root_state()
    finally:
        store.close()
    if root is not RootState.DATABASE:
        assert not done, f"a finished backup left a root that is {root}, not a database"
        return
    with inkpen.open(backup_url, **TINY) as book:
        found = read_state(book)
    assert found in allowed, (
        f"the backup holds neither the state of the backup finished after {done[-1:]} writes "
        f"nor of the one started after {started[-1]} writes"
    )


def check_no_orphans(url: str, state: State) -> None:
    """With no writer running, one GC pass leaves no SST or journal file that no remaining
    manifest names (killed flushes, merges and compactions leave orphans; GC must find them),
    and the database still reads exactly as before."""
    gc_leaves_no_orphans(url)
    with inkpen.open(url, **TINY) as book:
        assert read_state(book) == state.visible(), "the database reads differently after GC"


def torture(
    make_url: Callable[[], str], phase: str, seed: int, tmp_path: Path, rounds: int = 2
) -> None:
    url = make_url()
    rng = random.Random(f"{phase}-{seed}")
    state, sqn = State(), 0
    for round_ in range(rounds):
        backup_url = make_url()
        writer_seed = seed * 100 + round_
        run = run_and_kill(
            url, writer_seed, phase, backup_url, rng, tmp_path / f"writer-{round_}.log"
        )
        base = state
        state, sqn = check_recovery(url, base, sqn, writer_seed, run)
        check_backup(backup_url, base, writer_seed, run)
    check_no_orphans(url, state)


def local_url(tmp_path: Path) -> Callable[[], str]:
    return lambda: str(tmp_path / f"db-{uuid.uuid4().hex[:12]}")


CRASH_SEEDS = range(budget("crash").examples)


@pytest.mark.slow
@pytest.mark.parametrize("seed", CRASH_SEEDS)
@pytest.mark.parametrize("phase", [*PHASES, "mixed"])
def test_kill_during_maintenance_on_local_store(phase: str, seed: int, tmp_path: Path) -> None:
    torture(local_url(tmp_path), phase, seed, tmp_path)


@pytest.mark.s3
@pytest.mark.slow
def test_kill_during_maintenance_on_seaweedfs(
    make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    torture(lambda: make_store_url("s3"), "mixed", 7, tmp_path)


@pytest.mark.s3
@pytest.mark.latency
@pytest.mark.latency_tier
def test_kill_during_maintenance_behind_latency(
    make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    torture(lambda: make_store_url(LATENCY_KIND), "mixed", 11, tmp_path)
