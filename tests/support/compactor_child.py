"""Processes for the external-compaction tests: a writer opened with compaction="external",
and a compactor, each reporting on stdout (one flushed line per event).

``python compactor_child.py ROLE DIR URL`` imports inkpen, prints ``READY`` and waits for a line
``go [START]`` on stdin before it starts (a test spawns the next process ahead of time, so a
round pays no interpreter start-up), then:

- ``writer``: opens the database, then puts ``k<n>`` (bucket ``c``, values ``v<n>-...``, ``n``
  counting from ``START``, keys repeating so later puts replace earlier ones) until the file
  ``DIR/stop`` appears; then closes. Lines: ``OPENED EPOCH``, ``ACK KEY VALUE`` after each put
  returned, ``L0 COUNT`` every 25 puts (the writer's L0 files), ``CLOSED``.
- ``compactor``: claims the compactor role and runs rounds every 20 ms until killed. Lines:
  ``CLAIMED EPOCH``, ``ROUND MERGES L0``, and ``FENCED`` when a newer compactor superseded it
  (it then exits with status 0).

Standard input closed before ``go`` ends the process without touching the database.
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


def put_of(n: int) -> tuple[str, str]:
    """The key and value of put number ``n``."""
    return f"k{n % KEYS:05d}", f"v{n}-" + "x" * (n % 13)


def writer(directory: Path, url: str, start: int) -> None:
    stop = directory / "stop"
    book = inkpen.open(url, **OPTIONS, compaction="external")
    say("OPENED", book.stats().get("writer_epoch", ""))
    n = start
    while not stop.exists():
        key, value = put_of(n)
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
    say("READY")
    words = sys.stdin.readline().split()
    if not words or words[0] != "go":
        return
    if role == "writer":
        writer(directory, url, int(words[1]) if len(words) > 1 else 0)
    else:
        compactor(url)


if __name__ == "__main__":
    main()
