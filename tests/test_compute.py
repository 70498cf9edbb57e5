"""The compute workers: merges and builds run in a child process and give the same bytes.

A worker that dies is replaced, and the job it was doing still completes (in the caller). A
merge reads its inputs through the caller's host a run at a time and hands over each output as
it is built; its files are those of the merge of the same inputs held whole.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from inkpen.actors.kernel import compute
from inkpen.errors import CorruptionError, NotFoundError
from inkpen.formats.keys import ACTIVE, TOMBSTONE, LedgerValue, object_key
from inkpen.formats.sst import SstInfo, SstReader, SstShape, build_sst
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


# -- merges through a host: inputs read a run at a time, outputs handed over one by one ---------


class RecordingHost(compute.MergeHost):
    """A merge's host over inputs held in memory: records every call in order; ``on_read`` may
    act before a read is answered (kill the worker, say)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.calls: list[tuple[str, Any]] = []
        self.emitted: list[tuple[bytes, SstInfo]] = []
        self.restarts = 0
        self.on_read: Callable[[int], None] | None = None

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        assert root is None
        self.calls.append(("read", (name, start, end)))
        if self.on_read is not None:
            self.on_read(sum(1 for kind, _ in self.calls if kind == "read"))
        if name not in self.files:
            raise NotFoundError(f"{name} is not there", key=name)
        return self.files[name][start:end]

    def emit(self, data: bytes, info: SstInfo) -> None:
        self.calls.append(("emit", len(data)))
        self.emitted.append((data, info))

    def restart(self) -> None:
        self.restarts += 1
        self.emitted = []


def with_value(*fields: Any) -> LedgerValue:
    """A ledger value carrying its object's value (a seventh field, as small values do)."""
    value: LedgerValue = tuple.__new__(LedgerValue, fields)
    return value


def inputs(seed: int) -> tuple[list[compute.SstInput], list[compute.SstInput]]:
    """Overlapping sources (as L0 files: newer SQNs, some tombstones, expiries and bulk-loaded
    SQN bases) and key-ordered targets, each a few KB to tens of KB."""
    rng = random.Random(seed)
    sources: list[compute.SstInput] = []
    for n in range(4):
        keys = sorted(rng.sample(range(3_000), 400))
        rows = [
            (
                object_key(b"b", b"k%05d" % k),
                with_value(
                    50_000 - n * 1_000 + i,
                    TOMBSTONE if rng.random() < 0.1 else ACTIVE,
                    rng.choice([None, 5, 10**13]),
                    k,
                    100,
                    0,
                    rng.randbytes(100),
                ),
            )
            for i, k in enumerate(keys)
        ]
        data, _ = build_sst(rows, block_size=512)
        sources.append((f"ledger/source-{n}.sst", data, 0))
    targets: list[compute.SstInput] = []
    for part in range(3):
        rows = [
            (object_key(b"b", b"k%05d" % k), with_value(k + 1, ACTIVE, None, k, 100, 0, b"t" * 90))
            for k in range(part * 1_000, part * 1_000 + 1_000, 2)
        ]
        data, _ = build_sst(rows, block_size=512)
        targets.append((f"ledger/target-{part}.sst", data, 7 if part == 1 else 0))
    return sources, targets


def streamed(
    workers: int,
    sources: list[compute.SstInput],
    targets: list[compute.SstInput],
    *,
    basement: bool,
    chunk: int,
    host: RecordingHost | None = None,
    paths: dict[str, str] | None = None,
) -> RecordingHost:
    """``merge`` over inputs served by a recording host; those named in ``paths`` are local files
    the job may read itself."""

    def local(name: str) -> str | None:
        return None if paths is None else paths.get(name)

    files = {name: data for name, data, _ in (*sources, *targets)}
    host = host or RecordingHost(files)
    count = compute.merge(
        workers,
        [(name, None, len(data), base, local(name)) for name, data, base in sources],
        [(name, None, len(data), base, local(name)) for name, data, base in targets],
        basement=basement,
        now_ms=1_000,
        shape=SHAPE,
        host=host,
        read_chunk=chunk,
    )
    assert count == len(host.emitted)
    return host


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("chunk", [700, 4096, compute.READ_CHUNK])
def test_a_merge_through_its_host_writes_the_bytes_of_the_whole_input_merge(
    workers: int, chunk: int
) -> None:
    """The oracle is the merge of inputs held whole (``merge_ssts``, in this thread): the same
    files, byte for byte, in the same order, whatever the read run and wherever it runs."""
    for seed, basement in ((1, False), (2, True)):
        sources, targets = inputs(seed)
        expected = compute.merge_ssts(sources, targets, basement, 1_000, SHAPE)
        host = streamed(workers, sources, targets, basement=basement, chunk=chunk)
        assert len(expected) > 3
        assert [data for data, _ in host.emitted] == [data for data, _ in expected]
        assert [info for _, info in host.emitted] == [info for _, info in expected]
        assert host.restarts == 0


def test_a_merge_reads_runs_of_its_chunk_and_hands_over_outputs_while_it_reads() -> None:
    sources, targets = inputs(3)
    chunk = 2048
    host = streamed(1, sources, targets, basement=False, chunk=chunk)
    reads = [args for kind, args in host.calls if kind == "read"]
    emits = [i for i, (kind, _) in enumerate(host.calls) if kind == "emit"]
    sizes = {name: len(data) for name, data, _ in (*sources, *targets)}
    for name, start, end in reads:
        assert 0 <= start < end <= sizes[name]
        # a run is the chunk or less; only a file's tail (index, bloom, meta) may be longer
        assert end - start <= chunk or end == sizes[name]
    assert len(reads) > sum(sizes.values()) // chunk  # nothing was read whole in one go
    # outputs come as they are built, long before the last input run is read
    last_read = max(i for i, (kind, _) in enumerate(host.calls) if kind == "read")
    assert len(emits) > 3 and emits[0] < last_read
    # the targets are read one after another: a target's runs never interleave with another's
    order = [name for name, _, _ in reads if "target" in name]
    assert order == sorted(order)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_host_error_is_the_merges_error_and_the_worker_stays(workers: int) -> None:
    sources, targets = inputs(4)
    files = {name: data for name, data, _ in (*sources, *targets)}
    del files[targets[1][0]]  # gone from the store after some outputs were handed over
    host = RecordingHost(files)
    with pytest.raises(NotFoundError) as raised:
        streamed(workers, sources, targets, basement=False, chunk=4096, host=host)
    assert raised.value.key == targets[1][0]  # the host's own exception, not a copy's text
    assert host.emitted  # the caller drops these (its own restart)
    if workers:
        alive = list(compute._pool._all)
        again = streamed(workers, sources[:1], [], basement=False, chunk=4096)
        assert again.emitted and compute._pool._all == alive  # the same worker served it


def test_a_worker_killed_mid_merge_is_replaced_and_the_merge_reruns_here() -> None:
    sources, targets = inputs(5)
    expected = compute.merge_ssts(sources, targets, False, 1_000, SHAPE)
    files = {name: data for name, data, _ in (*sources, *targets)}
    host = RecordingHost(files)
    killed: list[compute._Worker] = []

    def kill_on_read(count: int) -> None:
        if count == 20 and not killed:
            assert host.emitted  # some outputs were handed over already
            busy = [w for w in compute._pool._all if w not in compute._pool._idle]
            assert len(busy) == 1
            os.kill(busy[0].process.pid, signal.SIGKILL)
            busy[0].process.wait(timeout=30)
            killed.append(busy[0])

    host.on_read = kill_on_read
    streamed(1, sources, targets, basement=False, chunk=4096, host=host)
    assert killed and host.restarts == 1
    assert [data for data, _ in host.emitted] == [data for data, _ in expected]
    assert killed[0] not in compute._pool._all
    again = streamed(1, sources, targets, basement=False, chunk=4096)  # a fresh worker serves
    assert [data for data, _ in again.emitted] == [data for data, _ in expected]


@pytest.mark.parametrize("workers", [0, 1])
def test_inputs_that_are_local_files_are_read_by_the_job_itself(
    workers: int, tmp_path: Path
) -> None:
    """No round trip to the host for them, the same files out; a local file that is gone or
    short is read through the host instead (which knows what is wrong with it)."""
    sources, targets = inputs(6)
    expected = compute.merge_ssts(sources, targets, False, 1_000, SHAPE)
    paths: dict[str, str] = {}
    for name, data, _ in (*sources, *targets):
        path = tmp_path / name.replace("/", "_")
        path.write_bytes(data)
        paths[name] = str(path)
    host = streamed(workers, sources, targets, basement=False, chunk=4096, paths=paths)
    assert [data for data, _ in host.emitted] == [data for data, _ in expected]
    assert not [args for kind, args in host.calls if kind == "read"]
    gone, short = sources[1][0], targets[0][0]
    os.unlink(paths[gone])
    Path(paths[short]).write_bytes(dict((n, d) for n, d, _ in targets)[short][:-100])
    host = streamed(workers, sources, targets, basement=False, chunk=4096, paths=paths)
    assert [data for data, _ in host.emitted] == [data for data, _ in expected]
    assert {args[0] for kind, args in host.calls if kind == "read"} == {gone, short}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_GETPIPE_SZ is Linux's")
def test_a_workers_pipes_are_widened() -> None:
    import fcntl

    worker = compute._Worker()
    try:
        assert worker.call("encode_journal", ([], 1))
        for pipe in (worker.process.stdin, worker.process.stdout):
            assert pipe is not None
            assert fcntl.fcntl(pipe.fileno(), 1032) >= compute.PIPE_BYTES  # F_GETPIPE_SZ
    finally:
        worker.close()


def test_large_bytes_travel_out_of_band_and_arrive_as_the_receivers_own_objects() -> None:
    big = bytes(range(256)) * 1024
    small = b"x" * 100
    reader, writer = os.pipe()
    with os.fdopen(writer, "wb") as out, os.fdopen(reader, "rb") as into:
        message = ("call", "emit", (big, small, [big]))
        thread = threading.Thread(target=compute._send, args=(out, message))
        thread.start()
        got = compute._receive(into)
        thread.join()
    assert got == message
    assert got[2][0] is not big  # a new object, read straight from the pipe
