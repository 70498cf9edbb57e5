"""Readers in other processes open, read and close Readers with short leases while the writer
puts, merges, compacts the journal and collects garbage on SeaweedFS.

No Reader ever fails, and every fold is exactly the database as a prefix of the writer's
acknowledged puts left it — a prefix that holds every put acknowledged before the Reader opened.
The writer puts one key at a time from one thread, so its put order is its SQN order; the value
of put ``i`` is ``"<key>:<i>"``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import inkpen
from support.latency_proxy import latency_param
from support.waiting import wait_until

READER = Path(__file__).parent / "support" / "reader_churn.py"
KEYS = 120
READERS = 3
LIFETIME = 3.0
SECONDS = 20.0
WRITER = {
    "ledger_cache_entries": 40,
    "l0_cache_entries": 120,
    "max_l0_files": 2,
    "sst_target_bytes": 4096,
    "sst_block_bytes": 512,
    "l1_target_files": 2,
    "level_fanout": 2,
    "roll_segments": 8,
    "roll_bytes": 64 * 1024,
    "journal_file_target_bytes": 8192,
    "delete_poll_interval": 0.05,
    "gc_min_age": 0.0,
}
"""Small files: the puts of a few seconds flush, merge, roll and compact many times."""


def check_fold(fold: dict[str, str], keys: list[str], acked: list[float], opened: float) -> None:
    """``fold`` is the state after puts ``0..top`` for some ``top`` >= every put acknowledged
    before ``opened``."""
    seqs: dict[str, int] = {}
    for key, value in fold.items():
        written_key, _, seq = value.partition(":")
        assert written_key == key and keys[int(seq)] == key, f"{key}={value} was never put"
        seqs[key] = int(seq)
    top = max(seqs.values(), default=-1)
    expected = {keys[i]: i for i in range(top + 1)}
    stale = {k: (seqs.get(k), expected[k]) for k in expected if seqs.get(k) != expected[k]}
    assert not stale, f"not the state of one prefix of the puts (read, expected): {stale}"
    before = [i for i, at in enumerate(acked) if at < opened]
    assert top >= (before[-1] if before else -1), "a put acknowledged before opening is missing"


@pytest.mark.s3
@pytest.mark.parametrize("kind", ["s3", latency_param(tier=True)])
def test_readers_never_fail_while_the_writer_compacts_and_collects(
    kind: str, make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    url = make_store_url(kind)
    keys: list[str] = []
    acked: list[float] = []
    rng = random.Random(5)
    outputs = [tmp_path / f"reader-{n}.jsonl" for n in range(READERS)]
    with inkpen.open(url, **WRITER) as book:

        def put() -> None:
            key = f"k{rng.randrange(KEYS):03d}"
            book.put("r", key, f"{key}:{len(keys)}".encode())
            keys.append(key)
            acked.append(time.time())

        for _ in range(KEYS):
            put()
        readers = []
        for n, output in enumerate(outputs):
            with output.open("w") as sink:
                readers.append(
                    subprocess.Popen(
                        [sys.executable, str(READER), url, str(LIFETIME), str(SECONDS), str(n)],
                        stdout=sink,
                    )
                )
        try:

            def readers_done_else_write() -> bool:
                if all(reader.poll() is not None for reader in readers):
                    return True
                put()
                if len(keys) % 10 == 0:
                    book.flush()
                if len(keys) % 40 == 0:
                    book.compact_journal()
                if len(keys) % 30 == 0:
                    book.compact_ledger()
                if len(keys) % 25 == 0:
                    book.run_gc(min_age=0)
                return False

            wait_until(readers_done_else_write, "the readers to finish", SECONDS + 60.0, interval=0)
        finally:
            for reader in readers:
                if reader.poll() is None:
                    reader.kill()
                reader.wait(timeout=30)
    assert [reader.returncode for reader in readers] == [0] * READERS

    cycles, lapsed, errors = 0, 0, []
    for output in outputs:
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        assert lines and "done" in lines[-1], f"{output.name} did not finish"
        for line in lines[:-1]:
            if str(line.get("error", "")).startswith("CheckpointLapsedError"):
                # On a starved machine a refresh can truly come too late; the Reader then says
                # its lease lapsed, which is right. Any other error is a finding.
                lapsed += 1
            elif "error" in line:
                errors.append(f"{line['error']}\n{line.get('traceback', '')}")
            else:
                check_fold(line["fold"], keys, acked, line["opened"])
                cycles += 1
    assert not errors, f"{len(errors)} reader cycles failed:\n" + "\n".join(errors[:5])
    assert cycles >= READERS * 3, f"only {cycles} reader cycles ran ({lapsed} lapsed)"
