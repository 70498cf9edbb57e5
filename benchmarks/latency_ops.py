"""The maintenance paths at a fixed latency per store request: close, open, backup and the rest.

Every store request is delayed (``FaultyStore`` with ``FaultPlan(delay=(low, high))``, 20 to 30 ms
by default) over a local directory, which stands in for an object store far away: what costs
here is the number of requests made one after another, not their bytes. One run, for each N:

- ``load``: N puts of 100-byte values (keys ``k%09d``) from ``--threads`` threads into a fresh
  database L (informative only; the puts are another part's);
- ``close``: closing L after it (the final roll, GC of the rolled segments);
- ``open_clean`` / ``close_idle``: opening L after that clean close, and closing it again;
- ``clone``: a clone of K, a database whose writer was killed with SIGKILL right after its N
  acknowledged puts (a child process loads it), taken before K is opened again (it copies K's
  unrolled segments);
- ``open_killed`` / ``close_recovered``: opening K (claim, fence, read the unrolled segments,
  replay) and closing it;
- ``hot_backup_bytes``: ``book.hot_backup()`` of L into an empty root on another filesystem
  (``--bytes-dir``, /dev/shm by default: every copy reads and writes the file's bytes, as between
  two stores), and ``copy_same_files_bytes``: one copy of each file the backup's manifest names,
  into another empty root there, with the concurrency the backup's copies use (the floor a
  backup can reach); their ratio is printed. ``hot_backup_linked`` and
  ``copy_same_files_linked`` do the same on L's filesystem, where a copy is a hard link (a
  server-side copy's stand-in);
- ``restore`` (B into an empty root), ``verify`` (L), ``gc`` (L, offline, ``min_age`` 0: a
  listing and a plan, nothing left to delete after the close), ``destroy`` (hard) of the clone,
  of the restore and of K.

Each step prints one JSON line: its seconds and the requests it made by kind (a ``delete_many``
request counts once). With ``--tree NAME=DIR`` (repeatable) the same steps run once per
checkout, each in a process of its own importing inkpen from DIR, alternating at each N, and a
table compares them: run a checkout of the code before a change beside the current one.

Run: ``python benchmarks/latency_ops.py --n 20000,200000 [--delay 0.02,0.03]
[--tree before=/path/to/old/checkout --tree after=.]``
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

BUCKET = "bench"
VALUE_BYTES = 100
S3_CONCURRENCY = 64
"""Requests a store far away is given at once (the S3 stores' connection pool): the delayed
local directory stands in for one."""


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class Bench:
    """The stores of one run: every store is a delayed local directory, all counted together."""

    def __init__(self, base: str, delay: tuple[float, float]) -> None:
        from inkpen.objectstore import CountingStore
        from inkpen.objectstore.counting import RequestCounts

        self.base = base
        self.delay = delay
        self.counts = RequestCounts()
        self._counting = CountingStore
        self._seed = 0

    def store(self, name: str, base: str | None = None) -> Any:
        from inkpen.objectstore import FaultPlan, FaultyStore
        from inkpen.objectstore.local import LocalStore

        self._seed += 1
        plan = FaultPlan(seed=self._seed, delay=self.delay)
        inner = LocalStore(os.path.join(self.base if base is None else base, name))
        if "concurrency" in inspect.signature(FaultyStore).parameters:
            faulty = FaultyStore(inner, plan, concurrency=S3_CONCURRENCY)  # type: ignore[call-arg]
        else:
            faulty = FaultyStore(inner, plan)
        return self._counting(faulty, counts=self.counts)

    @contextmanager
    def step(self, name: str, n: int, **extra: Any) -> Iterator[dict[str, Any]]:
        """Time the block and count its requests; print them as one JSON line."""
        before = self.counts.snapshot()
        out: dict[str, Any] = {}
        started = time.perf_counter()
        yield out
        seconds = time.perf_counter() - started
        after = self.counts.snapshot()
        requests = {k: after[k] - before[k] for k in after if not k.startswith("bytes")}
        _emit(
            step=name,
            n=n,
            seconds=round(seconds, 3),
            requests={k: v for k, v in requests.items() if v},
            **extra,
            **out,
        )


def load(book: Any, n: int, threads: int) -> None:
    """``n`` puts of fresh keys from ``threads`` threads."""
    value = os.urandom(VALUE_BYTES)
    counter = iter(range(n))
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            book.put(BUCKET, f"k{i:09d}", value)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def copy_file(dest: Any, source: Any, descriptor: Any) -> None:
    """One file copied as the backup copies it: ``dest.copy`` of it from ``source``."""
    dest.copy(descriptor.name, descriptor.name, source=source)


def copy_concurrency(store: Any) -> int:
    """How many copies a backup runs at once, in the code under test."""
    try:
        from inkpen.objectstore.parallel import concurrency  # type: ignore[import-not-found]
    except ImportError:
        from inkpen.manifest.copies import COPY_WORKERS

        return int(COPY_WORKERS)
    return int(concurrency(store))


def second_filesystem(base: str, candidate: str) -> str | None:
    """A scratch directory under ``candidate`` when it lies on another filesystem than ``base``
    (copies there go through the bytes, as between two stores), else None."""
    if not os.path.isdir(candidate) or os.stat(candidate).st_dev == os.stat(base).st_dev:
        return None
    return tempfile.mkdtemp(prefix="inkpen-latency-ops-", dir=candidate)


def run(n: int, threads: int, delay: tuple[float, float], keep: bool, bytes_dir: str) -> None:
    import inkpen
    from inkpen.cli.verify import pinned, plan_checks, run_checks
    from inkpen.manifest.clones import create_clone
    from inkpen.manifest.copies import copy_database
    from inkpen.manifest.destroy import destroy
    from inkpen.manifest.gc import GcOptions, run_gc
    from inkpen.manifest.store import ManifestStore

    base = tempfile.mkdtemp(prefix="inkpen-latency-ops-")
    bytes_base = second_filesystem(base, bytes_dir)
    bench = Bench(base, delay)
    try:
        # K: loaded by a child process that is killed with SIGKILL after its last put.
        started = time.perf_counter()
        child = [sys.executable, __file__, "--kill-load", os.path.join(base, "K")]
        child += ["--n", str(n), "--threads", str(threads), "--delay", f"{delay[0]},{delay[1]}"]
        subprocess.run(child, check=False)
        _emit(step="kill_load", n=n, seconds=round(time.perf_counter() - started, 3))

        lstore = bench.store("L")
        book = inkpen.open(lstore)
        with bench.step("load", n) as out:
            started = time.perf_counter()
            load(book, n, threads)
            out["puts_per_s"] = round(n / (time.perf_counter() - started))
        with bench.step("close", n):
            book.close()
        with bench.step("open_clean", n):
            book = inkpen.open(lstore)
        with bench.step("close_idle", n):
            book.close()

        kstore = bench.store("K")
        with bench.step("clone", n):
            create_clone(kstore, bench.store("CK"))
        with bench.step("open_killed", n):
            book = inkpen.open(kstore)
        with bench.step("close_recovered", n):
            book.close()

        book = inkpen.open(lstore)
        for mode, where in (("bytes", bytes_base), ("linked", None)):
            if mode == "bytes" and where is None:
                continue  # no second filesystem: every copy would be a hard link
            bstore = bench.store(f"B-{mode}", where)
            with bench.step(f"hot_backup_{mode}", n) as out:
                report = book.hot_backup()(bstore)
            out.update(files=report.files, files_copied=report.files_copied)
            if mode == "bytes" or bytes_base is None:
                backup = bstore  # what restore reads
            named = ManifestStore(bstore).latest()
            assert named is not None
            files = [*named.manifest.ledger.ssts(), *named.manifest.journal.files]
            cstore = bench.store(f"C-{mode}", where)
            workers = copy_concurrency(cstore)
            step = f"copy_same_files_{mode}"
            with bench.step(step, n, concurrency=workers, files=len(files)) as out:
                started = time.perf_counter()
                copy = functools.partial(copy_file, cstore, lstore)
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(copy, files))
                copy_seconds = time.perf_counter() - started
            _emit(
                step=f"backup_over_copy_{mode}",
                n=n,
                ratio=round(report.seconds / copy_seconds, 2) if copy_seconds else None,
            )
        book.close()

        rstore = bench.store("R")
        with bench.step("restore", n):
            copy_database(backup, rstore, fresh=True)
        with bench.step("verify", n) as out:
            manifests = ManifestStore(lstore)
            with pinned(manifests, None, False) as pin:
                plan = plan_checks(manifests, pin, list_tail=False)
                outcomes = run_checks(manifests, plan)
            out["objects"] = len(outcomes)
            out["ok"] = all(o.status.value == "ok" for o in outcomes)
        with bench.step("gc", n) as out:
            gc = run_gc(lstore, options=GcOptions(min_age=0.0, offline=True))
            out["deleted"] = len(gc.deleted)
        for name, target in (
            ("destroy_clone", bench.store("CK")),
            ("destroy_restore", rstore),
            ("destroy_k", kstore),
        ):
            with bench.step(name, n):
                destroy(target, soft=False)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
            if bytes_base is not None:
                shutil.rmtree(bytes_base, ignore_errors=True)


def kill_load(root: str, n: int, threads: int, delay: tuple[float, float]) -> None:
    """Load ``n`` puts into ``root`` and die by SIGKILL once they are acknowledged."""
    import inkpen

    bench = Bench(os.path.dirname(root), delay)
    book = inkpen.open(bench.store(os.path.basename(root)))
    load(book, n, threads)
    os.kill(os.getpid(), signal.SIGKILL)


def compare(trees: list[tuple[str, str]], ns: list[int], argv: list[str]) -> None:
    """Run the steps once per checkout (alternating at each N) and print a table."""
    rows: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for n in ns:
        for name, tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            env.pop("PYTHONSAFEPATH", None)
            command = [sys.executable, os.path.abspath(__file__), *argv, "--n", str(n)]
            done = subprocess.run(
                command, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True
            )
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-4000:])
                raise SystemExit(f"the run of {name} at N = {n} failed")
            for line in done.stdout.splitlines():
                if line.startswith("{"):
                    record = json.loads(line)
                    record["tree"] = name
                    print(json.dumps(record), flush=True)
                    rows.setdefault((n, record["step"]), {})[name] = record
    names = [name for name, _ in trees]
    print()
    print(f"{'N':>8} {'step':<18}" + "".join(f"{name:>30}" for name in names))
    for (n, step), found in rows.items():
        cells = []
        for name in names:
            record = found.get(name)
            if record is None:
                cells.append(f"{'-':>30}")
            elif "ratio" in record:
                cells.append(f"{record['ratio']!s:>30}")
            else:
                requests = record.get("requests", {})
                total = sum(requests.values())
                cells.append(f"{record['seconds']:>10.2f} s {total:>8} requests".rjust(30))
        print(f"{n:>8} {step:<18}" + "".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="20000", help="comma-separated numbers of puts")
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--delay", default="0.02,0.03", help="low,high seconds a request waits")
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR of a checkout")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--bytes-dir",
        default="/dev/shm",
        help="a directory on another filesystem, where backup copies go through the bytes",
    )
    parser.add_argument("--kill-load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    low, high = (float(x) for x in args.delay.split(","))
    ns = [int(x) for x in args.n.split(",")]
    if args.kill_load:
        kill_load(args.kill_load, ns[0], args.threads, (low, high))
        return
    if args.tree:
        trees = [tuple(t.split("=", 1)) for t in args.tree]
        passed = ["--threads", str(args.threads), "--delay", args.delay]
        passed += ["--bytes-dir", args.bytes_dir]
        compare([(a, b) for a, b in trees], ns, passed + (["--keep"] if args.keep else []))
        return
    for n in ns:
        run(n, args.threads, (low, high), args.keep, args.bytes_dir)


if __name__ == "__main__":
    main()
