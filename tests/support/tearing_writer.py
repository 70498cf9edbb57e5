"""A writer for the torn-tail crash test: several segment writes in flight, the first of them
never lands, the later ones do, and then the process kills itself with SIGKILL.

Run as ``python tearing_writer.py URL SEED THREADS IN_FLIGHT TEAR_AFTER`` (``THREADS`` above
``10 * IN_FLIGHT``). It opens the database
with ``segments_in_flight=IN_FLIGHT`` and writes as :mod:`crash_writer` does (fresh keys, every
fifth round its thread's hot key), printing ``ack <key> <value>`` for each put that returns. After
``TEAR_AFTER`` segment writes, the next one (slot ``g``, printed as ``tear <g>``) waits for good;
once the ``IN_FLIGHT - 1`` segment writes issued after it have landed, it prints ``killing`` and
sends itself SIGKILL: the journal then ends with a torn tail, ``g`` missing and the segments above
it present, none of them acknowledged.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

import inkpen
from inkpen.manifest.paths import parse_segment_key
from inkpen.objectstore import open_store

SMALL = {
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
"""As :mod:`crash_writer`'s: flushes, merges and rolls are frequent. A batch takes at most ten
puts, so with more than ten threads a slot, the segments in flight hold up only some of them
and the others' puts fill every slot after the torn one."""

out = threading.Lock()


def say(line: str) -> None:
    with out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Tearing:
    """The store: holds the segment write after ``tear_after`` for good, kills the process once
    ``later`` segment writes after it have landed."""

    def __init__(self, inner: Any, tear_after: int, later: int) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.armed = False
        self._left = tear_after
        self._later = later
        self._torn: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        slot = parse_segment_key(key)
        tear = False
        if slot is not None and self.armed:
            with self._lock:
                if self._torn is None:
                    self._left -= 1
                    if self._left < 0:
                        self._torn = slot
                        tear = True
        if tear:
            say(f"tear {slot}")
            threading.Event().wait()  # never lands
        self._inner.put_if_absent(key, data, metadata=metadata)
        if slot is not None and self._torn is not None and slot > self._torn:
            with self._lock:
                self._later -= 1
                done = self._later == 0
            if done:
                say("killing")
                os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    url, seed, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    in_flight, tear_after = int(sys.argv[4]), int(sys.argv[5])
    store = Tearing(open_store(url), tear_after, in_flight - 1)
    book = inkpen.open(store, segments_in_flight=in_flight, **SMALL)
    store.armed = True

    def writer(index: int) -> None:
        n = 0
        while True:
            key = f"s{seed}-t{index}-{n}"
            value = f"{seed}:{key}"
            indexes = [("add", "idx_bin", key)] if n % 3 == 0 else []
            book.put("crash", key, value.encode(), indexes=indexes)
            say(f"ack {key} {value}")
            if n % 5 == 0:
                hot = f"s{seed}-hot{index}"
                book.put("crash", hot, str(n).encode())
                say(f"ack {hot} {n}")
            n += 1

    workers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
