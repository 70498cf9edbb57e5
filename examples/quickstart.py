"""inkpen quickstart: the main job of an embedded store, from first put to a restored backup.

Run through the README's first command (``./scripts/quickstart``), or directly::

    python examples/quickstart.py [DIRECTORY]        # default ./.inkpen-demo

The database lives in ``DIRECTORY/db`` and its hot backup in ``DIRECTORY/backup``; both are
created on the first run and reused (and brought up to date) by the next. The steps:

1. open a Bookie and load 3,000 user profiles from 16 threads (their puts share journal writes),
   each with two index entries: the user's city and birth year;
2. point reads: ``get`` and ``head``;
3. index queries: everyone in one city; a range of birth years with the matching terms;
4. a fold over every object of a bucket;
5. a snapshot, which keeps seeing the data as it was when taken while a write changes it;
6. a hot backup into ``DIRECTORY/backup``, taken while the Bookie is open;
7. close, reopen the database, and read the backup through a Reader (a backup is a database).

Then it prints the ``inkpen`` commands that inspect what it made.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import inkpen

USERS = 3000
WRITERS = 16
CITIES = ("Lisbon", "Oslo", "Lima", "Osaka", "Quito")


def profile(i: int) -> tuple[str, bytes, list[tuple[str, str, str]]]:
    """User ``i``'s key, profile and index entries (the same on every run)."""
    city, born = CITIES[i % len(CITIES)], str(1960 + i % 45)
    body = json.dumps({"name": f"User {i}", "city": city, "born": born}).encode()
    return f"user{i:05d}", body, [("add", "city_bin", city), ("add", "born_bin", born)]


def load(book: inkpen.Bookie) -> float:
    """Put every profile from ``WRITERS`` threads; answers the seconds it took."""
    started = time.perf_counter()

    def put(i: int) -> None:
        key, body, indexes = profile(i)
        book.put("users", key, body, indexes=indexes)

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        list(pool.map(put, range(USERS)))
    return time.perf_counter() - started


def explore(book: inkpen.Bookie) -> None:
    """Point reads, index queries and a fold."""
    value = book.get("users", "user00042")
    head = book.head("users", "user00042")
    assert value is not None and head is not None
    print(f"get   users/user00042 -> {value.decode()}")
    print(f"head  users/user00042 -> sqn {head.sqn}, {head.size} bytes")
    in_oslo = list(book.index_query("users", "city_bin", "Oslo", "Oslo"))
    print(f"index city_bin = Oslo -> {len(in_oslo)} users, first {in_oslo[0].decode()}")
    nineties = list(book.index_query("users", "born_bin", "1990", "1994", return_terms=True))
    first_term, first_key = nineties[0]
    print(
        f"index born_bin 1990..1994 -> {len(nineties)} users, "
        f"first {first_key.decode()} (born {first_term.decode()})"
    )
    count = total = 0
    for _bucket, _key, body in book.objects("users"):
        count += 1
        total += len(body)
    print(f"fold  users -> {count} objects, {total:,} bytes of profiles")


def snapshot_demo(book: inkpen.Bookie) -> None:
    """A snapshot keeps its view while the live database changes."""
    with book.snapshot() as snap:
        book.put("users", "user00000", b'{"name": "Renamed"}')
        before, after = snap.get("users", "user00000"), book.get("users", "user00000")
        assert before is not None and after is not None
        print(f"snapshot sees {before.decode()}")
        print(f"live book sees {after.decode()}")


def main(workdir: Path) -> None:
    db, backup_dir = workdir / "db", workdir / "backup"
    print(f"inkpen {inkpen.__version__}: database in {db}")
    with inkpen.open(str(db)) as book:
        seconds = load(book)
        book.put("sessions", "s1", b"token", ttl=3600)  # gone after an hour
        print(f"load  {USERS:,} users with 2 index entries each in {seconds:.2f} s")
        explore(book)
        snapshot_demo(book)
        # Persist the ledger first: the backup then holds the small values in the ledger's
        # files and the journal without them (the README's "Where values live"), and a backup
        # taken again later finds these files there already.
        book.flush()
        report = book.hot_backup()(str(backup_dir))
        print(
            f"hot backup -> {backup_dir}: {report.files} file(s), "
            f"{report.files_copied} copied ({report.bytes_copied:,} bytes), "
            f"{report.files_kept} already there"
        )
    print("closed; reopening")
    with inkpen.open(str(db)) as book:
        users = sum(1 for _ in book.keys("users"))
        stats = book.stats()
        print(
            f"after reopen: {users} users, buckets {[b.decode() for b in book.buckets()]}, "
            f"writer epoch {stats['writer_epoch']}, SQN {stats['sqn']}"
        )
    with inkpen.open_reader(str(backup_dir)) as backup:
        restored = backup.get("users", "user00000")
        assert restored is not None
        users = sum(1 for _ in backup.keys("users"))
        print(f"backup reads as a database: {users} users, users/user00000 -> {restored.decode()}")
    cli = command_line()
    print("next, look at it from the command line:")
    for command in ("info", "ls", "verify"):
        print(f"  {cli} {command} {db}")
    print(f"  {cli} restore {backup_dir} {fresh_path(workdir / 'restored')}")


def fresh_path(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``... the first that does not exist yet (restore makes a
    new database and refuses to merge into an existing one)."""
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def command_line() -> str:
    """How to run the ``inkpen`` command installed beside this interpreter, from here."""
    script = Path(sys.executable).with_name("inkpen")
    if not script.exists():
        return "inkpen"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "directory",
        nargs="?",
        default=".inkpen-demo",
        help="where the database and its backup live (default ./.inkpen-demo)",
    )
    main(Path(parser.parse_args().directory).resolve())
