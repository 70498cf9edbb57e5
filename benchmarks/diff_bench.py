"""Anti-entropy figures: finding what differs between two databases by tictac trees, against
reading both in full.

Run: ``python benchmarks/diff_bench.py [--n 100000] [--changes 10] [--url-a URL --url-b URL]``.
Writes N objects of 100 bytes into database A, copies it to B (a checkpoint copy, then a restore,
so B has its own ledger and journal), changes ``--changes`` keys in B (a third each: new keys,
deletes, new values), then prints one JSON object per way of comparing them, each read through
Readers on request-counting stores (opening the Readers is counted apart, as both ways pay it):

- ``diff``: :func:`inkpen.anti_entropy.compare_stores` (both trees, then the heads of the
  differing segments);
- ``full_read``: an ``objects()`` fold of both databases in key order, compared value by value.

Both must find exactly the changed keys; the figures are wall time, requests by kind and bytes
read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

import inkpen
from inkpen.anti_entropy import compare_stores
from inkpen.manifest.copies import copy_database
from inkpen.objectstore import CountingStore, open_store


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def write_all(book: inkpen.Bookie, items: list[tuple[str, bytes]], threads: int = 64) -> None:
    lock = threading.Lock()
    pending = list(reversed(items))

    def client() -> None:
        while True:
            with lock:
                if not pending:
                    return
                key, value = pending.pop()
            book.put("b", key, value)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def full_read(a: inkpen.Reader, b: inkpen.Reader) -> set[bytes]:
    """Keys that differ, by reading every value of both sides in key order."""
    differ: set[bytes] = set()
    left, right = iter(a.objects("b")), iter(b.objects("b"))
    x, y = next(left, None), next(right, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[1] < y[1]):
            differ.add(x[1])  # type: ignore[index]
            x = next(left, None)
        elif x is None or y[1] < x[1]:
            differ.add(y[1])
            y = next(right, None)
        else:
            if x[2] != y[2]:
                differ.add(x[1])
            x, y = next(left, None), next(right, None)
    return differ


def _requests(counts: list[dict[str, int]]) -> dict[str, int]:
    kinds = ("gets", "heads", "lists", "puts", "deletes")
    return {
        "requests": sum(c[k] for c in counts for k in kinds),
        "gets": sum(c["gets"] for c in counts),
        "bytes_read": sum(c["bytes_read"] for c in counts),
    }


def measure(name: str, url_a: str, url_b: str, run: Callable[..., set[bytes]]) -> set[bytes]:
    """Open a Reader on each side (counted apart: both ways pay it), then run the comparison."""
    store_a, store_b = CountingStore(open_store(url_a)), CountingStore(open_store(url_b))
    started = time.perf_counter()
    with inkpen.open_reader(store_a) as a, inkpen.open_reader(store_b) as b:
        opened = time.perf_counter()
        at_open = _requests([store_a.snapshot(), store_b.snapshot()])
        store_a.reset()
        store_b.reset()
        found = run(a, b)
        done = time.perf_counter()
        counts = _requests([store_a.snapshot(), store_b.snapshot()])
    emit(
        figure=name,
        differing_keys=len(found),
        open_seconds=round(opened - started, 2),
        open=at_open,
        compare_seconds=round(done - opened, 2),
        compare=counts,
    )
    store_a.close()
    store_b.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="inkpen-diff-bench-")
    url_a, copy, url_b = (os.path.join(base, name) for name in ("a", "copy", "b"))
    try:
        started = time.perf_counter()
        options = {"roll_segments": 64, "journal_file_target_bytes": 8 << 20}
        with inkpen.open(url_a, **options) as book:
            write_all(book, [(f"key{i:08d}", os.urandom(100)) for i in range(args.n)])
            book.compact_ledger()
        for source, dest in ((url_a, copy), (copy, url_b)):
            with open_store(source) as src, open_store(dest) as dst:
                copy_database(src, dst)
        with inkpen.open(url_b, **options) as book:  # the restore's replay builds its ledger
            changed: set[bytes] = set()
            for i in range(args.changes):
                key = f"key{i * (args.n // max(args.changes, 1)):08d}"
                if i % 3 == 0:
                    key = f"new{i:08d}"
                    book.put("b", key, b"new")
                elif i % 3 == 1:
                    book.delete("b", key)
                else:
                    book.put("b", key, b"changed")
                changed.add(key.encode())
            book.compact_ledger()
        emit(
            figure="setup",
            objects=args.n,
            changes=args.changes,
            seconds=round(time.perf_counter() - started, 1),
        )

        def tree_diff(a: inkpen.Reader, b: inkpen.Reader) -> set[bytes]:
            return {d.key for d in compare_stores(a, b, bucket="b").differences}

        assert measure("diff", url_a, url_b, tree_diff) == changed
        assert measure("full_read", url_a, url_b, full_read) == changed
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
