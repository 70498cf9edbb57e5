"""CPU per operation beside RocksDB (rocksdict) on a local directory, in one run.

The protocol of the peer harness ``rocksdict_bench.py --engine rocksdb --mode group`` (WORKLOADS.md,
CPU section), run for both systems from this one script, each in a process of its own:

- ``load``: N keys ``key%013d`` shuffled with ``Random(1)``, one ``os.urandom(value_size)`` value,
  ``--concurrency`` client threads (256), a group commit every ``--flush-ms`` (10 ms) on both
  sides, every put durable on return (RocksDB: a Python committer writing a ``WriteBatch`` with
  ``sync``, as the peer harness does; inkpen: ``flush_policy="interval"``);
- the database is closed and opened again; then, from one thread, ``get``: ``--gets`` keys
  sampled with ``Random(2)`` (the first pass, after the reopen), ``get_cached``: the same keys
  again (everything cached), ``get_many``: the same keys 100 a call (RocksDB: ``Rdict.get`` of
  the list), ``head`` (inkpen alone), ``scan``: every key and value in key order (RocksDB: its
  iterator, as the harness walks it), ``keys``: every key in key order (RocksDB: the iterator's
  keys); ``index_query``: (inkpen alone) one query over an index bucket of N / 10 objects, one
  index entry each, loaded in batches of 1,000.

Each line is a JSON object with ``ops``, ``seconds``, ``ops_per_s``, ``cpu_us_per_op``: the
process's CPU (every thread, the writer's and merges' included) over the operations, taken with
``time.process_time``, and ``thread_us_per_op``: the calling thread's alone (``time.thread_time``;
for the one-thread reads, what the read path costs without merges still running beside it). A
table then gives each workload's figures and the ratio of inkpen's throughput to RocksDB's
(above 1: inkpen is faster).

``--tree NAME=DIR`` (repeatable) runs inkpen once per checkout, each in a process importing inkpen
from DIR (run a checkout of the code before a change beside the current one); RocksDB runs once.
``--rounds R`` repeats every system R times, alternating, and keeps each workload's best
throughput and lowest CPU. Needs ``pip install rocksdict`` (in the ``dev`` extra).

Run: ``python benchmarks/cpu_vs_rocksdb.py --n 100000 [--tree before=/tmp/old --tree after=.]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

BUCKET = b"bench"
INDEX_BUCKET = b"indexed"
MANY = 100
"""Keys a ``get_many`` call asks for."""
INDEX_BATCH = 1_000
WORKLOADS = ("load", "get", "get_cached", "get_many", "head", "scan", "keys", "index_query")


def keys_for(n: int, seed: int = 1) -> list[bytes]:
    keys = [b"key%013d" % i for i in range(n)]
    random.Random(seed).shuffle(keys)
    return keys


def emit(workload: str, ops: int, timed: Timed, **extra: Any) -> None:
    print(
        json.dumps(
            {
                "workload": workload,
                "ops": ops,
                "seconds": round(timed.seconds, 4),
                "ops_per_s": round(ops / timed.seconds, 1),
                "cpu_us_per_op": round(timed.cpu / ops * 1e6, 2),
                "thread_us_per_op": round(timed.thread / ops * 1e6, 2),
                **extra,
            }
        ),
        flush=True,
    )


class Timed:
    """Wall seconds, process CPU seconds (every thread) and the calling thread's CPU seconds of
    a block."""

    def __enter__(self) -> Timed:
        self.cpu = time.process_time()
        self.thread = time.thread_time()
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.thread = time.thread_time() - self.thread


def run_clients(
    put: Callable[[bytes, bytes], None], keys: Sequence[bytes], value: bytes, concurrency: int
) -> None:
    """Put every key from ``concurrency`` threads, each put waiting until it is durable."""
    queue = list(reversed(keys))
    errors: list[BaseException] = []

    def client() -> None:
        while True:
            try:
                k = queue.pop()
            except IndexError:
                return
            try:
                put(k, value)
            except BaseException as exc:
                errors.append(exc)
                queue.clear()
                return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ---- RocksDB --------------------------------------------------------------------------------


class GroupCommitter:
    """The peer harness's group commit: clients enqueue (key, value, event); one thread writes
    whatever is queued as one durable batch at most once per interval, then releases them."""

    def __init__(self, write: Callable[[list[tuple[bytes, bytes]]], None], flush_s: float) -> None:
        self.write, self.flush_s = write, flush_s
        self.lock = threading.Lock()
        self.pending: list[tuple[bytes, bytes, threading.Event]] = []
        self.wake = threading.Event()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def put(self, k: bytes, v: bytes) -> None:
        ev = threading.Event()
        with self.lock:
            self.pending.append((k, v, ev))
        self.wake.set()
        ev.wait()

    def run(self) -> None:
        last = 0.0
        while True:
            self.wake.wait(0.1)
            self.wake.clear()
            with self.lock:
                empty = not self.pending
            if empty:
                if self.stop:
                    return
                continue
            delay = last + self.flush_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            with self.lock:
                batch, self.pending = self.pending, []
            last = time.perf_counter()
            self.write([(k, v) for k, v, _ in batch])
            for _, _, ev in batch:
                ev.set()

    def close(self) -> None:
        self.stop = True
        self.wake.set()
        self.thread.join()


def run_rocksdb(path: str, args: argparse.Namespace) -> None:
    import rocksdict as r

    def open_db() -> Any:
        opt = r.Options(raw_mode=True)
        opt.create_if_missing(True)
        return r.Rdict(path, opt)

    keys = keys_for(args.n)
    value = os.urandom(args.value_size)
    db = open_db()
    wo = r.WriteOptions()
    wo.sync = True

    def put_batch(items: list[tuple[bytes, bytes]]) -> None:
        wb = r.WriteBatch(raw_mode=True)
        for k, v in items:
            wb.put(k, v)
        db.write(wb, wo)

    with Timed() as t:
        gc = GroupCommitter(put_batch, args.flush_ms / 1000.0)
        run_clients(gc.put, keys, value, args.concurrency)
        gc.close()
    emit("load", args.n, t)
    db.close()
    db = open_db()
    sample = random.Random(2).sample(keys, min(args.gets, len(keys)))
    for name in ("get", "get_cached"):
        get = db.get
        with Timed() as t:
            for k in sample:
                if get(k) != value:
                    raise SystemExit(f"rocksdb: wrong value for {k!r}")
        emit(name, len(sample), t)
    with Timed() as t:
        for i in range(0, len(sample), MANY):
            if any(v != value for v in db.get(sample[i : i + MANY])):
                raise SystemExit("rocksdb: wrong value in a get of a list")
    emit("get_many", len(sample), t)
    with Timed() as t:
        n = 0
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            it.key()
            if it.value() != value:
                raise SystemExit("rocksdb: scan found a wrong value")
            n += 1
            it.next()
    if n != args.n:
        raise SystemExit(f"rocksdb: scan found {n} rows")
    emit("scan", n, t)
    with Timed() as t:
        n = 0
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            it.key()
            n += 1
            it.next()
    emit("keys", n, t)
    db.close()


# ---- inkpen ---------------------------------------------------------------------------------


def run_inkpen(path: str, args: argparse.Namespace) -> None:
    import inkpen

    options = {"flush_policy": "interval", "flush_interval": args.flush_ms / 1000.0}
    keys = keys_for(args.n)
    value = os.urandom(args.value_size)
    book = inkpen.open(path, **options)
    with Timed() as t:
        run_clients(lambda k, v: book.put(BUCKET, k, v), keys, value, args.concurrency)
    emit("load", args.n, t)
    indexed = keys[: max(1, args.n // 10)]
    for i in range(0, len(indexed), INDEX_BATCH):
        batch = inkpen.Batch()
        for k in indexed[i : i + INDEX_BATCH]:
            batch.put(INDEX_BUCKET, k, value, indexes=[("add", b"f", k)])
        book.write(batch)
    book.close()
    book = inkpen.open(path, **options)
    sample = random.Random(2).sample(keys, min(args.gets, len(keys)))
    for name in ("get", "get_cached"):
        get = book.get
        with Timed() as t:
            for k in sample:
                if get(BUCKET, k) != value:
                    raise SystemExit(f"inkpen: wrong value for {k!r}")
        emit(name, len(sample), t)
    with Timed() as t:
        for i in range(0, len(sample), MANY):
            if any(v != value for v in book.get_many(BUCKET, sample[i : i + MANY])):
                raise SystemExit("inkpen: wrong value in get_many")
    emit("get_many", len(sample), t)
    with Timed() as t:
        for k in sample:
            if book.head(BUCKET, k) is None:
                raise SystemExit(f"inkpen: no head for {k!r}")
    emit("head", len(sample), t)
    with Timed() as t:
        n = 0
        with book.objects(BUCKET) as rows:
            for _, _, got in rows:
                if got != value:
                    raise SystemExit("inkpen: scan found a wrong value")
                n += 1
    if n != args.n:
        raise SystemExit(f"inkpen: scan found {n} rows")
    emit("scan", n, t)
    with Timed() as t:
        n = sum(1 for _ in book.keys(BUCKET))
    emit("keys", n, t)
    with Timed() as t:
        n = sum(1 for _ in book.index_query(INDEX_BUCKET, b"f", b"", b"\xff"))
    if n != len(indexed):
        raise SystemExit(f"inkpen: index_query found {n} of {len(indexed)} entries")
    emit("index_query", n, t)
    book.close()


# ---- the comparison -------------------------------------------------------------------------


def child(system: str, args: argparse.Namespace) -> None:
    base = tempfile.mkdtemp(prefix=f"cpu-{system}-")
    try:
        (run_rocksdb if system == "rocksdb" else run_inkpen)(os.path.join(base, "db"), args)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_child(system: str, tree: str | None, argv: list[str]) -> Iterator[dict[str, Any]]:
    env = dict(os.environ)
    env.pop("PYTHONSAFEPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = os.path.abspath(tree)
    command = [sys.executable, os.path.abspath(__file__), *argv, "--system", system]
    done = subprocess.run(
        command, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the run of {system} ({tree}) failed")
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            yield json.loads(line)


def better(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    if old is None:
        return new
    return {
        **new,
        "ops_per_s": max(old["ops_per_s"], new["ops_per_s"]),
        "cpu_us_per_op": min(old["cpu_us_per_op"], new["cpu_us_per_op"]),
        "thread_us_per_op": min(old["thread_us_per_op"], new["thread_us_per_op"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--flush-ms", type=int, default=10)
    parser.add_argument("--gets", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR of a checkout")
    parser.add_argument("--system", choices=["inkpen", "rocksdb"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:
        child(args.system, args)
        return
    argv = ["--n", str(args.n), "--value-size", str(args.value_size)]
    argv += ["--concurrency", str(args.concurrency), "--flush-ms", str(args.flush_ms)]
    argv += ["--gets", str(args.gets)]
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("inkpen", ".")]
    systems: list[tuple[str, str, str | None]] = [("rocksdb", "rocksdb", None)]
    systems += [(name, "inkpen", tree) for name, tree in trees]
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for _ in range(args.rounds):
        for name, system, tree in systems:
            for record in run_child(system, tree, argv):
                record["system"] = name
                print(json.dumps(record), flush=True)
                key = (name, record["workload"])
                best[key] = better(best.get(key), record)
    names = [name for name, _, _ in systems]
    print(
        f"\nN = {args.n}, {args.value_size}-byte values; ops/s, CPU us an op (the process; the "
        "calling thread), ratio of ops/s to rocksdb"
    )
    print(f"{'workload':<12}" + "".join(f"{name:>40}" for name in names))
    for workload in WORKLOADS:
        peer = best.get(("rocksdb", workload))
        cells = []
        for name in names:
            found = best.get((name, workload))
            if found is None:
                cells.append(f"{'-':>40}")
                continue
            ratio = (
                ""
                if peer is None or name == "rocksdb"
                else (f" {found['ops_per_s'] / peer['ops_per_s']:.2f}x")
            )
            text = (
                f"{found['ops_per_s']:>11,.0f}/s {found['cpu_us_per_op']:>6.1f};"
                f"{found['thread_us_per_op']:>6.1f} us{ratio}"
            )
            cells.append(f"{text:>40}")
        print(f"{workload:<12}" + "".join(cells))


if __name__ == "__main__":
    main()
