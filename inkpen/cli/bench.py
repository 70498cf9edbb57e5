"""``inkpen bench``: inkpen's own benchmark, printing JSON lines in the peer harness's shape.

Runs the load / get / scan workloads of :mod:`inkpen.cli.workloads` against a fresh database on a
local directory (``--store file``) or an S3-compatible server (``--store s3``) and prints one JSON
object per workload, with the fields the SlateDB peer harness prints (``system``, ``workload``,
``ops``, ``seconds``, ``ops_per_s``, ``p50_ms``, ``p99_ms``, ``store``, ...) plus what inkpen
alone can say: the object-store requests made while the workload ran (``puts``, ``gets``,
``heads``, ``lists``, ``deletes``, ``copies``, ``bytes_written``, ``bytes_read``) and the
process's peak resident memory (``peak_rss_mb``).

The load runs on a new Bookie; the Bookie is then closed cleanly and opened again, so get and
scan read from the store, not from the write path's memory.

``--scale`` runs :mod:`inkpen.cli.scale` for each N of ``--n`` (default 100,000 and
5,000,000): how cost grows with the data.

``--plot FILE.png`` also draws each timed phase second by second (throughput, p50 and p99
latency; :mod:`inkpen.cli.bench_plot`, which needs the ``plot`` extra).

``--metrics off`` opens every Bookie with ``metrics=False`` (no operation recorded);
``--metrics both`` measures what recording costs: the workloads run four times, each on a new
database, with metrics off, on, on, off (so that a drift of the machine weighs on both sides
alike; ``--rounds R`` repeats them), every JSON line saying ``"metrics": true | false``, then one
``metrics_cost`` line with each workload's median throughput and CPU per operation off and on
and the cost in percent. Every workload line has the process's CPU seconds (``cpu_s``, all
threads) and ``cpu_us_per_op``: on a busy machine they move less than the throughput.

``--store s3 --latency-ms MS`` runs :mod:`inkpen.cli.latency`: the workloads and the opens and
closes between them, first straight to the server, then through a latency proxy that adds MS per
round trip (:mod:`inkpen.cli.latency_proxy`), with the requests each operation made and the
ratios of the two.

``--idle SECONDS`` measures something else: a Bookie that has written a little and then sits
idle should make no store requests at all (only checkpoint refreshes, which a writer does not
need); it prints the requests counted while idle.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

import inkpen
from inkpen.objectstore import CountingStore, ObjectStore, open_store

from .bench_plot import Series, plot, require_matplotlib
from .durations import Duration
from .params import COUNT
from .scale import run_scale
from .workloads import (
    BenchmarkFailed,
    Timing,
    bench_keys,
    get_sample,
    run_gets,
    run_load,
    run_scan,
)

BUCKET = b"bench"
DEFAULT_COUNT = 100_000
SCALE_COUNTS = (100_000, 5_000_000)
MAX_OBJECTS = 10**10
"""The most objects ``--n`` loads (its keys are numbered with 10 digits)."""
MAX_VALUE_BYTES = 1024 * 1024 * 1024
"""The largest ``--value-size``: the ``max_value_bytes`` option's own upper bound."""
MAX_CONCURRENCY = 4096
DEFAULT_COUNT_GETS = 20_000
LATENCY_GETS = 1_000
"""``--gets`` with ``--latency-ms`` when none is given: a cold get costs a round trip or more."""
MAX_LATENCY_MS = 10_000.0
MAX_FLUSH_MS = 60_000
"""The longest ``--flush-ms``: the ``flush_interval`` option's upper bound of 60 s."""
WORKLOADS = ("load", "get", "scan")
STARTUP = "startup"
"""Not a default workload: ``--workloads startup`` times ``import inkpen`` and ``inkpen --help``
in fresh processes (:mod:`inkpen.cli.startup`)."""
IDLE_WRITES = 100
DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "inkpen-bench",
    "AWS_SECRET_ACCESS_KEY": "inkpen-bench",
    "AWS_REGION": "us-east-1",
}


def flush_options(flush_ms: int) -> dict[str, Any]:
    """inkpen's group-commit options for the protocol's flush interval in milliseconds.

    ``N > 0``: ``flush_policy="interval"``, ``flush_interval=N ms``: a batch of puts is written
    as one journal segment N ms after its first put joined it (at once when it reaches
    ``max_batch_bytes``), as SlateDB's ``flush_interval`` does for its WAL. ``0``:
    ``flush_policy="idle"``: a batch is written as soon as the Inker is free, so puts that arrive
    while a segment is being written share the next one.
    """
    if flush_ms < 0:
        raise click.BadParameter("must be 0 (write when idle) or a positive number of ms")
    if flush_ms == 0:
        return {"flush_policy": "idle"}
    return {"flush_policy": "interval", "flush_interval": flush_ms / 1000.0}


def parse_counts(text: str | None, scale: bool) -> list[int]:
    """``--n``: one positive count, or with ``--scale`` a comma-separated list of them."""
    if text is None:
        return list(SCALE_COUNTS) if scale else [DEFAULT_COUNT]
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(not 1 <= c <= MAX_OBJECTS for c in counts):
        raise click.BadParameter(
            f"{text!r} is not a number of objects from 1 to {MAX_OBJECTS} (with --scale: a "
            "comma-separated list of them, e.g. 100000,1000000)",
            param_hint="--n",
        )
    if len(counts) > 1 and not scale:
        raise click.BadParameter(
            "several counts need --scale; give one count, or add --scale", param_hint="--n"
        )
    return counts


def peak_rss_mb() -> float:
    """The peak resident memory of this process so far, in MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def _emit(record: dict[str, Any]) -> None:
    click.echo(json.dumps(record), nl=True)


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in after}


@contextlib.contextmanager
def bench_store(kind: str, root: str | None, endpoint: str, bucket: str) -> Iterator[ObjectStore]:
    """A fresh, empty database root for the benchmark; a temp directory is removed after."""
    if kind == "file":
        made = root is None
        base = tempfile.mkdtemp(prefix="inkpen-bench-") if root is None else root
        directory = os.path.join(base, f"inkpen-{uuid.uuid4().hex[:8]}")
        store = open_store(directory)
        try:
            yield store
        finally:
            store.close()
            if made:
                shutil.rmtree(base, ignore_errors=True)
        return
    for name, value in DUMMY_AWS.items():
        os.environ.setdefault(name, value)
    _ensure_bucket(endpoint, bucket)
    prefix = f"inkpen-bench-{uuid.uuid4().hex[:8]}"
    store = open_store(f"s3://{bucket}/{prefix}?endpoint={endpoint}")
    try:
        yield store
    finally:
        store.close()


def _ensure_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the server at ``endpoint`` unless it is there already."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client = boto3.session.Session().client("s3", endpoint_url=endpoint)
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError:
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in ("BucketAlreadyExists", "BucketAlreadyOwnedByYou"):
                raise click.ClickException(
                    f"cannot create bucket {bucket!r} at {endpoint}: {exc}; create it yourself "
                    "or name another with --bucket"
                ) from exc
    except BotoCoreError as exc:
        raise click.ClickException(
            f"cannot reach the S3 endpoint {endpoint}: {exc}; start the server or fix --endpoint"
        ) from exc
    finally:
        client.close()


@click.command()
@click.option(
    "--store",
    "store_kind",
    type=click.Choice(["file", "s3"]),
    default="file",
    show_default=True,
    help="Where the database lives.",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    default=None,
    help="--store file: make the database in a new directory under ROOT (kept) "
    "instead of a temp directory (removed).",
)
@click.option(
    "--endpoint",
    default="http://127.0.0.1:8333",
    show_default=True,
    help="--store s3: the S3 endpoint.",
)
@click.option(
    "--bucket",
    default="inkpen-bench",
    show_default=True,
    help="--store s3: the bucket (created if missing); each run uses a new prefix.",
)
@click.option(
    "--n",
    "count",
    default=None,
    help="Objects to load (default 100000); with --scale a comma-separated list "
    "(default 100000,5000000).",
)
@click.option(
    "--scale",
    is_flag=True,
    default=False,
    help="How cost grows with N: for each N of --n, load, close, reopen, gets from 1 and "
    "16 threads, a scan and an open after a SIGKILL, with bytes read per get and per row, "
    "store usage, peak RSS and ratios to the first N.",
)
@click.option(
    "--value-size",
    type=click.IntRange(0, MAX_VALUE_BYTES),
    default=100,
    show_default=True,
    help="Bytes per value.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, MAX_CONCURRENCY),
    default=256,
    show_default=True,
    help="Client threads of the load.",
)
@click.option(
    "--flush-ms",
    type=click.IntRange(0, MAX_FLUSH_MS),
    default=10,
    show_default=True,
    help="Group commit: write a batch of puts this many ms after its first put "
    "(flush_policy=interval); 0 writes as soon as the journal writer is free "
    "(flush_policy=idle).",
)
@click.option(
    "--gets",
    type=COUNT,
    default=None,
    help=f"Keys the get workload reads (default {DEFAULT_COUNT_GETS}; {LATENCY_GETS} with "
    "--latency-ms).",
)
@click.option(
    "--workloads",
    default="load,get,scan",
    show_default=True,
    help="Comma-separated workloads to report: load, get, scan; and startup (not a default: "
    "the seconds of `import inkpen` and `inkpen --help` in new processes).",
)
@click.option(
    "--compaction",
    type=click.Choice(["internal", "external"]),
    default="internal",
    show_default=True,
    help="external: the load's writer merges nothing itself and an `inkpen compactor` "
    "process runs beside it for the load.",
)
@click.option(
    "--metrics",
    "metrics",
    type=click.Choice(["on", "off", "both"]),
    default="on",
    show_default=True,
    help="Record every operation for Bookie.metrics() (the metrics option), or not; both: "
    "run with metrics off, on, on, off and print what recording costs.",
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="--metrics both: repeat the off, on, on, off runs this many times.",
)
@click.option(
    "--latency-ms",
    type=click.FloatRange(0, MAX_LATENCY_MS, min_open=True),
    default=None,
    help="--store s3: run every phase twice, straight to --endpoint and then through a latency "
    "proxy adding this many ms per round trip (half each way, with jitter), and print the "
    "requests per operation, close and open times, cold gets from 1 and 32 threads, an open "
    "after a SIGKILL and the ratios delayed / no delay.",
)
@click.option(
    "--idle",
    type=Duration(),
    default=None,
    help="Instead of the workloads: write a little, stay idle this many seconds, and "
    "print the store requests made while idle.",
)
@click.option(
    "--plot",
    "plot_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also draw each timed phase's throughput and p50 / p99 latency, second by second, "
    "into the PNG file FILE (needs matplotlib: pip install 'inkpen[plot]').",
)
def bench(
    store_kind: str,
    root: str | None,
    endpoint: str,
    bucket: str,
    count: str | None,
    scale: bool,
    value_size: int,
    concurrency: int,
    flush_ms: int,
    gets: int | None,
    workloads: str,
    compaction: str,
    metrics: str,
    rounds: int,
    latency_ms: float | None,
    idle: float | None,
    plot_file: Path | None,
) -> None:
    """Benchmark inkpen: load, get and scan, one JSON line per workload.

    \b
    Example:
      inkpen bench --n 20000
      inkpen bench --store s3 --endpoint http://127.0.0.1:8333 --workloads load
      inkpen bench --scale --n 100000,1000000
      inkpen bench --n 100000 --metrics both
      inkpen bench --n 200000 --plot bench.png
      inkpen bench --store s3 --endpoint http://127.0.0.1:8333 --latency-ms 25 --n 20000
    """
    counts = parse_counts(count, scale)
    chosen = _chosen_workloads(workloads)
    if STARTUP in chosen:
        _run_startup()
        chosen = [w for w in chosen if w != STARTUP]
        if not chosen:
            return
    _check_choices(store_kind, scale, metrics, idle, plot_file, latency_ms, compaction, chosen)
    if gets is None:
        gets = LATENCY_GETS if latency_ms is not None else DEFAULT_COUNT_GETS
    options = flush_options(flush_ms)
    if metrics != "both":
        options["metrics"] = metrics == "on"
    setup = _Setup(
        store_kind, root, endpoint, bucket, value_size, concurrency, flush_ms, gets, options
    )
    if scale:
        _bench_scale(setup, counts, plot_file)
    elif latency_ms is not None:
        _bench_latency(setup, counts[0], latency_ms)
    elif idle is not None:
        _bench_idle(setup, idle)
    else:
        _bench_workloads(setup, counts[0], chosen, compaction, metrics, rounds, plot_file)


@dataclass(frozen=True, slots=True)
class _Setup:
    """What every mode of ``bench`` shares: where the database lives and the load's shape."""

    store_kind: str
    root: str | None
    endpoint: str
    bucket: str
    value_size: int
    concurrency: int
    flush_ms: int
    gets: int
    options: dict[str, Any]

    def store(self) -> contextlib.AbstractContextManager[ObjectStore]:
        """A fresh database root (:func:`bench_store`)."""
        return bench_store(self.store_kind, self.root, self.endpoint, self.bucket)

    @property
    def common(self) -> dict[str, str]:
        """The fields every JSON line starts with."""
        return {"system": "inkpen", "store": self.store_kind}

    def title(self, scale: bool) -> str:
        """The plot's title."""
        return (
            f"inkpen bench{' --scale' if scale else ''}: {self.store_kind} store, "
            f"{self.value_size} B values, {self.concurrency} load clients, "
            f"flush {self.flush_ms} ms"
        )


def _chosen_workloads(workloads: str) -> list[str]:
    """``--workloads``: the names given, each one of :data:`WORKLOADS` or :data:`STARTUP`."""
    chosen = [w.strip() for w in workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - {*WORKLOADS, STARTUP})
    if unknown or not chosen:
        raise click.BadParameter(
            f"unknown workload(s) {', '.join(unknown) or '(none)'}; choose from "
            f"{', '.join((*WORKLOADS, STARTUP))}",
            param_hint="--workloads",
        )
    return chosen


def _run_startup() -> None:
    """``--workloads startup``: the seconds of ``import inkpen`` and ``inkpen --help``."""
    from .startup import measure_startup

    _emit({"system": "inkpen", "workload": STARTUP, **measure_startup()})


def _check_choices(
    store_kind: str,
    scale: bool,
    metrics: str,
    idle: float | None,
    plot_file: Path | None,
    latency_ms: float | None,
    compaction: str,
    chosen: list[str],
) -> None:
    """Refuse the options that do not go together, before anything runs."""
    if metrics == "both" and (scale or idle is not None or plot_file is not None):
        raise click.BadParameter(
            "--metrics both compares the workloads with metrics off and on; it does not go "
            "with --scale, --idle or --plot (give on or off there)",
            param_hint="--metrics",
        )
    if plot_file is not None:
        if idle is not None:
            raise click.BadParameter(
                "--idle times no workload; leave --plot out", param_hint="--plot"
            )
        if not plot_file.absolute().parent.is_dir():
            raise click.BadParameter(
                f"{plot_file.parent} is not a directory to write the picture in",
                param_hint="--plot",
            )
        require_matplotlib()
    if latency_ms is not None:
        _check_latency_choices(store_kind, scale, idle, plot_file, metrics, compaction, chosen)


def _bench_scale(setup: _Setup, counts: list[int], plot_file: Path | None) -> None:
    """``--scale``: :func:`~inkpen.cli.scale.run_scale` for each N of ``counts``."""
    series: list[Series] | None = [] if plot_file is not None else None
    try:
        run_scale(
            setup.store,
            counts,
            setup.options,
            setup.value_size,
            setup.concurrency,
            setup.gets,
            {**setup.common, "flush_ms": setup.flush_ms},
            BUCKET,
            series=series,
        )
    except BenchmarkFailed as exc:
        raise click.ClickException(str(exc)) from exc
    if plot_file is not None and series is not None:
        plot(series, plot_file, setup.title(scale=True))


def _bench_latency(setup: _Setup, count: int, latency_ms: float) -> None:
    """``--latency-ms``: :func:`~inkpen.cli.latency.run_latency`, straight and through a proxy."""
    from .latency import run_latency  # when used: `-m inkpen.cli.latency_proxy` stays clean

    try:
        run_latency(
            lambda target: bench_store("s3", None, target, setup.bucket),
            setup.endpoint,
            count,
            setup.options,
            setup.value_size,
            setup.concurrency,
            setup.gets,
            {**setup.common, "flush_ms": setup.flush_ms},
            BUCKET,
            latency_ms,
        )
    except BenchmarkFailed as exc:
        raise click.ClickException(str(exc)) from exc


def _bench_idle(setup: _Setup, idle: float) -> None:
    """``--idle``: the store requests of a Bookie that sits idle after a few writes."""
    with setup.store() as inner:
        try:
            _run_idle(CountingStore(inner), setup.options, idle, setup.value_size, setup.common)
        except BenchmarkFailed as exc:
            raise click.ClickException(str(exc)) from exc


def _bench_workloads(
    setup: _Setup,
    count: int,
    chosen: list[str],
    compaction: str,
    metrics: str,
    rounds: int,
    plot_file: Path | None,
) -> None:
    """The workloads, each on a new database, once per side of ``--metrics`` (off, on, on, off
    ``rounds`` times with ``both``, then the ``metrics_cost`` line)."""
    series: list[Series] | None = [] if plot_file is not None else None
    sides = METRICS_ORDER * rounds if metrics == "both" else (metrics == "on",)
    runs: list[tuple[bool, dict[str, Run]]] = []
    for recording in sides:
        with setup.store() as inner:
            try:
                timings = _run_workloads(
                    CountingStore(inner),
                    {**setup.options, "metrics": recording},
                    set(chosen),
                    count,
                    setup.value_size,
                    setup.concurrency,
                    setup.gets,
                    {**setup.common, "flush_ms": setup.flush_ms, "metrics": recording},
                    compaction=compaction,
                    url=inner.url,
                    series=series,
                )
            except BenchmarkFailed as exc:
                raise click.ClickException(str(exc)) from exc
        runs.append((recording, timings))
    if plot_file is not None and series is not None:
        plot(series, plot_file, f"{setup.title(scale=False)}, N={count:,}")
    if metrics == "both":
        _emit(metrics_cost(runs, setup.common))


def _check_latency_choices(
    store_kind: str,
    scale: bool,
    idle: float | None,
    plot_file: Path | None,
    metrics: str,
    compaction: str,
    chosen: list[str],
) -> None:
    """``--latency-ms`` runs its own phases on an S3 store: refuse what does not go with it."""
    if store_kind != "s3":
        raise click.BadParameter(
            "the latency proxy sits in front of an S3 server; add --store s3 (and --endpoint)",
            param_hint="--latency-ms",
        )
    others = [
        name
        for name, given in (
            ("--scale", scale),
            ("--idle", idle is not None),
            ("--plot", plot_file is not None),
            ("--metrics both", metrics == "both"),
            ("--compaction external", compaction == "external"),
            ("--workloads", sorted(chosen) != sorted(WORKLOADS)),
        )
        if given
    ]
    if others:
        raise click.BadParameter(
            f"--latency-ms runs every phase of its own protocol; it does not go with "
            f"{', '.join(others)} (leave {'them' if len(others) > 1 else 'it'} out)",
            param_hint="--latency-ms",
        )


METRICS_ORDER = (False, True, True, False)
"""``--metrics both``: off, on, on, off, so that a drift of the machine weighs on both alike."""


@dataclass(frozen=True, slots=True)
class Run:
    """One workload's timing and the CPU seconds the process spent on it (every thread)."""

    timing: Timing
    cpu: float


def metrics_cost(runs: list[tuple[bool, dict[str, Run]]], common: dict[str, Any]) -> dict[str, Any]:
    """The ``metrics_cost`` line: per workload, the median throughput and CPU per operation with
    metrics off and on, and the cost of recording in percent of each off (negative: on did
    better, which is noise). CPU per operation is the steadier figure on a busy machine."""
    record: dict[str, Any] = {
        "system": common["system"],
        "workload": "metrics_cost",
        "store": common["store"],
        "runs_per_side": sum(1 for on, _ in runs if on),
    }
    for workload in WORKLOADS:
        if not all(workload in done and done[workload].timing.seconds > 0 for _, done in runs):
            continue
        for figure, of, worse in (
            ("ops_per_s", _ops_per_s, -1.0),
            ("cpu_us_per_op", _cpu_us_per_op, 1.0),
        ):
            off = statistics.median(of(done[workload]) for on, done in runs if not on)
            on_ = statistics.median(of(done[workload]) for on, done in runs if on)
            record[f"{workload}_{figure}_off"] = round(off, 2)
            record[f"{workload}_{figure}_on"] = round(on_, 2)
            record[f"{workload}_{figure}_cost_pct"] = round(worse * (on_ - off) / off * 100, 2)
    return record


def _ops_per_s(run: Run) -> float:
    return run.timing.ops / run.timing.seconds


def _cpu_us_per_op(run: Run) -> float:
    return run.cpu / run.timing.ops * 1e6


def _run_workloads(
    store: CountingStore,
    options: dict[str, Any],
    chosen: set[str],
    count: int,
    value_size: int,
    concurrency: int,
    gets: int,
    common: dict[str, Any],
    *,
    compaction: str = "internal",
    url: str = "",
    series: list[Series] | None = None,
) -> dict[str, Run]:
    """Run the chosen workloads; answers their timings and CPU seconds. With metrics on, the
    Bookie's own counts must equal the operations made (a benchmark that records must record
    them all)."""
    keys = bench_keys(count)
    value = os.urandom(value_size)
    timings: dict[str, Run] = {}
    recording = bool(options.get("metrics", True))
    origin: list[float] = []

    def report(
        workload: str, timing: Timing, before: dict[str, int], cpu: float, **extra: Any
    ) -> None:
        cpu = time.process_time() - cpu
        if series is not None:
            origin.append(origin[0] if origin else timing.started)
            series.append(Series.of("", workload, timing, origin[0]))
        _emit(
            {
                "system": common["system"],
                "workload": workload,
                **timing.figures(),
                "cpu_s": round(cpu, 3),
                "cpu_us_per_op": round(cpu / timing.ops * 1e6, 2) if timing.ops else 0.0,
                **extra,
                "store": common["store"],
                **_delta(store.snapshot(), before),
                "peak_rss_mb": peak_rss_mb(),
                **({"metrics": common["metrics"]} if "metrics" in common else {}),
            }
        )
        timings[workload] = Run(timing, cpu)

    with inkpen.open(store, **options, compaction=compaction) as book:
        with _compactor_beside(url if compaction == "external" else None):
            before, cpu = store.snapshot(), time.process_time()
            timing = run_load(book, BUCKET, keys, value, concurrency)
        _check_counted(book, recording, "puts", count)
        if "load" in chosen:
            report(
                "load",
                timing,
                before,
                cpu,
                concurrency=concurrency,
                value_size=value_size,
                flush_ms=common["flush_ms"],
                compaction=compaction,
            )
    with inkpen.open(store, **options) as book:
        if "get" in chosen:
            sample = get_sample(keys, gets)
            before, cpu = store.snapshot(), time.process_time()
            timing = run_gets(book, BUCKET, sample, value)
            _check_counted(book, recording, "gets", len(sample))
            report("get", timing, before, cpu)
        if "scan" in chosen:
            before, cpu = store.snapshot(), time.process_time()
            timing = run_scan(book, BUCKET, value, count)
            report("scan", timing, before, cpu)
    return timings


def _check_counted(book: inkpen.Bookie, recording: bool, field: str, made: int) -> None:
    counted = getattr(book.metrics(), field)
    if counted != (made if recording else 0):
        raise BenchmarkFailed(
            f"Bookie.metrics().{field} is {counted} after {made} operations with metrics "
            f"{'on' if recording else 'off'}"
        )


@contextlib.contextmanager
def _compactor_beside(url: str | None) -> Iterator[None]:
    """An ``inkpen compactor URL`` process for the block's duration (None: none), entered once
    it has claimed the compactor role; it is asked to stop with SIGTERM (it ends after its
    current round)."""
    if url is None:
        yield
        return
    command = [sys.executable, "-m", "inkpen.cli", "compactor", url, "--interval", "0.2s"]
    env = {**os.environ, "PYTHONSAFEPATH": "1"}  # the current directory never shadows inkpen
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    try:
        claimed = process.stdout.readline()  # "compactor epoch N claimed for URL"
        if "claimed" not in claimed:
            raise BenchmarkFailed(f"the compactor beside the load did not start: {claimed!r}")
        threading.Thread(target=process.stdout.read, daemon=True).start()  # keep it unblocked
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _run_idle(
    store: CountingStore,
    options: dict[str, Any],
    seconds: float,
    value_size: int,
    common: dict[str, Any],
) -> None:
    value = os.urandom(value_size)
    with inkpen.open(store, **options) as book:
        for i in range(IDLE_WRITES):
            book.put(BUCKET, b"idle%06d" % i, value)
        before = store.snapshot()
        time.sleep(seconds)
        counts = _delta(store.snapshot(), before)
    _emit(
        {
            "system": common["system"],
            "workload": "idle",
            "seconds": seconds,
            "writes_before": IDLE_WRITES,
            "store": common["store"],
            **counts,
            "requests": sum(v for k, v in counts.items() if not k.startswith("bytes_")),
            "peak_rss_mb": peak_rss_mb(),
        }
    )
