"""``inkpen bench --store s3 --latency-ms MS``: what an object store's latency costs, in one run.

The same phases run twice on fresh databases on the same S3 server: first straight to
``--endpoint`` (no delay), then through a latency proxy in front of it
(:mod:`inkpen.cli.latency_proxy`, in a child process: MS per round trip, half each way, with
jitter). Each phase prints one JSON line with ``latency_ms`` (0, then MS) and the requests it
made: ``requests`` (the store's own count: puts, gets, heads, lists, deletes and copies, as
``CountingStore`` sees them) and ``requests_per_op``; behind the proxy also ``proxy_requests``,
``proxy_requests_per_op`` and the proxy's count by kind (``proxy``: what went over the wire,
the requests of every process and retry included, a cross-check of the store's own count).

- ``open_new``: opening the new, empty database;
- ``load``: N puts from ``--concurrency`` clients (ops/s, p50 / p99 / max, requests per put;
  behind the proxy ``p50_round_trips``, the p50 in round trips);
- ``close``: the clean close after the load (``close_s``, requests per close);
- ``open``: the open after that clean close (``open_s``, requests per open);
- ``settle``: the merges and GC pass the load left due, run before the reads;
- ``get``: ``--gets`` cold gets from one thread (requests per get);
- ``get32``: after a close and an open (cold caches again), 4 x ``--gets`` other keys from
  :data:`GET_THREADS` threads (``to_one_thread``: its ops/s over ``get``'s);
- ``scan``: after another close and open, one full scan (requests per scanned row);
- ``kill``: a child process loads more and is SIGKILLed part way; ``open_s`` and the requests of
  the next open, and every put it saw acknowledged is checked to be there.

A last ``latency`` line divides each figure behind the proxy by the same figure without it
(``ratios``), gives the delayed load's put p50 in round trips, and checks the targets the
object-store work aims at (``targets``: each with its figure and whether it is met).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import click

import inkpen
from inkpen.objectstore import CountingStore, ObjectStore

from .latency_proxy import Link, ProxyProcess, counts_delta
from .scale import check_acked, kill_loading_child
from .workloads import (
    Timing,
    bench_keys,
    get_sample,
    run_gets,
    run_gets_threaded,
    run_load,
    run_scan,
)

GET_THREADS = 32
GET32_FACTOR = 4
"""The 32-thread pass reads this many times ``--gets`` keys."""
GET32_SEED = 5
REQUEST_KINDS = ("puts", "gets", "heads", "lists", "deletes", "copies")
RATIO_FIGURES = (
    ("open_new", "open_s"),
    ("load", "ops_per_s"),
    ("load", "p50_ms"),
    ("load", "p99_ms"),
    ("close", "close_s"),
    ("open", "open_s"),
    ("get", "ops_per_s"),
    ("get", "p50_ms"),
    ("get32", "ops_per_s"),
    ("scan", "ops_per_s"),
    ("kill", "open_s"),
)
StoreAt = Callable[[str], AbstractContextManager[ObjectStore]]
"""Opens a fresh database root on the S3 server at an endpoint (and closes it after)."""


def _emit(record: dict[str, Any]) -> None:
    click.echo(json.dumps(record), nl=True)


def run_latency(
    store_at: StoreAt,
    endpoint: str,
    count: int,
    options: dict[str, Any],
    value_size: int,
    concurrency: int,
    gets: int,
    common: dict[str, Any],
    bucket: bytes,
    round_trip_ms: float,
) -> dict[float, dict[str, dict[str, Any]]]:
    """Both passes (no delay, then ``round_trip_ms`` behind a proxy) and the ``latency`` line;
    answers every line printed, by pass and phase."""
    passes: dict[float, dict[str, dict[str, Any]]] = {}
    for delay_ms in (0.0, round_trip_ms):
        with contextlib.ExitStack() as stack:
            proxy: ProxyProcess | None = None
            target = endpoint
            if delay_ms:
                proxy = stack.enter_context(ProxyProcess(endpoint, Link.round_trip(delay_ms / 1e3)))
                target = proxy.endpoint
            inner = stack.enter_context(store_at(target))
            phases = _Phases(CountingStore(inner), proxy, {**common, "latency_ms": delay_ms}, count)
            _one_pass(phases, count, options, value_size, concurrency, gets, bucket)
            passes[delay_ms] = phases.lines
    _emit(summary(passes[0.0], passes[round_trip_ms], round_trip_ms, common, options))
    return passes


class _Phases:
    """Counts each phase's requests (the store's and the proxy's) and prints its line."""

    def __init__(
        self,
        store: CountingStore,
        proxy: ProxyProcess | None,
        common: dict[str, Any],
        n: int,
    ) -> None:
        self.store = store
        self.proxy = proxy
        self.common = common
        self.n = n
        self.lines: dict[str, dict[str, Any]] = {}

    @contextlib.contextmanager
    def phase(self, workload: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Counts the block's requests into ``record`` (per op: ``record["ops"]`` when the block
        sets it, else one) and prints it as the line of ``workload``."""
        store_before = self.store.snapshot()
        proxy_before = self.proxy.counts() if self.proxy is not None else {}
        yield record
        counted = _delta(self.store.snapshot(), store_before)
        ops = max(1, int(record.get("ops", 1)))
        requests = sum(counted[kind] for kind in REQUEST_KINDS)
        record.update(
            {name: counted[name] for name in (*REQUEST_KINDS, "bytes_written", "bytes_read")}
        )
        record["requests"] = requests
        record["requests_per_op"] = round(requests / ops, 4)
        if self.proxy is not None:
            seen = counts_delta(self.proxy.counts(), proxy_before)
            record["proxy_requests"] = seen["requests"]
            record["proxy_requests_per_op"] = round(seen["requests"] / ops, 4)
            record["proxy"] = {name: value for name, value in seen.items() if value}
        line = {**self.common, "n": self.n, "workload": workload, **record}
        self.lines[workload] = line
        _emit(line)


def _one_pass(
    phases: _Phases,
    n: int,
    options: dict[str, Any],
    value_size: int,
    concurrency: int,
    gets: int,
    bucket: bytes,
) -> None:
    store = phases.store
    keys = bench_keys(n)
    value = os.urandom(value_size)
    round_trip_ms = float(phases.common["latency_ms"])

    def timed(open_or_close: Callable[[], Any], field: str, record: dict[str, Any]) -> Any:
        started = time.perf_counter()
        result = open_or_close()
        record[field] = round(time.perf_counter() - started, 3)
        return result

    with phases.phase("open_new", {}) as record:
        book = timed(lambda: inkpen.open(store, **options), "open_s", record)
    try:
        with phases.phase("load", {"concurrency": concurrency, "value_size": value_size}) as record:
            timing = run_load(book, bucket, keys, value, concurrency)
            record.update(_figures(timing, round_trip_ms))
    finally:
        with phases.phase("close", {}) as record:
            timed(book.close, "close_s", record)
    with phases.phase("open", {}) as record:
        book = timed(lambda: inkpen.open(store, **options), "open_s", record)
    try:
        with phases.phase("settle", {}) as record:
            started = time.perf_counter()
            book.compact_ledger()
            book.run_gc()
            record["settle_s"] = round(time.perf_counter() - started, 3)
        with phases.phase("get", {}) as record:
            timing = run_gets(book, bucket, get_sample(keys, gets), value)
            record.update(_figures(timing, round_trip_ms))
    finally:
        book.close()
    one_thread = phases.lines["get"]["ops_per_s"]
    reopen: dict[str, Any] = {}
    book = timed(lambda: inkpen.open(store, **options), "reopen_s", reopen)
    try:
        with phases.phase("get32", {"threads": GET_THREADS, **reopen}) as record:
            sample = _sample(keys, GET32_FACTOR * gets, GET32_SEED)
            timing = run_gets_threaded(book, bucket, sample, value, GET_THREADS)
            record.update(_figures(timing, round_trip_ms))
            record["to_one_thread"] = round(timing.ops / timing.seconds / one_thread, 3)
    finally:
        book.close()
    reopen = {}
    book = timed(lambda: inkpen.open(store, **options), "reopen_s", reopen)
    try:
        with phases.phase("scan", dict(reopen)) as record:
            record.update(_figures(run_scan(book, bucket, value, n), round_trip_ms))
    finally:
        book.close()
    acked = kill_loading_child(store.url, options, value_size, bucket)
    with phases.phase("kill", {"acked": len(acked)}) as record:
        book = timed(lambda: inkpen.open(store, **options), "open_s", record)
    try:
        check_acked(book, bucket, acked)
    finally:
        book.close()


def _figures(timing: Timing, round_trip_ms: float) -> dict[str, Any]:
    figures: dict[str, Any] = dict(timing.figures())
    if round_trip_ms and "p50_ms" in figures:
        figures["p50_round_trips"] = round(figures["p50_ms"] / round_trip_ms, 3)
    return figures


def _ratio(here: object, base: object) -> float | None:
    if isinstance(here, int | float) and isinstance(base, int | float) and base:
        return round(here / base, 3)
    return None


def _sample(keys: Sequence[bytes], count: int, seed: int) -> list[bytes]:
    return random.Random(seed).sample(keys, min(count, len(keys)))


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in after}


def summary(
    plain: dict[str, dict[str, Any]],
    delayed: dict[str, dict[str, Any]],
    round_trip_ms: float,
    common: dict[str, Any],
    options: dict[str, Any],
) -> dict[str, Any]:
    """The ``latency`` line: each figure behind the proxy over the same figure without it, and
    the targets."""
    ratios: dict[str, float | None] = {}
    for workload, figure in RATIO_FIGURES:
        base = plain.get(workload, {}).get(figure)
        here = delayed.get(workload, {}).get(figure)
        ratios[f"{workload}.{figure}"] = _ratio(here, base)
    flush_ms = float(options.get("flush_interval", 0.0)) * 1e3
    load_p50_rt = delayed["load"]["p50_ms"] / round_trip_ms
    p50_bound = 1.5 + flush_ms / round_trip_ms
    scan_ratio = ratios["scan.ops_per_s"]
    targets = {
        "load_ops_ratio": _target(ratios["load.ops_per_s"], ">=", 0.8),
        "load_p50_round_trips": _target(load_p50_rt, "<=", round(p50_bound, 3)),
        "close_s": _target(delayed["close"]["close_s"], "<=", 5.0),
        "open_s": _target(delayed["open"]["open_s"], "<=", 1.0),
        "kill_open_s": _target(delayed["kill"]["open_s"], "<=", 3.0),
        "get32_to_one_thread": _target(delayed["get32"]["to_one_thread"], ">=", 20.0),
        "scan_ops_ratio": _target(scan_ratio, ">=", 0.5),
    }
    return {
        **common,
        "workload": "latency",
        "latency_ms": round_trip_ms,
        "n": delayed["load"]["ops"],
        "ratios": ratios,
        "load_p50_round_trips": round(load_p50_rt, 3),
        "requests_per_op": {
            workload: {
                "no_delay": plain[workload]["requests_per_op"],
                "delayed": delayed[workload]["requests_per_op"],
                "proxy": delayed[workload]["proxy_requests_per_op"],
            }
            for workload in ("open_new", "load", "close", "open", "get", "get32", "scan", "kill")
        },
        "targets": targets,
    }


def _target(figure: float | None, sense: str, bound: float) -> dict[str, Any]:
    if figure is None:
        return {"figure": None, "target": f"{sense} {bound}", "met": False}
    met = figure >= bound if sense == ">=" else figure <= bound
    return {"figure": round(figure, 3), "target": f"{sense} {bound}", "met": met}
