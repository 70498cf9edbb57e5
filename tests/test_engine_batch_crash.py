"""Batches are all or nothing under SIGKILL: a writer of atomic batches killed at a random moment
leaves every acknowledged batch whole and no batch partly applied.

``support/batch_crash_writer.py`` writes batches from several threads (each batch puts fresh keys,
moves its thread's ``last`` key and deletes the keys of its thread's batch before last) and prints
each acknowledged batch; the test kills it with SIGKILL after a random number of
acknowledgements, reopens the database and compares every key of the bucket with the one state
the thread's ``last`` key allows.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import inkpen
from support.batch_crash_writer import batch_keys, last_key
from support.latency_proxy import LATENCY_KIND

WRITER = Path(__file__).parent / "support" / "batch_crash_writer.py"
THREADS = 4


def run_and_kill(url: str, seed: int, acks_before_kill: int) -> dict[int, int]:
    """Start the writer, read acknowledgements until ``acks_before_kill``, SIGKILL it; answers
    the highest acknowledged batch of each thread."""
    child = subprocess.Popen(
        [sys.executable, str(WRITER), url, str(seed), str(THREADS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    acked: dict[int, int] = {}
    count = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ack "):
                _, thread, n = line.split()
                acked[int(thread)] = max(acked.get(int(thread), -1), int(n))
                count += 1
                if count >= acks_before_kill:
                    break
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()  # printed before the kill: acknowledged too
    finally:
        child.kill()
        child.wait(timeout=30)
    for line in rest.splitlines():
        if line.startswith("ack "):
            _, thread, n = line.split()
            acked[int(thread)] = max(acked.get(int(thread), -1), int(n))
            count += 1
    assert count >= acks_before_kill, "the writer died before being killed"
    return acked


def expected_state(seed: int, last: dict[int, int]) -> dict[str, bytes]:
    """The bucket's keys when each thread's batches up to ``last[thread]`` were applied whole."""
    state: dict[str, bytes] = {}
    for thread, top in last.items():
        state[last_key(seed, thread)] = str(top).encode()
        for n in (top - 1, top):  # batch top deleted batch top - 2 and everything before it
            if n >= 0:
                for key in batch_keys(seed, thread, n):
                    state[key] = f"{key}={n}".encode()
    return state


def check(url: str, seed: int, acked: dict[int, int]) -> None:
    with inkpen.open(url) as book:
        stored = {
            key.decode(): value
            for _, key, value in book.objects("crash")
            if key.decode().startswith(f"s{seed}-")
        }
        last: dict[int, int] = {}
        for thread, top in acked.items():
            value = book.get("crash", last_key(seed, thread))
            assert value is not None, f"acknowledged batch {top} of thread {thread} lost"
            # Every acknowledged batch is there; at most one more per thread was in flight.
            assert int(value) in (top, top + 1), f"thread {thread}: last={value!r}, acked {top}"
            last[thread] = int(value)
        for thread in range(THREADS):
            if thread not in acked and book.get("crash", last_key(seed, thread)) is not None:
                last[thread] = int(book.get("crash", last_key(seed, thread)) or b"0")
        assert stored == expected_state(seed, last), "a batch was applied in part"


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(20))
def test_kill_local_batch_writer_leaves_every_batch_whole_or_absent(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    url = make_store_url("local")
    rng = random.Random(round_)
    acked = run_and_kill(url, seed=round_, acks_before_kill=rng.randrange(5, 400))
    check(url, round_, acked)
    more = run_and_kill(url, seed=100 + round_, acks_before_kill=rng.randrange(5, 200))
    check(url, round_, acked)
    check(url, 100 + round_, more)


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_kill_s3_batch_writer_leaves_every_batch_whole_or_absent(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    url = make_store_url("s3")
    rng = random.Random(1000 + round_)
    acked = run_and_kill(url, seed=round_, acks_before_kill=rng.randrange(5, 150))
    check(url, round_, acked)


@pytest.mark.s3
@pytest.mark.latency
@pytest.mark.latency_tier
@pytest.mark.parametrize("round_", range(2))
def test_kill_batch_writer_behind_latency_leaves_every_batch_whole_or_absent(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    url = make_store_url(LATENCY_KIND)
    rng = random.Random(3000 + round_)
    acked = run_and_kill(url, seed=200 + round_, acks_before_kill=rng.randrange(5, 150))
    check(url, 200 + round_, acked)
