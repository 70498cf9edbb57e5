"""A writer for the batch crash test: writes atomic batches from several threads and reports each
acknowledged batch.

Run as ``python batch_crash_writer.py URL SEED [THREADS]``. Thread ``i`` writes batches
``n = 0, 1, ...``; batch ``n`` holds :func:`batch_size` puts of keys ``s<seed>-t<i>-<n>-<j>``, a
put of ``s<seed>-last<i>`` = ``n``, and (from ``n = 2``) deletes of every key of batch ``n - 2``.
Each batch that returns is printed as ``ack <i> <n>`` and flushed, so the parent knows exactly
which batches were acknowledged when it kills this process with SIGKILL. ``max_batch_bytes`` is
at its minimum, so some batches share a segment with other threads' and others get one of their
own; tiny file sizes make flushes, merges and rolls frequent.
"""

from __future__ import annotations

import sys
import threading

import inkpen

OPTIONS = {
    "ledger_cache_entries": 20,
    "l0_cache_entries": 60,
    "sst_target_bytes": 4096,
    "l1_target_files": 2,
    "level_fanout": 2,
    "roll_segments": 16,
    "journal_file_target_bytes": 16384,
    "gc_min_age": 0.0,
    "max_batch_bytes": 1024,
}


def batch_size(seed: int, thread: int, n: int) -> int:
    """How many fresh keys batch ``n`` of ``thread`` puts (2 to 12, a pure function)."""
    return 2 + (seed * 7919 + thread * 104729 + n * 31) % 11


def batch_keys(seed: int, thread: int, n: int) -> list[str]:
    return [f"s{seed}-t{thread}-{n}-{j}" for j in range(batch_size(seed, thread, n))]


def last_key(seed: int, thread: int) -> str:
    return f"s{seed}-last{thread}"


def main() -> None:
    url, seed = sys.argv[1], int(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    book = inkpen.open(url, **OPTIONS)
    out = threading.Lock()

    def writer(index: int) -> None:
        n = 0
        while True:
            batch = inkpen.Batch()
            for key in batch_keys(seed, index, n):
                batch.put("crash", key, f"{key}={n}".encode())
            batch.put("crash", last_key(seed, index), str(n).encode())
            if n >= 2:
                for key in batch_keys(seed, index, n - 2):
                    batch.delete("crash", key)
            book.write(batch)
            with out:
                sys.stdout.write(f"ack {index} {n}\n")
                sys.stdout.flush()
            n += 1

    print("ready", flush=True)
    workers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
