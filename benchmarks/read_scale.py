"""The reads of ``inkpen bench --scale`` over a database it already loaded, without a new load.

``inkpen bench --scale`` loads each N afresh (about ten minutes at 5,000,000); this runs only
its read steps over an existing database that a scale run left (``--root``): open the writer,
then ``get`` (1 thread), ``get16`` (16 threads, another sample), ``get_warm`` (a third sample),
``scan`` and ``limit`` (random 4 KiB ``pread`` calls over the database's own files from 1 and 16
threads), each printed as one JSON line in the scale run's shape, with the same samples
(``inkpen.cli.scale``).

The database is opened as a writer, so point it at a copy (``cp -a DB COPY``), never at one
other processes read. Every value must be the scale load's one value; it is read once first
and every get and row is checked against it.

How warm the files are decides the figures: ``--cold`` drops the database's files from the
page cache (``posix_fadvise(DONTNEED)``, which needs no privilege) before each step, so that
runs compare alike; without it the files are as earlier readers left them, which the ``limit``
line measures.

Run: ``python benchmarks/read_scale.py DB --n 5000000 [--steps get,get16,get_warm,scan,limit]
[--cold] [--profile get] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import inkpen
from inkpen.cli.bench import BUCKET
from inkpen.cli.limits import io_per_op, process_io
from inkpen.cli.scale import GET16_SEED, GET_THREADS, WARM_SEED, _limit, _other_sample
from inkpen.cli.workloads import (
    Timing,
    bench_keys,
    get_sample,
    run_gets,
    run_gets_threaded,
    run_scan,
)
from inkpen.objectstore import CountingStore, open_store

STEPS = ("get", "get16", "get_warm", "scan", "limit")


def drop_page_cache(root: str) -> None:
    """Ask the kernel to drop the cached pages of every file under ``root``."""
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "root", help="a database a scale run loaded (a copy: it is opened to write)"
    )
    parser.add_argument("--n", type=int, required=True, help="the N the scale run loaded")
    parser.add_argument("--gets", type=int, default=20_000)
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each step")
    parser.add_argument("--repeat", type=int, default=1, help="run the steps this many times")
    parser.add_argument(
        "--profile", default="", help="a step to run under pyinstrument (printed to stderr)"
    )
    parser.add_argument("--option", action="append", default=[], help="NAME=INT for inkpen.open")
    args = parser.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    unknown = set(steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}; choose from {','.join(STEPS)}")
    options: dict[str, Any] = {"flush_policy": "interval", "flush_interval": 10}
    for item in args.option:
        name, _, value = item.partition("=")
        options[name] = int(value)
    keys = bench_keys(args.n)
    store = CountingStore(open_store(args.root))
    started = time.perf_counter()
    book = inkpen.open(store, **options)
    emit({"workload": "open", "open_s": round(time.perf_counter() - started, 3)})
    try:
        value = book.get(BUCKET, keys[0])
        if value is None:
            raise SystemExit(f"{keys[0]!r} is not in {args.root}: is --n the N it was loaded with?")
        book.compact_ledger()
        out: dict[str, dict[str, Any]] = {}
        runs: dict[str, Callable[[], Timing]] = {
            "get": lambda: run_gets(book, BUCKET, get_sample(keys, args.gets), value),
            "get16": lambda: run_gets_threaded(
                book, BUCKET, _other_sample(keys, args.gets, GET16_SEED), value, GET_THREADS
            ),
            "get_warm": lambda: run_gets(
                book, BUCKET, _other_sample(keys, args.gets, WARM_SEED), value
            ),
            "scan": lambda: run_scan(_BenchKeysOnly(book), BUCKET, value, args.n),
        }
        for round_ in range(args.repeat):
            for step in steps:
                if args.cold:
                    drop_page_cache(args.root)
                if step == "limit":
                    emit({"workload": "limit", "round": round_, **_limit(args.root, out)})
                    continue
                before, io_before = store.snapshot(), process_io()
                cpu_before = time.process_time()
                sys_before = os.times().system
                switches_before = _switches()
                timing = _profiled(runs[step]) if step == args.profile else runs[step]()
                cpu = time.process_time() - cpu_before
                system = os.times().system - sys_before
                switches = _switches() - switches_before
                after, io_after = store.snapshot(), process_io()
                ops = max(1, timing.ops)
                record = {
                    "workload": step,
                    "round": round_,
                    **timing.figures(),
                    "reads_per_op": round((after["gets"] - before["gets"]) / ops, 3),
                    "bytes_read_per_op": round(
                        (after["bytes_read"] - before["bytes_read"]) / ops, 1
                    ),
                    **io_per_op(io_before, io_after, ops),
                    "cpu_us_per_op": round(cpu / ops * 1e6, 2),
                    "system_us_per_op": round(system / ops * 1e6, 2),
                    "switches_per_op": round(switches / ops, 3),
                    "load_avg": round(os.getloadavg()[0], 2),
                }
                out[step] = record
                emit(record)
    finally:
        book.close()
    return 0


class _BenchKeysOnly:
    """A Bookie whose ``objects`` folds the load's keys alone: the scale run's kill step left
    other keys (with other values) after them."""

    def __init__(self, book: Any) -> None:
        self._book = book

    def objects(self, bucket: bytes) -> Any:
        return self._book.objects(bucket, b"key", b"key9999999999999")


def _switches() -> int:
    """This process's context switches so far (every thread; voluntary and not): a thread
    that waits for the interpreter lock or a lock is switched out."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def _profiled(run: Callable[[], Timing]) -> Timing:
    from pyinstrument import Profiler  # the bench extra

    profiler = Profiler(interval=0.0002)
    profiler.start()
    try:
        return run()
    finally:
        profiler.stop()
        sys.stderr.write(profiler.output_text(unicode=False, color=False, show_all=False))


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    sys.exit(main())
