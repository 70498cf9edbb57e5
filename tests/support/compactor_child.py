"""Processes for the external-compaction tests: a writer opened with compaction="external",
and a compactor, each reporting on stdout (one flushed line per event).

``python compactor_child.py writer DIR URL``: opens the database, then puts ``k<n>`` (bucket
``c``, values ``v<n>-...``, keys repeating so later puts replace earlier ones) until the file
``DIR/stop`` appears; then closes. Lines: ``OPENED EPOCH``, ``ACK KEY VALUE`` after each put
returned, ``L0 COUNT`` every 25 puts (the writer's L0 files), ``CLOSED``.

``python compactor_child.py compactor DIR URL``: claims the compactor role and runs rounds
every 20 ms until killed. Lines: ``CLAIMED EPOCH``, ``ROUND MERGES L0``, and ``FENCED`` when a
newer compactor superseded it (it then exits with status 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import inkpen
from support.engine import TINY

OPTIONS = {**TINY, "max_l0_files": 3}
KEYS = 400


def say(*words: object) -> None:
    print(*words, flush=True)


def writer(directory: Path, url: str) -> None:
    stop = directory / "stop"
    book = inkpen.open(url, **OPTIONS, compaction="external")
    say("OPENED", book.stats().get("writer_epoch", ""))
    n = 0
    while not stop.exists():
        key = f"k{n % KEYS:05d}"
        value = f"v{n}-" + "x" * (n % 13)
        book.put("c", key, value.encode())
        say("ACK", key, value)
        n += 1
        if n % 25 == 0:
            say("L0", book.stats()["l0_files"])
    book.close()
    say("CLOSED")


def compactor(url: str) -> None:
    role = inkpen.open_compactor(url, **OPTIONS, interval=0.02)
    say("CLAIMED", role.epoch)
    try:
        role.run(on_report=lambda r: say("ROUND", r.merges, r.l0_files))
    except inkpen.FencedError:
        say("FENCED")


def main() -> None:
    role, directory, url = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if role == "writer":
        writer(directory, url)
    else:
        compactor(url)


if __name__ == "__main__":
    main()
