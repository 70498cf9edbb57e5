"""A head-only writer for crash tests: applies numbered ``mput`` batches and reports each one.

Run as ``python head_only_writer.py URL SEED``. Batch ``n`` is :func:`batch` (SEED, n): a few
adds and removes over a small key space, so later batches overwrite and remove what earlier ones
wrote. Each ``mput`` that returns is printed as ``ack <n>`` and flushed. Tiny file sizes and a
short ``compaction_interval`` make flushes, merges, rolls and journal trims frequent, so a SIGKILL
can land in any of them.
"""

from __future__ import annotations

import random
import sys

import inkpen

OPTIONS = {
    "ledger_cache_entries": 16,
    "l0_cache_entries": 48,
    "sst_target_bytes": 4096,
    "sst_block_bytes": 512,
    "l1_target_files": 2,
    "level_fanout": 2,
    "roll_segments": 4,
    "journal_file_target_bytes": 4096,
    "gc_min_age": 0.0,
    "delete_poll_interval": 0.05,
    "compaction_interval": 0.05,
}

Spec = tuple[str, str, str, str, bytes | None]


def batch(seed: int, n: int) -> list[Spec]:
    """The specs of batch ``n``: 1 to 6 changes to distinct (key, subkey) pairs."""
    rng = random.Random(seed * 1_000_003 + n)
    slots = rng.sample(
        [(f"k{k:02d}", f"s{s}") for k in range(30) for s in range(2)], rng.randint(1, 6)
    )
    specs: list[Spec] = []
    for key, subkey in slots:
        if rng.random() < 0.25:
            specs.append(("remove", "h", key, subkey, None))
        else:
            specs.append(("add", "h", key, subkey, f"{n}:{key}:{subkey}".encode()))
    return specs


def apply(model: dict[tuple[str, str], bytes], specs: list[Spec]) -> None:
    """What ``specs`` do to a model of the store, (key, subkey) -> value."""
    for op, _, key, subkey, value in specs:
        if op == "remove":
            model.pop((key, subkey), None)
        else:
            assert value is not None
            model[(key, subkey)] = value


def main() -> None:
    url, seed = sys.argv[1], int(sys.argv[2])
    book = inkpen.open(url, head_only="with_lookup", **OPTIONS)
    print("ready", flush=True)
    n = 0
    while True:
        book.mput(batch(seed, n))
        sys.stdout.write(f"ack {n}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    main()
