"""``inkpen bench``: one JSON line per workload in the peer harness's shape, and an idle writer
that makes no store requests."""

from __future__ import annotations

import json
import random
import struct
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from inkpen.cli import main
from inkpen.cli.bench import flush_options
from inkpen.cli.bench_plot import METADATA_KEY
from inkpen.cli.limits import io_per_op, pread_rate, process_io
from inkpen.cli.scale import RATIO_FIGURES
from inkpen.cli.workloads import (
    LOAD_SEED,
    Latencies,
    PerSecond,
    SharedSeconds,
    bench_keys,
    get_sample,
)
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.objectstore.seaweed import SeaweedServer

PEER_KEYS = {"system", "workload", "ops", "seconds", "ops_per_s", "store"}
REQUEST_KEYS = {"puts", "gets", "heads", "lists", "deletes", "copies", "bytes_written"}


def png_text(path: Path) -> dict[str, str]:
    """The text chunks of the PNG file at ``path``, which must be a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    found: dict[str, str] = {}
    at = 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        if kind == b"tEXt":
            key, _, text = data[at + 8 : at + 8 + length].partition(b"\0")
            found[key.decode("latin-1")] = text.decode("latin-1")
        at += 12 + length
    return found


def plotted(path: Path) -> list[dict[str, Any]]:
    """The series a ``--plot`` PNG says it drew, after checking that it is a plausible picture."""
    assert 20_000 < path.stat().st_size < 5_000_000
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    assert width >= 800 and height >= 400
    series: list[dict[str, Any]] = json.loads(png_text(path)[METADATA_KEY])
    return series


def run_bench(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines() if line.strip()]


def test_bench_prints_one_line_per_workload_with_the_peer_fields() -> None:
    lines = run_bench("--n", "2000", "--store", "file")
    assert [line["workload"] for line in lines] == ["load", "get", "scan"]
    for line in lines:
        assert line.keys() >= PEER_KEYS | REQUEST_KEYS | {"peak_rss_mb"}
        assert line["system"] == "inkpen"
        assert line["store"] == "file"
        assert line["ops"] == 2000
        assert line["ops_per_s"] > 0
        assert line["peak_rss_mb"] > 0
    load, get, _ = lines
    for timed in (load, get):
        assert 0 < timed["p50_ms"] <= timed["p99_ms"]
    assert load["concurrency"] == 256 and load["flush_ms"] == 10 and load["value_size"] == 100
    assert load["puts"] > 0  # the journal segments the load wrote were counted


def test_bench_reports_only_the_workloads_asked_for() -> None:
    lines = run_bench("--n", "300", "--gets", "100", "--workloads", "get", "--concurrency", "8")
    assert [(line["workload"], line["ops"]) for line in lines] == [("get", 100)]


def test_bench_times_the_start_of_new_processes_when_asked() -> None:
    (line,) = run_bench("--workloads", "startup")
    assert line["workload"] == "startup"
    assert line["python_s"] > 0 and line["import_s"] > 0 and line["help_s"] > 0
    assert 100 < line["modules"] < 1000  # inkpen and what it imports, in a new interpreter
    lines = run_bench("--workloads", "startup,get", "--n", "300", "--gets", "100")
    assert [each["workload"] for each in lines] == ["startup", "get"]


def test_bench_plots_each_phase_second_by_second(tmp_path: Path) -> None:
    picture = tmp_path / "bench.png"
    lines = run_bench("--n", "1500", "--gets", "400", "--concurrency", "16", "--plot", str(picture))
    series = plotted(picture)
    assert [(s["run"], s["phase"]) for s in series] == [("", "load"), ("", "get"), ("", "scan")]
    for line, drawn in zip(lines, series, strict=True):
        assert drawn["ops"] == line["ops"] and sum(drawn["per_second"]) == line["ops"]
        assert len(drawn["per_second"]) == int(drawn["seconds"]) + 1
        assert len(drawn["p50_ms"]) == len(drawn["p99_ms"]) == len(drawn["per_second"])
    load, get, scan = series
    assert load["start_s"] == 0 < get["start_s"] < scan["start_s"]
    for timed in (load, get):
        pairs = [(a, b) for a, b in zip(timed["p50_ms"], timed["p99_ms"], strict=True) if a]
        assert pairs and all(0 < p50 <= p99 for p50, p99 in pairs)
    assert set(scan["p50_ms"]) == {None}  # the scan is timed as a whole


def test_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    picture = tmp_path / "bench.png"
    result = CliRunner().invoke(main, ["bench", "--n", "100", "--plot", str(picture)])
    assert result.exit_code == 1
    assert "pip install 'inkpen[plot]'" in result.output
    assert '"workload"' not in result.output, "the benchmark ran before the check"
    assert not picture.exists()


def test_plot_into_a_missing_directory_is_refused_before_the_run(tmp_path: Path) -> None:
    picture = tmp_path / "no" / "bench.png"
    result = CliRunner().invoke(main, ["bench", "--n", "100", "--plot", str(picture)])
    assert result.exit_code == 2 and "--plot" in result.output
    assert '"workload"' not in result.output


def test_plot_with_idle_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "--idle", "1", "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "--plot" in result.output


def test_metrics_both_runs_off_and_on_and_prints_the_cost() -> None:
    lines = run_bench("--n", "600", "--gets", "200", "--concurrency", "16", "--metrics", "both")
    *runs, cost = lines
    assert [(line["workload"], line["metrics"]) for line in runs] == [
        (workload, side)
        for side in (False, True, True, False)
        for workload in ("load", "get", "scan")
    ]
    assert all(line["ops"] == (200 if line["workload"] == "get" else 600) for line in runs)
    assert all(line["cpu_s"] > 0 and line["cpu_us_per_op"] > 0 for line in runs)
    assert cost["workload"] == "metrics_cost" and cost["runs_per_side"] == 2
    for workload in ("load", "get", "scan"):
        for figure, worse in (("ops_per_s", -1), ("cpu_us_per_op", 1)):
            for side, name in ((False, "off"), (True, "on")):
                both = [
                    line[figure]
                    for line in runs
                    if line["metrics"] is side and line["workload"] == workload
                ]
                median = sum(both) / 2  # the median of two
                # the runs' figures and the median are printed rounded (a rate to one decimal,
                # CPU to two): a rate is off by a part in a thousand at most, CPU by 0.01
                assert cost[f"{workload}_{figure}_{name}"] == pytest.approx(
                    median, rel=0.001, abs=0.0101
                )
            off, on = cost[f"{workload}_{figure}_off"], cost[f"{workload}_{figure}_on"]
            pct = cost[f"{workload}_{figure}_cost_pct"]
            # off and on are printed to two decimals, so the percentage recomputed from them
            # differs from the printed one by up to 0.005 * (200 + pct) / off, plus its rounding
            slack = 0.01 + 0.005 / off * (200 + abs(pct)) * 1.01
            assert pct == pytest.approx(worse * (on - off) / off * 100, abs=slack)


def test_metrics_off_and_metrics_both_with_scale_idle_or_plot() -> None:
    (load,) = run_bench("--n", "300", "--workloads", "load", "--metrics", "off")
    assert load["metrics"] is False and load["ops"] == 300
    for other in (["--scale"], ["--idle", "1s"], ["--plot", "bench.png"]):
        result = CliRunner().invoke(main, ["bench", "--metrics", "both", *other])
        assert (
            result.exit_code != 0 and "does not go with --scale, --idle or --plot" in result.output
        )


def test_unknown_workload_is_refused() -> None:
    result = CliRunner().invoke(main, ["bench", "--workloads", "load,sort"])
    assert result.exit_code != 0
    assert "sort" in result.output


def test_an_idle_writer_makes_no_store_requests() -> None:
    (line,) = run_bench("--idle", "2", "--store", "file")
    assert line["workload"] == "idle"
    assert line["writes_before"] > 0
    counted = {key: line[key] for key in REQUEST_KEYS | {"bytes_read"}}
    assert counted == dict.fromkeys(counted, 0)
    assert line["requests"] == 0


def test_flush_ms_maps_to_the_group_commit_policy() -> None:
    assert flush_options(0) == {"flush_policy": "idle"}
    assert flush_options(10) == {"flush_policy": "interval", "flush_interval": 0.01}


@pytest.mark.s3
def test_bench_on_s3_creates_its_bucket(seaweed: SeaweedServer) -> None:
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    lines = run_bench(
        "--store",
        "s3",
        "--endpoint",
        seaweed.endpoint,
        "--bucket",
        bucket,
        "--n",
        "500",
        "--concurrency",
        "16",
    )
    assert [line["workload"] for line in lines] == ["load", "get", "scan"]
    assert all(line["store"] == "s3" and line["ops"] == 500 for line in lines)
    seaweed.client.head_bucket(Bucket=bucket)


def test_scale_mode_prints_each_figure_for_each_n_and_the_ratios(tmp_path: Path) -> None:
    picture = tmp_path / "scale.png"
    lines = run_bench(
        "--scale",
        "--n",
        "1500,3000",
        "--concurrency",
        "16",
        "--gets",
        "300",
        "--store",
        "file",
        "--plot",
        str(picture),
    )
    parts = ["load", "close", "open", "settle", "get", "get16", "get_warm", "scan", "limit", "kill"]
    assert [(line.get("n"), line["workload"]) for line in lines] == [
        *((1500, part) for part in parts),
        *((3000, part) for part in parts),
        (None, "ratios"),
    ]
    by = {(line.get("n"), line["workload"]): line for line in lines}
    for n in (1500, 3000):
        load = by[n, "load"]
        assert load["ops"] == n and sum(load["per_second"]) == n
        assert 0 < load["p50_ms"] <= load["p99_ms"] <= load["max_ms"]
        assert load["stalls"] >= 0 and load["median_per_s"] > 0
        assert load["peak_rss_mb"] > 0 and load["puts"] > 0
        close = by[n, "close"]
        # the store's bytes against N x (key + value), in a bounded number of objects (one
        # value written everywhere compresses: the ratio may be below 1)
        assert close["store_bytes"] > 0
        assert close["store_ratio"] == round(close["store_bytes"] / (n * (16 + 100)), 3)
        assert 0 < close["store_objects"] < n
        assert by[n, "open"]["open_s"] > 0
        assert by[n, "settle"]["settle_s"] >= 0
        for part in ("get", "get16", "get_warm"):
            line = by[n, part]
            assert line["ops"] == 300 and 0 < line["p50_ms"] <= line["p99_ms"] <= line["max_ms"]
            assert 0 <= line["bytes_read_per_op"] <= 16 * 1024
        assert by[n, "get"]["bytes_read_per_op"] > 0  # the first gets are cold: from the store
        assert by[n, "get16"]["threads"] == 16
        scan = by[n, "scan"]
        assert scan["ops"] == n and scan["ops_per_s"] > 0
        assert 0 <= scan["bytes_read"] <= close["store_bytes"]  # each byte at most once
        for part in ("get", "get16", "get_warm", "scan"):  # the process's own read calls
            assert by[n, part]["os_reads_per_op"] >= 0 and by[n, part]["os_bytes_per_op"] >= 0
        limit = by[n, "limit"]
        assert limit["read_bytes"] == 4096
        for threads, part in ((1, "get"), (16, "get16")):
            rate = limit[f"pread_{threads}_per_s"]
            assert rate > 0
            ratio = limit[f"{part}_to_pread"]
            assert ratio == pytest.approx(by[n, part]["ops_per_s"] / rate, rel=0.01, abs=0.002)
            ledger_rate = limit[f"ledger_pread_{threads}_per_s"]
            assert ledger_rate > 0
            ledger_ratio = limit[f"{part}_to_ledger_pread"]
            assert ledger_ratio == pytest.approx(
                by[n, part]["ops_per_s"] / ledger_rate, rel=0.01, abs=0.002
            )
        kill = by[n, "kill"]
        assert kill["open_s"] > 0 and kill["acked"] >= 5000
    timed = ["load", "get", "get16", "get_warm", "scan"]
    series = plotted(picture)
    assert [(s["run"], s["phase"]) for s in series] == [
        (f"N={n:,}", part) for n in (1500, 3000) for part in timed
    ]
    for drawn in series:
        n = int(drawn["run"][2:].replace(",", ""))
        assert sum(drawn["per_second"]) == drawn["ops"] == by[n, drawn["phase"]]["ops"]
    ratios = by[None, "ratios"]
    assert ratios["base_n"] == 1500
    row = ratios["ratios"]["3000"]
    assert set(row) == {f"{workload}.{figure}" for workload, figure in RATIO_FIGURES}
    assert row["load.ops_per_s"] > 0
    assert row["get.ops_per_s"] == pytest.approx(
        by[3000, "get"]["ops_per_s"] / by[1500, "get"]["ops_per_s"], rel=0.01
    )


def test_several_counts_without_scale_are_refused() -> None:
    result = CliRunner().invoke(main, ["bench", "--n", "100,200"])
    assert result.exit_code != 0
    assert "--scale" in result.output


LATENCY_PHASES = ["open_new", "load", "close", "open", "settle", "get", "get32", "scan", "kill"]


@pytest.mark.s3
@pytest.mark.latency
def test_latency_mode_runs_every_phase_without_and_behind_the_proxy(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inkpen.cli import scale

    monkeypatch.setattr(scale, "KILL_AFTER", 100)
    round_trip_ms = 25.0
    lines = run_bench(
        "--store",
        "s3",
        "--endpoint",
        seaweed.endpoint,
        "--latency-ms",
        str(round_trip_ms),
        "--n",
        "300",
        "--gets",
        "30",
        "--concurrency",
        "16",
    )
    assert [(line["latency_ms"], line["workload"]) for line in lines] == [
        *((0.0, phase) for phase in LATENCY_PHASES),
        *((round_trip_ms, phase) for phase in LATENCY_PHASES),
        (round_trip_ms, "latency"),
    ]
    by = {(line["latency_ms"], line["workload"]): line for line in lines}
    for delay in (0.0, round_trip_ms):
        behind = delay > 0
        for phase in LATENCY_PHASES:
            line = by[delay, phase]
            assert line["store"] == "s3" and line["n"] == 300
            assert ("proxy_requests" in line) == behind
            if behind and line["requests"]:
                assert line["proxy_requests"] > 0 and line["proxy"]["requests"] > 0
        load = by[delay, "load"]
        assert load["ops"] == 300 and load["puts"] > 0 and 0 < load["requests_per_op"] < 1
        for phase in ("get", "get32"):
            assert by[delay, phase]["ops"] == (30 if phase == "get" else 120)
        assert by[delay, "get32"]["threads"] == 32
        assert by[delay, "scan"]["ops"] == 300
        assert by[delay, "kill"]["acked"] >= 100 and by[delay, "kill"]["open_s"] > 0
        for phase in ("open_new", "close", "open", "kill"):
            assert by[delay, phase]["requests"] > 0
    round_trip = round_trip_ms / 1e3
    delayed = {phase: by[round_trip_ms, phase] for phase in LATENCY_PHASES}
    # Lower bounds the proxy sets: a put waits for its segment's write, a round trip at least;
    # an open and a close each make requests, one after another at least once.
    assert delayed["load"]["p50_ms"] >= round_trip_ms and delayed["load"]["p50_round_trips"] >= 1
    for phase in ("open_new", "open", "kill"):
        assert delayed[phase]["open_s"] >= round_trip
    assert delayed["close"]["close_s"] >= round_trip
    summary = by[round_trip_ms, "latency"]
    assert summary["ratios"]["load.ops_per_s"] == pytest.approx(
        delayed["load"]["ops_per_s"] / by[0.0, "load"]["ops_per_s"], rel=0.01
    )
    assert summary["load_p50_round_trips"] >= 1
    assert set(summary["targets"]) == {
        "load_ops_ratio",
        "load_p50_round_trips",
        "close_s",
        "open_s",
        "kill_open_s",
        "get32_to_one_thread",
        "scan_ops_ratio",
    }
    assert summary["requests_per_op"]["load"]["delayed"] == delayed["load"]["requests_per_op"]


def test_latency_mode_needs_an_s3_store_and_its_own_phases() -> None:
    for args, says in (
        ([], "--store s3"),
        (["--store", "s3", "--scale"], "--scale"),
        (["--store", "s3", "--workloads", "load"], "--workloads"),
        (["--store", "s3", "--idle", "1s", "--compaction", "external"], "--idle, --compaction"),
    ):
        result = CliRunner().invoke(main, ["bench", "--latency-ms", "25", *args])
        assert result.exit_code == 2 and says in result.output, result.output
    result = CliRunner().invoke(main, ["bench", "--store", "s3", "--latency-ms", "0"])
    assert result.exit_code == 2 and "--latency-ms" in result.output


def test_bench_load_with_a_compactor_beside_it(tmp_path: Path) -> None:
    (load,) = run_bench(
        "--n", "3000", "--workloads", "load", "--compaction", "external", "--root", str(tmp_path)
    )
    assert load["compaction"] == "external"
    assert load["ops"] == 3000
    assert 0 < load["p99_ms"] <= load["max_ms"]
    (database,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    store = open_store(str(database))
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        assert latest.manifest.compactor_epoch >= 1, "no compactor claimed the database"
    finally:
        store.close()


def test_bench_keys_are_the_protocols_shuffled_keys_made_on_demand() -> None:
    expected = [b"key%013d" % i for i in range(5_000)]
    random.Random(LOAD_SEED).shuffle(expected)
    keys = bench_keys(5_000)
    assert list(keys) == expected
    assert keys[10:20] == expected[10:20]
    assert get_sample(keys, 100) == get_sample(expected, 100)


def test_latency_histogram_quantiles_are_within_one_percent_of_the_exact_ones() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(-6, 1.5) for _ in range(20_000)] + [0.0, 5e-7]
    halves = Latencies(), Latencies()
    for i, value in enumerate(values):
        halves[i % 2].record(value)
    whole = Latencies.merged(halves)
    ordered = sorted(values)
    assert whole.count == len(values)
    assert whole.max == ordered[-1]
    for q in (0.5, 0.9, 0.99):
        exact = ordered[int(len(ordered) * q)]
        assert exact <= whole.quantile(q) <= exact * 1.0201


def test_shared_seconds_from_many_threads_equal_one_histogram_per_second_and_client() -> None:
    """The load's recorder keeps one histogram per second of the run (not per client), and
    counts exactly what per-client recorders merged at the end count (the oracle)."""
    rng = random.Random(11)
    clients = 8
    started = 1000.0
    operations = [
        [(started + rng.uniform(0, 6.5), rng.lognormvariate(-5, 1)) for _ in range(2_000)]
        for _ in range(clients)
    ]
    for ops in operations:
        ops.sort()
    shared = SharedSeconds(started)
    go = threading.Barrier(clients)

    def client(ops: list[tuple[float, float]]) -> None:
        mine = shared.client()
        go.wait()
        for done, seconds in ops:
            mine.record(done, seconds)
        mine.close()

    threads = [threading.Thread(target=client, args=(ops,)) for ops in operations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(shared.whole.seconds) == 7  # one histogram per second, whatever the clients
    parts = []
    for ops in operations:
        part = PerSecond(started)
        for done, seconds in ops:
            part.record(done, seconds)
        parts.append(part)
    expected = PerSecond.merged(parts, 6.5)
    got = shared.merged(6.5)
    assert got.counts == expected.counts
    assert sum(got.counts) == clients * 2_000
    for mine, theirs in zip(got.seconds, expected.seconds, strict=True):
        assert (mine.counts, mine.count, mine.max) == (theirs.counts, theirs.count, theirs.max)


def test_pread_rate_reads_the_files_of_a_directory_and_skips_small_ones(tmp_path: Path) -> None:
    assert pread_rate(str(tmp_path), 1, calls=10) is None  # nothing to read
    (tmp_path / "small").write_bytes(b"x" * 100)
    assert pread_rate(str(tmp_path), 1, calls=10) is None  # smaller than one read
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big").write_bytes(b"y" * 64 * 1024)
    before = process_io()
    rate = pread_rate(str(tmp_path), 4, calls=200)
    assert rate is not None and rate > 0
    after = process_io()
    if before:  # Linux: the 200 reads show in the process's own counters
        assert after["syscr"] - before["syscr"] >= 200
        assert after["rchar"] - before["rchar"] >= 200 * 4096
        per_op = io_per_op(before, after, 200)
        assert per_op["os_reads_per_op"] >= 1 and per_op["os_bytes_per_op"] >= 4096


def test_the_limit_passes_read_different_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The 16-thread pass must not read the pages the 1-thread pass just brought into the page
    # cache: each pass draws its own offsets.
    from inkpen.cli import scale

    seeds: list[tuple[str, int, int]] = []

    def recorded(root: str, threads: int, calls: int = 10, seed: int = 0) -> float:
        seeds.append((root, threads, seed))
        return 1000.0 if root == str(tmp_path) else 2000.0

    monkeypatch.setattr(scale, "pread_rate", recorded)
    record = scale._limit(str(tmp_path), {"get": {"ops_per_s": 800.0}})
    assert record["pread_1_per_s"] == 1000.0 and record["get_to_pread"] == 0.8
    assert record["ledger_pread_1_per_s"] == 2000.0 and record["get_to_ledger_pread"] == 0.4
    assert record["get16_to_pread"] is None  # no get16 figure given
    ledger = str(tmp_path / "ledger")
    assert sorted((root, threads) for root, threads, _ in seeds) == sorted(
        (root, threads) for root in (str(tmp_path), ledger) for threads in (1, scale.GET_THREADS)
    )
    assert len({seed for _, _, seed in seeds}) == len(seeds)
