"""Crash safety: a writer killed with SIGKILL loses nothing it acknowledged.

A subprocess (``support/crash_writer.py``) writes from several threads and prints each
acknowledged put; the test kills it at a random moment (after a random number of
acknowledgements), reopens the database, and checks every acknowledged put against it.
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
from support.latency_proxy import LATENCY_KIND

WRITER = Path(__file__).parent / "support" / "crash_writer.py"
THREADS = 4


def run_and_kill(url: str, seed: int, acks_before_kill: int) -> list[tuple[str, str]]:
    """Start the writer, read acknowledgements until ``acks_before_kill``, SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, str(WRITER), url, str(seed), str(THREADS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    acks: list[tuple[str, str]] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ack "):
                _, key, value = line.split()
                acks.append((key, value))
                if len(acks) >= acks_before_kill:
                    break
        child.send_signal(signal.SIGKILL)
        # Acknowledgements already printed before the kill are acknowledged too.
        rest = child.stdout.read()
    finally:
        child.kill()
        child.wait(timeout=30)
    for line in rest.splitlines():
        if line.startswith("ack "):
            _, key, value = line.split()
            acks.append((key, value))
    assert len(acks) >= acks_before_kill, "the writer died before being killed"
    return acks


def check(url: str, acks: list[tuple[str, str]]) -> None:
    last_hot: dict[str, int] = {}
    unique: dict[str, str] = {}
    for key, value in acks:
        if "-hot" in key:
            last_hot[key] = max(last_hot.get(key, -1), int(value))
        else:
            unique[key] = value
    with inkpen.open(url) as book:
        for key, value in unique.items():
            assert book.get("crash", key) == value.encode(), f"acknowledged {key} lost"
        for key, n in last_hot.items():
            stored = book.get("crash", key)
            assert stored is not None, f"acknowledged {key}={n} lost"
            # At most one later put of this key was in flight when the writer died.
            assert int(stored) in (n, n + 5), f"{key} holds {stored!r}, acknowledged {n}"
        indexed = {k.decode() for k in book.index_query("crash", "idx_bin", "s", "t")}
        expected = {k for k in unique if int(k.rsplit("-", 1)[1]) % 3 == 0}
        assert expected <= indexed
        listed = {k.decode() for k in book.keys("crash")}
        assert indexed <= listed
        for name in listed:
            if "-hot" not in name:
                # Never a value that was not written: each key holds exactly its own value.
                assert book.get("crash", name) == f"{name[1:].split('-')[0]}:{name}".encode()


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(20))
def test_kill_local_writer_loses_nothing_acknowledged(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    url = make_store_url("local")
    rng = random.Random(round_)
    acks = run_and_kill(url, seed=round_, acks_before_kill=rng.randrange(20, 1500))
    check(url, acks)
    # A second crash on top of the recovered database, then check both runs' writes.
    more = run_and_kill(url, seed=100 + round_, acks_before_kill=rng.randrange(20, 600))
    check(url, acks + more)


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_kill_s3_writer_loses_nothing_acknowledged(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    url = make_store_url("s3")
    rng = random.Random(1000 + round_)
    acks = run_and_kill(url, seed=round_, acks_before_kill=rng.randrange(20, 400))
    check(url, acks)


@pytest.mark.s3
@pytest.mark.latency
@pytest.mark.latency_tier
@pytest.mark.parametrize("round_", range(3))
def test_kill_writer_behind_latency_loses_nothing_acknowledged(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    """The same on SeaweedFS behind the latency proxy: the writer is killed while its writes
    take a round trip each, so more of them are in flight."""
    url = make_store_url(LATENCY_KIND)
    rng = random.Random(2000 + round_)
    acks = run_and_kill(url, seed=200 + round_, acks_before_kill=rng.randrange(20, 300))
    check(url, acks)
    more = run_and_kill(url, seed=300 + round_, acks_before_kill=rng.randrange(20, 200))
    check(url, acks + more)
