"""A writer process for multi-process fencing tests: rounds of opening a database and writing to it
until fenced, reporting every outcome on stdout.

Run as ``python fence_writer.py [--hold] NAME DIR URL [URL ...]``: one round per URL. It
prints ``READY``, then for round ``r`` waits for the file ``DIR/go-r``, opens ``URL`` (fencing
any earlier writer) with backpressure thresholds so small that puts are held back often, and
runs ``THREADS`` put threads and one GC thread (``run_gc(min_age=0)`` in a loop) until each is
refused, or until the file ``DIR/stop-r`` appears. Lines (flushed one by one, so a parent knows
exactly what was acknowledged when it pauses or reads this process):

``OPENED r EPOCH``        the open succeeded with this writer epoch
``OPEN_FAILED r ERROR``   the open failed (a newer writer fenced it during its claim)
``ACK r KEY``             ``put(bucket, KEY, KEY)`` returned
``REFUSED r KEY``         the put raised ``FencedError``: definitely not written
``FAILED r KEY ERROR``    the put raised another error
``GC r OUTCOME``          how the GC thread ended
``END r``                 every thread of the round has ended and the Bookie is closed

Keys are ``NAME-r<r>-t<i>-<n>`` in bucket ``fence``.

With ``--hold`` first, the ledger's SST writes wait while the file ``DIR/hold-r`` exists and
``DIR/release-r`` does not, so the puts end up held by backpressure; ``HELD r`` is printed once
every put thread is held.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inkpen
from inkpen.objectstore import open_store
from support.engine import TINY, GatedLedgerStore
from support.waiting import held_within

THREADS = 4
OPTIONS = {**TINY, "ledger_cache_entries": 4, "l0_cache_entries": 8, "max_l0_files": 1}
GC_PAUSE = 0.02
GO_WAIT = 120.0

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def wait_for_file(path: Path, timeout: float) -> None:
    if not held_within(path.exists, timeout, interval=0.005):
        raise SystemExit(f"no {path.name} signal")


def run_round(name: str, directory: Path, url: str, r: int, *, hold: bool) -> None:
    wait_for_file(directory / f"go-{r}", GO_WAIT)
    stop = directory / f"stop-{r}"
    gated = GatedLedgerStore(open_store(url))
    gated.gate.set()
    try:
        book = inkpen.open(gated if hold else url, **OPTIONS)
    except inkpen.InkpenError as exc:
        say(f"OPEN_FAILED {r} {type(exc).__name__}")
        say(f"END {r}")
        return
    say(f"OPENED {r} {book.stats()['writer_epoch']}")
    pause = threading.Event()

    def put_loop(index: int) -> None:
        n = 0
        while not stop.exists():
            key = f"{name}-r{r}-t{index}-{n}"
            try:
                book.put("fence", key, key.encode())
            except inkpen.FencedError:
                say(f"REFUSED {r} {key}")
                return
            except inkpen.InkpenError as exc:
                say(f"FAILED {r} {key} {type(exc).__name__}")
                return
            say(f"ACK {r} {key}")
            n += 1

    def gc_loop() -> None:
        while not stop.exists():
            try:
                book.run_gc(min_age=0)
            except inkpen.FencedError:
                say(f"GC {r} fenced")
                return
            except inkpen.InkpenError as exc:
                say(f"GC {r} {type(exc).__name__}")
                return
            pause.wait(GC_PAUSE)
        say(f"GC {r} stopped")

    def hold_loop() -> None:
        held = False
        while not all(not t.is_alive() for t in threads[:THREADS]):
            release = (directory / f"release-{r}").exists()
            if (directory / f"hold-{r}").exists() and not release:
                gated.gate.clear()
                if not held and book.stats()["throttled_puts"] == THREADS:
                    held = True
                    say(f"HELD {r}")
            else:
                gated.gate.set()
            pause.wait(0.005)
        gated.gate.set()

    threads = [threading.Thread(target=put_loop, args=(i,)) for i in range(THREADS)]
    threads.append(threading.Thread(target=gc_loop))
    if hold:
        threads.append(threading.Thread(target=hold_loop))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    book.close()
    say(f"END {r}")


def main() -> None:
    args = sys.argv[1:]
    hold = args[:1] == ["--hold"]
    if hold:
        args = args[1:]
    name, directory, urls = args[0], Path(args[1]), args[2:]
    say("READY")
    for r, url in enumerate(urls):
        run_round(name, directory, url, r, hold=hold)
    say("DONE")


if __name__ == "__main__":
    main()
