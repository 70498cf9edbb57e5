"""Maintenance figures on a local directory: write amplification, compaction, folds, backups.

Run: ``python benchmarks/maintenance_bench.py [--n 100000] [--keys 10000]``. Prints one JSON object
per figure:

- ``write_amplification``: N puts of 100-byte values over a small key space (so most are
  overwrites) with merges running, then journal compaction until nothing scores: bytes written to
  the store divided by the key and value bytes the application put;
- ``journal``: journal bytes on the store before and after that compaction (and GC);
- ``fold``: rows/s of a ``heads()`` fold and of an ``objects()`` fold over every live object;
- ``backup``: bytes of a first hot backup, and of a second one after 1% of the objects changed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

import inkpen
from inkpen.objectstore import CountingStore, open_store


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def journal_bytes(root: str) -> int:
    store = open_store(root)
    return sum(i.size for i in store.list("journal/"))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="inkpen-maintenance-bench-")
    root, dest = os.path.join(base, "db"), os.path.join(base, "backup")
    try:
        store = CountingStore(open_store(root))
        items = [(f"key{i % args.keys:08d}", os.urandom(100)) for i in range(args.n)]
        logical = sum(len(k) + len(v) for k, v in items)
        options = {"roll_segments": 64, "journal_file_target_bytes": 1 << 20, "gc_min_age": 0}
        with inkpen.open(store, **options) as book:
            write_all(book, items)
            book.flush()
            book.compact_ledger()
            book.run_gc(min_age=0)  # rolled segments go; what is left is the journal proper
            before = journal_bytes(root)
            started = time.perf_counter()
            rounds = 0
            while book.compact_journal().compacted:
                rounds += 1
            compaction_seconds = time.perf_counter() - started
            book.compact_ledger()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                book.run_gc(min_age=0)
                if book.stats()["journal_pending_deletes"] == 0:
                    break
                time.sleep(0.2)
            book.run_gc(min_age=0)
            after = journal_bytes(root)
            written = store.snapshot()["bytes_written"]
            emit(
                figure="write_amplification",
                puts=args.n,
                keys=args.keys,
                logical_bytes=logical,
                store_bytes_written=written,
                ratio=round(written / logical, 2),
            )
            emit(
                figure="journal",
                bytes_before_compaction=before,
                bytes_after_compaction=after,
                compaction_runs=rounds,
                compaction_seconds=round(compaction_seconds, 2),
            )
        with inkpen.open(root) as book:
            for fold in ("heads", "objects"):
                started = time.perf_counter()
                rows = sum(1 for _ in getattr(book, fold)("b"))
                emit(
                    figure="fold",
                    fold=fold,
                    rows=rows,
                    rows_per_s=round(rows / (time.perf_counter() - started), 1),
                )
            first = book.hot_backup()(dest)
            changed = [(f"key{i:08d}", os.urandom(100)) for i in range(0, args.keys, 100)]
            write_all(book, changed)
            second = book.hot_backup()(dest)
            emit(
                figure="backup",
                objects=args.keys,
                changed=len(changed),
                first_bytes=first.bytes_copied,
                first_files=first.files_copied,
                incremental_bytes=second.bytes_copied,
                incremental_files=second.files_copied,
                files_kept=second.files_kept,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
