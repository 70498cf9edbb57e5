"""``inkpen bench --scale``: how cost grows with N, measured for several N in one run.

For each N (default 100,000 and 5,000,000) on a fresh database, the protocol's workloads plus
what only shows at scale, each printed as one JSON line (``workload`` names the part):

- ``load``: throughput per second of the run (``per_second``; ``stalls`` counts the seconds after
  the first :data:`WARMUP_S` below 20% of the median second), put latency p50 / p99 / max, and
  the peak resident memory of the writer process and of every process it started
  (``peak_rss_mb``, ``worker_peak_rss_mb``; Linux's ``VmHWM``, reset at the start of each N);
- ``close``: the time of the clean close, then the bytes and objects on the store
  (``store_bytes``, ``store_objects``) against ``N x (key + value)`` (``store_ratio``);
- ``open``: the time of an open after that clean close;
- ``settle``: the time the reopened writer takes to finish the merges the load left due
  (``compact_ledger``) and its first GC pass (``settle_s``): reads during it share the machine
  with them, so the reads below start after it;
- ``get`` (1 thread) and ``get16`` (16 threads, another sample): cold reads after the reopen,
  with ``bytes_read_per_op`` and ``reads_per_op`` from the counting store; ``get_warm``: one
  thread again, a third sample, once the 2 x ``--gets`` reads before it have filled the caches
  with what they could;
- ``scan``: one full pass in key order, with bytes and reads per row;
- each read line also has ``os_reads_per_op`` and ``os_bytes_per_op``, the process's own read
  calls and bytes per operation (``/proc/self/io``, whatever made them), beside the store's
  counts;
- ``limit`` (a local directory store): random 4 KiB ``pread`` calls per second over the
  database's own files from 1 and 16 threads (:mod:`inkpen.cli.limits`), and ``get_to_pread`` /
  ``get16_to_pread``, the gets' rates against them; the same over the ledger's files alone
  (``ledger_pread_1_per_s``, ``get_to_ledger_pread``, ...), which is all a get of a value the
  ledger keeps reads;
- ``kill``: a child process opens the database, loads :data:`KILL_PUTS` more objects and is
  killed with SIGKILL part way; ``open_s`` is the next open's time, and every put the child saw
  acknowledged is checked to be there (``acked``).

A final ``ratios`` line divides each figure at every N by the same figure at the first N (the
ratios inside one run are what hold on a shared machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import click

import inkpen
from inkpen.manifest.paths import LEDGER_PREFIX
from inkpen.objectstore import CountingStore, ObjectStore
from inkpen.objectstore.local import LocalStore

from .bench_plot import Series
from .limits import READ_BYTES, io_per_op, pread_rate, process_io
from .workloads import (
    BenchmarkFailed,
    Timing,
    bench_keys,
    get_sample,
    run_gets,
    run_gets_threaded,
    run_load,
    run_scan,
)

WARMUP_S = 10
STALL_FRACTION = 0.2
GET_THREADS = 16
GET16_SEED = 3
WARM_SEED = 4
KILL_PUTS = 20_000
KILL_AFTER = 5_000
"""The child is killed once it has seen this many of its puts acknowledged."""
KILL_CLIENTS = 64
KEY_BYTES = 16
RATIO_FIGURES = (
    ("load", "ops_per_s"),
    ("load", "max_ms"),
    ("load", "peak_rss_mb"),
    ("close", "store_ratio"),
    ("open", "open_s"),
    ("get", "ops_per_s"),
    ("get", "bytes_read_per_op"),
    ("get16", "ops_per_s"),
    ("get_warm", "ops_per_s"),
    ("get_warm", "bytes_read_per_op"),
    ("scan", "ops_per_s"),
    ("scan", "bytes_read_per_op"),
    ("kill", "open_s"),
    ("limit", "get_to_pread"),
    ("limit", "get16_to_pread"),
    ("limit", "get_to_ledger_pread"),
)


def _emit(record: dict[str, Any]) -> None:
    click.echo(json.dumps(record), nl=True)


def reset_peak_rss() -> None:
    """Start this process's peak resident memory afresh (Linux; elsewhere nothing happens)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_of(pid: int | str = "self") -> float:
    """Peak resident memory of process ``pid`` in MiB (``VmHWM``), or -1 if unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    if pid == "self":
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    return -1.0


def child_pids() -> list[int]:
    """The processes this one started that are still running (Linux)."""
    pids: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        return []
    return pids


def stalls(per_second: Sequence[int]) -> tuple[int, int]:
    """(median ops per second, seconds after the warm-up below 20% of it); the last, partial
    second is left out."""
    whole = list(per_second[:-1]) or list(per_second)
    median = int(statistics.median(whole)) if whole else 0
    low = sum(1 for ops in whole[WARMUP_S:] if ops < STALL_FRACTION * median)
    return median, low


def store_usage(store: ObjectStore) -> tuple[int, int]:
    """(bytes, objects) on the store."""
    size = count = 0
    for info in store.list(""):
        size += info.size
        count += 1
    return size, count


def run_scale(
    open_store_for: Callable[[], contextlib.AbstractContextManager[ObjectStore]],
    counts: Sequence[int],
    options: dict[str, Any],
    value_size: int,
    concurrency: int,
    gets: int,
    common: dict[str, Any],
    bucket: bytes,
    *,
    series: list[Series] | None = None,
) -> None:
    """Every N of ``counts`` on a fresh store from ``open_store_for()`` (a context manager);
    each timed phase's :class:`~inkpen.cli.bench_plot.Series` is added to ``series``."""
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for n in counts:
        with open_store_for() as inner:
            results[n] = _one_scale(
                CountingStore(inner),
                n,
                options,
                value_size,
                concurrency,
                gets,
                common,
                bucket,
                series,
            )
    first = counts[0]
    ratios: dict[str, dict[str, float | None]] = {}
    for n in counts[1:]:
        row: dict[str, float | None] = {}
        for workload, figure in RATIO_FIGURES:
            base = results[first][workload].get(figure)
            here = results[n][workload].get(figure)
            ok = isinstance(base, int | float) and isinstance(here, int | float) and base
            row[f"{workload}.{figure}"] = round(here / base, 3) if ok else None  # type: ignore[operator]
        ratios[str(n)] = row
    _emit({**common, "workload": "ratios", "base_n": first, "ratios": ratios})


def _one_scale(
    store: CountingStore,
    n: int,
    options: dict[str, Any],
    value_size: int,
    concurrency: int,
    gets: int,
    common: dict[str, Any],
    bucket: bytes,
    series: list[Series] | None = None,
) -> dict[str, dict[str, Any]]:
    """One N on a fresh store: each phase in turn, its line printed; answers the lines by
    workload."""
    keys = bench_keys(n)
    value = os.urandom(value_size)
    run = _ScaleRun(store, n, common, series)
    reset_peak_rss()
    book = inkpen.open(store, **options)
    _load_phase(run, book, bucket, keys, value, concurrency)
    _close_phase(run, book, value_size)
    book = _open_phase(run, options)
    try:
        _settle_phase(run, book)
        _read_phases(run, book, bucket, keys, value, gets)
        if isinstance(store.inner, LocalStore):
            run.report("limit", _limit(store.inner.root, run.out))
    finally:
        book.close()
    run.report("kill", _kill_during_load(store, options, value_size, bucket))
    return run.out


class _ScaleRun:
    """One N's phases: prints each phase's line and keeps it (``out``), adds each timed phase
    to the plot's series, and measures a read phase's requests and the process's reads."""

    def __init__(
        self, store: CountingStore, n: int, common: dict[str, Any], series: list[Series] | None
    ) -> None:
        self.store = store
        self.n = n
        self.common = common
        self.series = series
        self.out: dict[str, dict[str, Any]] = {}
        self._origin: float | None = None
        self._io_before: dict[str, int] = {}

    def report(self, workload: str, record: dict[str, Any]) -> None:
        line = {**self.common, "n": self.n, "workload": workload, **record}
        self.out[workload] = line
        _emit(line)

    def timed(self, workload: str, timing: Timing) -> Timing:
        if self.series is not None:
            if self._origin is None:
                self._origin = timing.started
            self.series.append(Series.of(f"N={self.n:,}", workload, timing, self._origin))
        return timing

    def measuring(self) -> dict[str, int]:
        """Start measuring a read phase: the store's counts now (and the process's I/O)."""
        self._io_before = process_io()
        return self.store.snapshot()

    def reads(self, timing: Timing, before: dict[str, int]) -> dict[str, Any]:
        """A read phase's line: its figures and the reads it made, in all and per operation."""
        counted = _delta(self.store.snapshot(), before)
        ops = max(1, timing.ops)
        return {
            **timing.figures(),
            "max_ms": round(timing.latencies.max * 1e3, 3) if timing.latencies else None,
            "bytes_read": counted["bytes_read"],
            "reads": counted["gets"],
            "bytes_read_per_op": round(counted["bytes_read"] / ops, 1),
            "reads_per_op": round(counted["gets"] / ops, 3),
            **io_per_op(self._io_before, process_io(), ops),
        }


def _load_phase(
    run: _ScaleRun,
    book: inkpen.Bookie,
    bucket: bytes,
    keys: Sequence[bytes],
    value: bytes,
    concurrency: int,
) -> None:
    """``load``: N puts from ``concurrency`` clients, with stalls and peak memory."""
    before = run.store.snapshot()
    with _sampling_workers() as workers:
        timing = run.timed("load", run_load(book, bucket, keys, value, concurrency))
    median, low = stalls(timing.per_second)
    counted = _delta(run.store.snapshot(), before)
    run.report(
        "load",
        {
            **timing.figures(),
            "median_per_s": median,
            "stalls": low,
            "min_per_s_after_warmup": min(timing.per_second[WARMUP_S:-1], default=None),
            "per_second": list(timing.per_second),
            "peak_rss_mb": peak_rss_of(),
            "worker_peak_rss_mb": sorted(workers.values(), reverse=True),
            "puts": counted["puts"],
            "bytes_written": counted["bytes_written"],
        },
    )


@contextlib.contextmanager
def _sampling_workers() -> Iterator[dict[int, float]]:
    """The peak resident memory of each process this one starts during the block, by pid (a
    worker's ``VmHWM``, read every half second while it runs)."""
    workers: dict[int, float] = {}
    sampling = threading.Event()

    def sample_workers() -> None:
        while not sampling.wait(0.5):
            for pid in child_pids():
                workers[pid] = max(workers.get(pid, 0.0), peak_rss_of(pid))

    sampler = threading.Thread(target=sample_workers, name="bench-rss", daemon=True)
    sampler.start()
    try:
        yield workers
    finally:
        sampling.set()
        sampler.join()


def _close_phase(run: _ScaleRun, book: inkpen.Bookie, value_size: int) -> None:
    """``close``: the clean close's time, then the bytes and objects on the store."""
    started = time.perf_counter()
    book.close()
    close_s = time.perf_counter() - started
    size, objects = store_usage(run.store)
    run.report(
        "close",
        {
            "close_s": round(close_s, 3),
            "store_bytes": size,
            "store_objects": objects,
            "store_ratio": round(size / (run.n * (KEY_BYTES + value_size)), 3),
        },
    )


def _open_phase(run: _ScaleRun, options: dict[str, Any]) -> inkpen.Bookie:
    """``open``: the time of an open after the clean close; answers the open Bookie."""
    started = time.perf_counter()
    book = inkpen.open(run.store, **options)
    run.report("open", {"open_s": round(time.perf_counter() - started, 3)})
    return book


def _settle_phase(run: _ScaleRun, book: inkpen.Bookie) -> None:
    """``settle``: the merges the load left due and the first GC pass, before any read."""
    started = time.perf_counter()
    book.compact_ledger()
    book.run_gc()  # after the pass the open started: the store is as the load left it
    run.report("settle", {"settle_s": round(time.perf_counter() - started, 3)})


def _read_phases(
    run: _ScaleRun,
    book: inkpen.Bookie,
    bucket: bytes,
    keys: Sequence[bytes],
    value: bytes,
    gets: int,
) -> None:
    """``get``, ``get16``, ``get_warm`` and ``scan``, each on its own sample of the keys."""
    before = run.measuring()
    timing = run.timed("get", run_gets(book, bucket, get_sample(keys, gets), value))
    run.report("get", run.reads(timing, before))
    before = run.measuring()
    sample = _other_sample(keys, gets)
    timing = run.timed("get16", run_gets_threaded(book, bucket, sample, value, GET_THREADS))
    run.report("get16", {**run.reads(timing, before), "threads": GET_THREADS})
    before = run.measuring()
    timing = run.timed(
        "get_warm", run_gets(book, bucket, _other_sample(keys, gets, WARM_SEED), value)
    )
    run.report("get_warm", run.reads(timing, before))
    before = run.measuring()
    timing = run.timed("scan", run_scan(book, bucket, value, run.n))
    run.report("scan", run.reads(timing, before))


def _limit(root: str, out: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The machine's random 4 KiB ``pread`` rate over the database's files, from 1 thread and
    from :data:`GET_THREADS`, and the gets' rates against it (``get`` and ``get16``); then the
    same over the ledger's files alone (``ledger_pread_*``, ``*_to_ledger_pread``): a get of a
    value the ledger keeps reads nothing else, and the ledger may sit in the page cache while
    the journal, most of the bytes, does not."""
    record: dict[str, Any] = {"read_bytes": READ_BYTES}
    for label, where in (("", root), ("ledger_", os.path.join(root, LEDGER_PREFIX.rstrip("/")))):
        for threads, workload in ((1, "get"), (GET_THREADS, "get16")):
            # Each pass reads its own offsets: the same ones would find the pages the pass
            # before it just brought into the page cache.
            rate = pread_rate(where, threads, seed=threads + (1000 if label else 0))
            record[f"{label}pread_{threads}_per_s"] = None if rate is None else round(rate, 1)
            got = out.get(workload, {}).get("ops_per_s")
            ratio = None if rate is None or not isinstance(got, int | float) else got / rate
            record[f"{workload}_to_{label}pread"] = None if ratio is None else round(ratio, 3)
    return record


def _other_sample(keys: Sequence[bytes], count: int, seed: int = 0) -> list[bytes]:
    import random

    return random.Random(seed or GET16_SEED).sample(keys, min(count, len(keys)))


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in after}


def _kill_during_load(
    store: CountingStore, options: dict[str, Any], value_size: int, bucket: bytes
) -> dict[str, Any]:
    """Load more in a child process, SIGKILL it part way, time the next open, check the acked."""
    acked = kill_loading_child(store.url, options, value_size, bucket)
    started = time.perf_counter()
    book = inkpen.open(store, **options)
    open_s = time.perf_counter() - started
    try:
        check_acked(book, bucket, acked)
    finally:
        book.close()
    return {"open_s": round(open_s, 3), "acked": len(acked)}


def kill_loading_child(
    url: str, options: dict[str, Any], value_size: int, bucket: bytes
) -> list[bytes]:
    """Start a child process loading into the database at ``url`` (:func:`load_until_killed`),
    SIGKILL it once it has seen :data:`KILL_AFTER` puts acknowledged; the keys it saw
    acknowledged."""
    command = [
        sys.executable,
        "-c",
        "import sys; from inkpen.cli.scale import load_until_killed as run; "
        "run(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].encode())",
        url,
        json.dumps(options),
        str(value_size),
        bucket.decode(),
    ]
    env = {**os.environ, "PYTHONSAFEPATH": "1"}  # the current directory never shadows inkpen
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    acked: list[bytes] = []
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if line.startswith("acked "):
                acked.extend(k.encode() for k in line.split()[1:])
                if len(acked) >= KILL_AFTER:
                    break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    if len(acked) < KILL_AFTER:
        raise BenchmarkFailed(
            f"the child loading before the SIGKILL stopped after {len(acked)} acknowledged "
            f"puts (exit status {child.returncode})"
        )
    return acked


def check_acked(book: inkpen.Bookie, bucket: bytes, acked: Sequence[bytes]) -> None:
    """Every put the killed child saw acknowledged must be there (read with ``get_many``, which
    batches its store reads)."""
    missing = [k for k, got in zip(acked, book.get_many(bucket, acked), strict=True) if got is None]
    if missing:
        raise BenchmarkFailed(f"{len(missing)} acknowledged puts were lost, e.g. {missing[0]!r}")


def load_until_killed(url: str, options_json: str, value_size: int, bucket: bytes) -> None:
    """The loading child of the kill test: prints ``acked <key> ...`` as its puts are durable."""
    value = os.urandom(value_size)
    book = inkpen.open(url, **json.loads(options_json))
    lock = threading.Lock()
    keys = [b"killed%010d" % i for i in range(KILL_PUTS)]

    def client(share: Sequence[bytes]) -> None:
        for key in share:
            book.put(bucket, key, value)
            with lock:
                sys.stdout.write(f"acked {key.decode()}\n")
                sys.stdout.flush()

    threads = [
        threading.Thread(target=client, args=(keys[i::KILL_CLIENTS],), daemon=True)
        for i in range(KILL_CLIENTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    book.close()
