"""The compute workers: merges and builds run in a child process and give the same bytes.

A worker that dies is replaced, and the job it was doing still completes (in the caller).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from inkpen.actors.kernel import compute
from inkpen.errors import CorruptionError
from inkpen.formats.keys import ACTIVE, TOMBSTONE, LedgerValue, object_key
from inkpen.formats.sst import SstReader, SstShape, build_sst
from support.fetching import memory_fetch

SHAPE = SstShape(block_bytes=512, bloom_bits_per_key=10, target_bytes=2048)


def sst(entries: list[tuple[bytes, LedgerValue]], name: str) -> compute.SstInput:
    data, _ = build_sst(entries)
    return name, data, 0


def entries(keys: range, sqn: int, status: int = ACTIVE) -> list[tuple[bytes, LedgerValue]]:
    return [
        (object_key(b"b", b"k%05d" % i), LedgerValue(sqn + i, status, None, i, 10, 0)) for i in keys
    ]


def read_all(built: Sequence[tuple[bytes, object]]) -> list[tuple[bytes, LedgerValue]]:
    out: list[tuple[bytes, LedgerValue]] = []
    for data, _ in built:
        reader = SstReader.open("out", len(data), memory_fetch(data))
        out.extend(reader.iter_range())
    return out


def merge(workers: int, basement: bool) -> list[tuple[bytes, LedgerValue]]:
    newer = sst(entries(range(0, 300, 2), 10_000, TOMBSTONE), "newer")
    older = sst(entries(range(0, 300), 1), "older")
    built = compute.run(workers, compute.merge_ssts, [newer], [older], basement, 0, SHAPE)
    return read_all(built)


def test_worker_merges_exactly_as_the_caller_would() -> None:
    for basement in (False, True):
        assert merge(1, basement) == merge(0, basement)
    kept = merge(1, basement=True)
    assert [k for k, _ in kept] == [object_key(b"b", b"k%05d" % i) for i in range(1, 300, 2)]
    shadowed = merge(1, basement=False)
    assert len(shadowed) == 300
    assert sum(1 for _, v in shadowed if v.status == TOMBSTONE) == 150


def test_a_killed_worker_is_replaced_and_the_job_still_completes() -> None:
    expected = merge(0, basement=True)
    assert merge(1, basement=True) == expected  # starts a worker if none runs
    killed = list(compute._pool._all)  # earlier tests may have started more than one
    for worker in killed:
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=30)
    for _ in killed:  # each lost worker's job runs here instead, and the worker is dropped
        assert merge(1, basement=True) == expected
    assert merge(1, basement=True) == expected  # and a fresh worker serves the next one
    assert not set(killed) & set(compute._pool._all)
    assert compute._pool._all and all(w.process.poll() is None for w in compute._pool._all)


def test_job_errors_come_back_to_the_caller() -> None:
    bad = ("bad.sst", b"not an sst at all", 0)
    with pytest.raises(CorruptionError, match=r"bad\.sst"):
        compute.run(1, compute.merge_ssts, [bad], [], True, 0, SHAPE)


def test_a_worker_started_beside_a_directory_named_inkpen_still_imports_the_package(
    tmp_path: Path,
) -> None:
    """An application run from a directory holding a folder named ``inkpen`` (a checkout of the
    sources, say): its compute workers must import the installed package, not that folder."""
    shadow = tmp_path / "inkpen"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowing folder was imported')\n")
    env = {name: value for name, value in os.environ.items() if name != "PYTHONSAFEPATH"}
    script = (
        "from inkpen.actors.kernel import compute\n"
        "worker = compute._Worker()\n"
        "print(len(worker.call('encode_journal', ([], 1))))\n"
        "worker.close()\n"
    )
    # -P keeps this parent from importing the folder itself; its worker is started as usual.
    result = subprocess.run(
        [sys.executable, "-P", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) > 0
