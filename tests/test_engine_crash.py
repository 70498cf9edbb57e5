"""Crash safety: a writer killed with SIGKILL loses nothing it acknowledged.

A subprocess (``support/crash_writer.py``) writes from several threads and prints each
acknowledged put; the test kills it at a random moment (after a random number of
acknowledgements), reopens the database, and checks every acknowledged put against it. With
several segment writes in flight (``segments_in_flight``, store requests slowed down), the kill
lands while some are. ``support/tearing_writer.py`` makes sure of it: the first of its writes in
flight never lands, the later ones do, and it kills itself; the journal then ends with a torn
tail, and nothing above its gap (never acknowledged) may be replayed.
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
from inkpen.formats.keys import object_parts
from inkpen.manifest.fencing import judge_tail, scan_segments
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import open_store
from support.latency_proxy import LATENCY_KIND

WRITER = Path(__file__).parent / "support" / "crash_writer.py"
TEARING_WRITER = Path(__file__).parent / "support" / "tearing_writer.py"
THREADS = 4


def run_and_kill(
    url: str, seed: int, acks_before_kill: int, *extra: str, threads: int = THREADS
) -> list[tuple[str, str]]:
    """Start the writer, read acknowledgements until ``acks_before_kill``, SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, str(WRITER), url, str(seed), str(threads), *extra],
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


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(6))
def test_kill_a_writer_with_segments_in_flight_loses_nothing_acknowledged(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    """Eight segment writes in flight, each store request 2 to 4 ms: a kill lands amid them."""
    url = make_store_url("local")
    rng = random.Random(2000 + round_)
    slow = ("8", "2")
    acks = run_and_kill(url, round_, rng.randrange(20, 1500), *slow, threads=16)
    check(url, acks)
    more = run_and_kill(url, 100 + round_, rng.randrange(20, 600), *slow, threads=16)
    check(url, acks + more)


def run_tearing(
    url: str, seed: int, in_flight: int, tear_after: int
) -> tuple[list[tuple[str, str]], int]:
    """Run the tearing writer until it kills itself; answers its acknowledgements and the slot
    it tore."""
    child = subprocess.Popen(
        [
            sys.executable,
            str(TEARING_WRITER),
            url,
            str(seed),
            "48",
            str(in_flight),
            str(tear_after),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate(timeout=300)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGKILL, err[-3000:]
    lines = out.splitlines()
    assert "killing" in lines, err[-3000:]
    acks = [(line.split()[1], line.split()[2]) for line in lines if line.startswith("ack ")]
    (torn,) = [int(line.split()[1]) for line in lines if line.startswith("tear ")]
    return acks, torn


def unacknowledged_above_the_gap(url: str, torn: int, in_flight: int) -> dict[str, bytes]:
    """The journal's torn tail, as the killed writer left it: slot ``torn`` missing, the
    ``in_flight - 1`` slots above it present; answers what those hold (key -> value)."""
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        journal = latest.manifest.journal
        scan = judge_tail(
            store,
            scan_segments(store, journal.last_rolled_segment, next_segment=journal.next_segment),
        )
        assert scan.missing == ()
        assert scan.torn_from == torn
        assert scan.torn == tuple(range(torn + 1, torn + in_flight))
        tables = TableStore(store)
        held: dict[str, bytes] = {}
        for segment_id in scan.torn:
            segment = tables.read_segment(segment_id)
            assert segment is not None and segment.entries
            for entry in segment.entries:
                held[object_parts(entry.ledger_key)[1].decode()] = entry.value or b""
        return held
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(4))
def test_a_torn_tail_left_by_a_kill_is_never_replayed(
    round_: int, make_store_url: Callable[[str], str]
) -> None:
    """Four segment writes in flight when the writer dies: the first never landed, the three
    above it did. Every acknowledged put is there after the reopen, and none of the writes
    above the gap (never acknowledged) is: not the fresh keys, not the hot keys' values."""
    url = make_store_url("local")
    rng = random.Random(3000 + round_)
    in_flight = 4
    acks: list[tuple[str, str]] = []
    for run in range(2):  # the second on top of the database the first left torn
        seed = round_ + 100 * run
        more, torn = run_tearing(url, seed, in_flight, rng.randrange(in_flight + 2, 80))
        unacked = unacknowledged_above_the_gap(url, torn, in_flight)
        assert not set(unacked) & {key for key, _ in more if "-hot" not in key}
        acks += more
        check(url, acks)
        with inkpen.open(url) as book:
            for key, value in unacked.items():
                assert book.get("crash", key) != value, f"{key}={value!r} above the gap replayed"
