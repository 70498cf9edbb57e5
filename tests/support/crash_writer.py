"""A writer for crash tests: puts objects from several threads and reports each acknowledgement.

Run as ``python crash_writer.py URL SEED [THREADS [IN_FLIGHT DELAY_MS]]``: with ``IN_FLIGHT``, the
database is opened with ``segments_in_flight=IN_FLIGHT`` and every store request waits
``DELAY_MS`` to twice that (a :class:`~inkpen.objectstore.faults.FaultyStore` delay), so several
segment writes are in flight when the process is killed. Thread ``i`` loops over ``n = 0, 1, ...``:
it puts a fresh key ``s<seed>-t<i>-<n>`` (every third one with an index entry ``idx_bin`` = the
key), and every fifth round it overwrites its own key ``s<seed>-hot<i>`` with ``n``. Each put
that returns is printed as ``ack <key> <value>`` and flushed, so the parent knows exactly what was
acknowledged when it kills this process with SIGKILL. Tiny file sizes make L0 flushes, merges and
rolls frequent, so a kill can land in any of them.
"""

from __future__ import annotations

import sys
import threading

import inkpen
from inkpen.objectstore import open_store
from inkpen.objectstore.faults import FaultPlan, FaultyStore

SMALL = {
    "ledger_cache_entries": 20,
    "l0_cache_entries": 60,
    "sst_target_bytes": 4096,
    "l1_target_files": 2,
    "level_fanout": 2,
    "roll_segments": 16,
    "journal_file_target_bytes": 16384,
    "gc_min_age": 0.0,
}


def main() -> None:
    url, seed = sys.argv[1], int(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    if len(sys.argv) > 5:
        delay = int(sys.argv[5]) / 1000
        store = FaultyStore(open_store(url), FaultPlan(seed=seed, delay=(delay, 2 * delay)))
        book = inkpen.open(store, segments_in_flight=int(sys.argv[4]), **SMALL)
    else:
        book = inkpen.open(url, **SMALL)
    out = threading.Lock()

    def ack(key: str, value: str) -> None:
        with out:
            sys.stdout.write(f"ack {key} {value}\n")
            sys.stdout.flush()

    def writer(index: int) -> None:
        n = 0
        while True:
            key = f"s{seed}-t{index}-{n}"
            value = f"{seed}:{key}"
            indexes = [("add", "idx_bin", key)] if n % 3 == 0 else []
            book.put("crash", key, value.encode(), indexes=indexes)
            ack(key, value)
            if n % 5 == 0:
                hot = f"s{seed}-hot{index}"
                book.put("crash", hot, str(n).encode())
                ack(hot, str(n))
            n += 1

    print("ready", flush=True)
    workers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
