"""Measures inkpen's codecs on the hot path, in memory (no store I/O), and prints the figures.

Figures: SST build throughput, point lookups in an SST whose blocks are cached, a full SST scan,
point lookups in a journal file with its index loaded (format version 2's SQN block index, and
version 1's hash region beside it), journal build throughput, and the
bloom filter's false-positive rate at the default bits per key. Output is one JSON object.

Run: ``python benchmarks/formats_bench.py [--entries N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

from inkpen.formats.bloom import DEFAULT_BITS_PER_KEY, BloomFilter
from inkpen.formats.cache import LruCache
from inkpen.formats.journal import JournalEntry, JournalReader, Kind, build_journal
from inkpen.formats.keys import ACTIVE, LedgerValue, content_hash, object_key
from inkpen.formats.sst import SstReader, build_sst


def _best_of(runs: int, action: Callable[[], object]) -> float:
    """Fastest wall time of ``runs`` calls, in seconds."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def bench_sst(entries: int, rng: random.Random) -> dict[str, float]:
    rows = [
        (
            object_key(b"bucket", b"key-%010d" % i),
            LedgerValue(
                i + 1,
                ACTIVE,
                None,
                rng.getrandbits(64),
                rng.randrange(100, 2000),
                1_700_000_000_000 + i,
            ),
        )
        for i in range(entries)
    ]
    build_seconds = _best_of(3, lambda: build_sst(rows))
    data, info = build_sst(rows)
    reader = SstReader.open(
        "ledger/bench.sst", len(data), lambda s, e: data[s:e], cache=LruCache(256 << 20)
    )
    assert sum(1 for _ in reader.iter_range()) == entries  # warms the cache
    probes = [rows[rng.randrange(entries)][0] for _ in range(50_000)]
    lookup_seconds = _best_of(3, lambda: [reader.get(key) for key in probes])
    scan_seconds = _best_of(3, lambda: sum(1 for _ in reader.iter_range()))
    cold = SstReader.open("ledger/cold.sst", len(data), lambda s, e: data[s:e])
    cold_scan_seconds = _best_of(1, lambda: sum(1 for _ in cold.iter_range()))
    return {
        "sst_entries": entries,
        "sst_bytes": info.size,
        "sst_build_mb_per_s": round(info.size / build_seconds / 1e6, 2),
        "sst_build_entries_per_s": round(entries / build_seconds),
        "sst_cached_get_us": round(lookup_seconds / len(probes) * 1e6, 2),
        "sst_cached_scan_rows_per_s": round(entries / scan_seconds),
        "sst_uncached_scan_rows_per_s": round(entries / cold_scan_seconds),
    }


def bench_journal(entries: int, rng: random.Random) -> dict[str, float]:
    rows = []
    for i in range(entries):
        body = rng.randbytes(rng.randrange(100, 1000))
        rows.append(
            JournalEntry(
                i + 1,
                Kind.OBJECT,
                object_key(b"bucket", b"key-%010d" % i),
                body,
                ((1, b"idx_bin", b"term-%d" % (i % 97)),),
                None,
                1_700_000_000_000 + i,
            )
        )
    build_seconds = _best_of(3, lambda: build_journal(rows, writer_epoch=1))
    data = build_journal(rows, writer_epoch=1)
    reader = JournalReader.open("journal/bench.jnl", len(data), lambda s, e: data[s:e])
    probes = [rows[rng.randrange(entries)] for _ in range(50_000)]
    lookup_seconds = _best_of(
        3, lambda: [reader.get(row.sqn, row.kind, row.ledger_key) for row in probes]
    )
    old = build_journal(rows, writer_epoch=1, version=1)
    old_reader = JournalReader.open("journal/bench-v1.jnl", len(old), lambda s, e: old[s:e])
    old_seconds = _best_of(
        3, lambda: [old_reader.get(row.sqn, row.kind, row.ledger_key) for row in probes]
    )
    scan_seconds = _best_of(3, lambda: sum(1 for _ in reader.iter_entries()))
    return {
        "journal_entries": entries,
        "journal_bytes": len(data),
        "journal_build_mb_per_s": round(len(data) / build_seconds / 1e6, 2),
        "journal_build_entries_per_s": round(entries / build_seconds),
        "journal_get_us": round(lookup_seconds / len(probes) * 1e6, 2),
        "journal_get_us_v1": round(old_seconds / len(probes) * 1e6, 2),
        "journal_index_bytes": len(data) - reader.header.hash_offset,
        "journal_index_bytes_v1": len(old) - old_reader.header.hash_offset,
        "journal_scan_rows_per_s": round(entries / scan_seconds),
    }


def bench_bloom(entries: int, rng: random.Random) -> dict[str, float]:
    members = {rng.randbytes(16) for _ in range(entries)}
    absent = [key for key in (rng.randbytes(16) for _ in range(entries)) if key not in members]
    bloom = BloomFilter.build(members)
    probe_seconds = _best_of(3, lambda: [bloom.may_contain(key) for key in absent])
    hits = sum(map(bloom.may_contain, absent))
    return {
        "bloom_bits_per_key": DEFAULT_BITS_PER_KEY,
        "bloom_false_positive_rate": round(hits / len(absent), 5),
        "bloom_probe_absent_us": round(probe_seconds / len(absent) * 1e6, 3),
        "content_hash_us": round(
            _best_of(3, lambda: [content_hash(k) for k in absent]) / len(absent) * 1e6, 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    figures: dict[str, float] = {}
    figures.update(bench_sst(args.entries, rng))
    figures.update(bench_journal(args.entries, rng))
    figures.update(bench_bloom(args.entries, rng))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
