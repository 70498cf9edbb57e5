"""inkpen quickstart: open a Bookie in a local directory, write, read, close, reopen.

Run through the README's first command (``./scripts/quickstart``), or directly:
``python examples/quickstart.py [DIRECTORY]`` (default ``./.inkpen-demo``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import inkpen


def main(root: Path) -> None:
    print(f"inkpen {inkpen.__version__}: database in {root}")
    started = time.perf_counter()
    with inkpen.open(str(root)) as book:
        for i in range(2000):
            book.put(
                "users",
                f"user{i:05d}",
                f"profile of user {i}".encode(),
                indexes=[("add", "city_bin", ["Lisbon", "Oslo", "Lima"][i % 3])],
            )
        book.put("sessions", "s1", b"token", ttl=3600)
        print(f"wrote 2,001 objects in {time.perf_counter() - started:.2f} s")
        print("get users/user00042 ->", book.get("users", "user00042"))
        head = book.head("users", "user00042")
        print(f"head users/user00042 -> sqn={head.sqn} size={head.size}")
        in_oslo = list(book.index_query("users", "city_bin", "Oslo", "Oslo"))
        print(f"index city_bin = Oslo -> {len(in_oslo)} users, first {in_oslo[0]!r}")
        print("buckets ->", [b.decode() for b in book.buckets()])
    print("closed; reopening")
    with inkpen.open(str(root)) as book:
        count = sum(1 for _ in book.keys("users"))
        print(f"after reopen: {count} users, users/user01999 ->", book.get("users", "user01999"))
        stats = book.stats()
        print(
            f"writer epoch {stats['writer_epoch']}, SQN {stats['sqn']}, "
            f"{stats['journal_files']} journal files, ledger levels {stats['level_files']}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".inkpen-demo").resolve())
