"""Times journal-value gets in memory (no store I/O): ``JournalReader.value`` and ``get`` of a
version 3 file with its block index held and with it in an index cache, and of a version 1 file
with its hash region held and paged; and the build of each file, per entry. Prints CPU ns (thread
time: a busy machine's waits are not counted).

Run: ``python benchmarks/journal_get_bench.py [--entries N] [--rounds R]``. ``--against FILE``
also loads another journal module (a single-file ``formats/journal.py``, e.g. from
``git show REV:formats/journal.py``) beside the installed one and times the two in turns, in
one process, so that a busy machine slows both alike; it prints each figure's best time for both
and the ratio installed / other.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import inkpen.formats.journal as installed
from inkpen.formats.cache import LruCache


def _best_of(runs: int, action: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        action()
        best = min(best, time.thread_time() - started)
    return best


def _load(path: str) -> ModuleType:
    """The journal module at ``path``, loaded inside inkpen.formats (its relative imports)."""
    spec = importlib.util.spec_from_file_location("inkpen.formats._journal_other", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class Case:
    """One file and one way of holding its index, read through one journal module."""

    def __init__(self, journal: Any, version: int, cached: bool, entries: int) -> None:
        rng = random.Random(7)
        rows = [
            journal.JournalEntry(
                i + 1, journal.Kind.OBJECT, b"key-%08d" % i, rng.randbytes(200), (), None, 0
            )
            for i in range(entries)
        ]
        self.build = lambda: journal.build_journal(rows, writer_epoch=1, version=version)
        data = self.build()

        def fetch(start: int, end: int) -> bytes:
            return data[start:end]

        cache = LruCache(64 << 20) if cached else None
        self.reader = journal.JournalReader.open("j", len(data), fetch, index_cache=cache)
        self.wanted = [(e.sqn, e.kind, e.ledger_key) for e in rows]
        rng.shuffle(self.wanted)
        for sqn, kind, key in self.wanted:  # warm the cache, check the answers
            assert self.reader.value(sqn, kind, key) is not None

    def values(self) -> None:
        value = self.reader.value
        for sqn, kind, key in self.wanted:
            value(sqn, kind, key)

    def gets(self) -> None:
        get = self.reader.get
        for sqn, kind, key in self.wanted:
            get(sqn, kind, key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", help="another journal module's file, to compare with")
    args = parser.parse_args()
    modules = {"installed": installed}
    if args.against:
        modules["other"] = _load(args.against)
    best: dict[str, dict[str, float]] = {name: {} for name in modules}
    cases = {
        (name, version, cached): Case(module, version, cached, args.entries)
        for name, module in modules.items()
        for version in (3, 1)
        for cached in (False, True)
    }
    order = list(cases.items())
    shuffler = random.Random(1)
    for _ in range(args.rounds):
        shuffler.shuffle(order)  # no module always runs first
        for (name, version, cached), case in order:
            label = f"v{version}_{'cached' if cached else 'held'}"
            actions = [("value", case.values), ("get", case.gets)]
            if not cached:
                actions.append(("build", case.build))  # ns per entry written
            for what, action in actions:
                took = _best_of(3, action) / args.entries * 1e9
                key = f"{label}_{what}_ns"
                best[name][key] = min(best[name].get(key, float("inf")), took)
    for key, ns in best["installed"].items():
        line = f"{key:<20} installed {ns:8.1f} ns"
        if "other" in best:
            other = best["other"][key]
            line += f"   other {other:8.1f} ns   installed/other {ns / other:.3f}"
        print(line)


if __name__ == "__main__":
    main()
