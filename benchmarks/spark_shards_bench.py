"""Spark over a sharded data set against one database: bulk-load and read rows/s, the ratios, and
where the time goes.

    python benchmarks/spark_shards_bench.py                    # N = 200,000, 8 shards, local[2]
    python benchmarks/spark_shards_bench.py --n 1000000 --rounds 3
    python benchmarks/spark_shards_bench.py --n 50000 --shards 4 --partitions 4

The same generated DataFrame (four buckets, ten-digit keys, values of about 100 bytes) is loaded
into one database and into a data set of ``--shards`` shards, each in a fresh temporary
directory, then each is read back whole (every value, summed by Spark). ``--rounds`` repeats
both, alternating which goes first, so that a machine whose load changes during the run weighs
on both alike; the ratios (data set / one database) are taken per round and their median
reported.

``cpu`` is the CPU time the step took in this process and every process under it (Spark's JVM,
its Python workers and planners): less sensitive than wall time to other work on a shared
machine, so the ratio of rows per CPU second says which layout does more work. Each step is
split, from Spark's own REST API (the session's UI runs on a free port), into its
Spark jobs' wall time (the tasks: Arrow batches in and out of Python, the inkpen work of each
task) and the rest of the call's wall time, spent on the driver and in its planner workers:
for a load, opening the databases before the job and the commit after it; for a read, pinning
at ``load()`` and planning the partitions. ``task_s`` sums the tasks' executor run time
(``executorRunTime``), ``tasks`` counts them. Everything is printed once more as one JSON line.

``--baseline REF`` measures another version of inkpen in the same run: the package as git
holds it at REF is laid out under a temporary directory as it installs (``package-dir`` of its
pyproject.toml) and put first on ``PYTHONPATH`` (the driver's, and Spark's Python workers',
which inherit it) of a child process running one round; children of REF and of this checkout
alternate, each round in a fresh Spark session, and the ratios of both versions and the data
set's gain (this checkout / REF) are printed per round and as medians.

    python benchmarks/spark_shards_bench.py --n 1000000 --rounds 2 --baseline main
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.request
import uuid
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import inkpen.pipeline
import inkpen.shards


def generate(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    ids = spark.range(0, n, numPartitions=partitions)
    return ids.select(
        F.concat(F.lit("bucket-"), (F.col("id") % 4).cast("string")).alias("bucket"),
        F.format_string("key-%010d", F.col("id")).alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string"), F.lit("-" + "x" * 80))
        .cast("binary")
        .alias("value"),
    )


def _get(spark: SparkSession, path: str) -> Any:
    base = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/{path}", timeout=30) as reply:
        return json.load(reply)


def _when(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%Z").timestamp()


def spark_time(spark: SparkSession, group: str) -> dict[str, float]:
    """The Spark jobs of ``group``: their wall seconds (first submission to last completion),
    tasks and summed executor run time."""
    jobs = [j for j in _get(spark, "jobs") if j.get("jobGroup") == group]
    if not jobs:
        return {"jobs": 0, "job_s": 0.0, "tasks": 0, "task_s": 0.0}
    start = min(_when(j["submissionTime"]) for j in jobs)
    end = max(_when(j["completionTime"]) for j in jobs)
    tasks, run_ms = 0, 0
    for job in jobs:
        for stage_id in job["stageIds"]:
            for attempt in _get(spark, f"stages/{stage_id}"):
                tasks += attempt.get("numCompleteTasks", 0)
                run_ms += attempt.get("executorRunTime", 0)
    return {"jobs": len(jobs), "job_s": end - start, "tasks": tasks, "task_s": run_ms / 1000}


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu() -> float:
    """CPU seconds used so far by this process and every process under it (the Spark JVM, its
    Python workers and planners), those already exited and reaped included: less sensitive to
    other work on the machine than wall time."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(pid)
        times[pid] = sum(int(f) for f in fields[11:15]) / _TICK  # utime stime cutime cstime
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def timed(spark: SparkSession, name: str, action: Any) -> dict[str, float]:
    group = f"{name}-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, name)
    cpu = tree_cpu()
    started = time.perf_counter()
    try:
        action()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    cpu = tree_cpu() - cpu
    # the REST API lags the job's end by a moment: wait for every job of the group to show done
    deadline = time.monotonic() + 30
    while True:
        jobs = [j for j in _get(spark, "jobs") if j.get("jobGroup") == group]
        if all(j.get("completionTime") for j in jobs) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    figures = spark_time(spark, group)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        **figures,
        "driver_s": max(0.0, wall - figures["job_s"]),
    }


def load_and_read(
    spark: SparkSession, url: str, n: int, partitions: int
) -> dict[str, dict[str, float]]:
    frame = generate(spark, n, partitions)
    load = timed(
        spark,
        "load",
        lambda: frame.write.format("inkpen").option("path", url).mode("append").save(),
    )
    found: list[Any] = []

    def read() -> None:
        found.append(
            spark.read.format("inkpen")
            .option("path", url)
            .load()
            .select(F.count("*"), F.sum(F.length("value")))
            .first()
        )

    read_figures = timed(spark, "read", read)
    assert found[0] is not None and int(found[0][0]) == n, found
    for figures in (load, read_figures):
        figures["rows_per_s"] = n / figures["wall_s"]
        figures["rows_per_cpu_s"] = n / figures["cpu_s"]
    return {"load": load, "read": read_figures}


def one_round(
    spark: SparkSession, root: str, args: argparse.Namespace, number: int
) -> dict[str, Any]:
    where = os.path.join(root, f"round-{number}")
    results: dict[str, Any] = {}
    order = ["one", "set"] if number % 2 == 0 else ["set", "one"]
    for layout in order:
        url = os.path.join(where, layout)
        if layout == "set":
            inkpen.shards.create(url, shards=args.shards)
        results[layout] = load_and_read(spark, url, args.n, args.partitions)
        shutil.rmtree(url, ignore_errors=True)
    results["order"] = order
    for step in ("load", "read"):
        set_figures, one_figures = results["set"][step], results["one"][step]
        results[f"{step}_ratio"] = set_figures["rows_per_s"] / one_figures["rows_per_s"]
        results[f"{step}_cpu_ratio"] = set_figures["rows_per_cpu_s"] / one_figures["rows_per_cpu_s"]
    return results


def _row(name: str, figures: dict[str, float]) -> str:
    return (
        f"  {name:<14} {figures['rows_per_s']:>9,.0f} rows/s  cpu {figures['cpu_s']:6.1f} s  "
        f"wall {figures['wall_s']:6.1f} s = "
        f"jobs {figures['job_s']:6.1f} s + driver {figures['driver_s']:5.1f} s; "
        f"{figures['tasks']:>3.0f} tasks, task time {figures['task_s']:6.1f} s"
    )


def _session(master: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("inkpen-shards-bench")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", "0")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    inkpen.pipeline.register(spark)
    return spark


def _warm(spark: SparkSession, root: str, args: argparse.Namespace) -> None:
    """Start the JVM's and Python's workers, load the ``inkpen`` source and run each step on
    both layouts twice, so that the first measured step pays none of that (the first few
    loads and reads of a session are several times slower than the later ones)."""
    for number in range(2):
        for layout in ("one", "set"):
            url = os.path.join(root, f"warm-{layout}-{number}")
            if layout == "set":
                inkpen.shards.create(url, shards=args.shards)
            frame = generate(spark, 4000, args.partitions)
            frame.write.format("inkpen").option("path", url).mode("append").save()
            spark.read.format("inkpen").option("path", url).load().count()
            shutil.rmtree(url, ignore_errors=True)


def run_rounds(args: argparse.Namespace, numbers: list[int]) -> list[dict[str, Any]]:
    spark = _session(args.master)
    root = tempfile.mkdtemp(prefix="inkpen-shards-bench-")
    rounds: list[dict[str, Any]] = []
    try:
        _warm(spark, root, args)
        for number in numbers:
            rounds.append(one_round(spark, root, args, number))
            rounds[-1]["inkpen"] = os.path.dirname(inkpen.__file__)
            if not args.child:
                _print_round(rounds[-1], number, args.shards)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return rounds


def _print_round(done: dict[str, Any], number: int, shards: int, label: str = "") -> None:
    print(
        f"round {number + 1}{label} ({' then '.join(done['order'])}): load "
        f"{done['load_ratio']:.2f}x, read {done['read_ratio']:.2f}x; per CPU second: load "
        f"{done['load_cpu_ratio']:.2f}x, read {done['read_cpu_ratio']:.2f}x",
        flush=True,
    )
    for layout, name in (("one", "one database"), ("set", f"{shards} shards")):
        for step in ("load", "read"):
            print(_row(f"{name} {step}", done[layout][step]), flush=True)


def baseline_tree(ref: str, where: str) -> str:
    """inkpen as git holds it at ``ref``, laid out as installed (its package-dir mapping)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = os.path.join(where, "source")
    os.makedirs(source)
    archive = subprocess.run(
        ["git", "-C", repo, "archive", ref], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    with open(os.path.join(source, "pyproject.toml"), "rb") as config:
        setup = tomllib.load(config)["tool"]["setuptools"]
    tree = os.path.join(where, "tree")
    for package, folder in sorted(setup["package-dir"].items(), key=lambda p: p[0].count(".")):
        shutil.copytree(os.path.join(source, folder), os.path.join(tree, *package.split(".")))
    for module in setup.get("py-modules", []):
        shutil.copy(os.path.join(source, f"{module}.py"), tree)
    return tree


def _child(args: argparse.Namespace, number: int, tree: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--first-round",
        str(number),
        "--n",
        str(args.n),
        "--shards",
        str(args.shards),
        "--partitions",
        str(args.partitions),
        "--master",
        args.master,
    ]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])["rounds"][0]
    if tree is not None and not found["inkpen"].startswith(tree):
        raise SystemExit(f"the baseline child imported {found['inkpen']}, not {tree}")
    return found


def compare(args: argparse.Namespace) -> dict[str, Any]:
    where = tempfile.mkdtemp(prefix="inkpen-shards-baseline-")
    pairs: list[dict[str, Any]] = []
    try:
        tree = baseline_tree(args.baseline, where)
        for number in range(args.rounds):
            order = ["baseline", "current"] if number % 2 == 0 else ["current", "baseline"]
            pair: dict[str, Any] = {"order": order}
            for version in order:
                pair[version] = _child(args, number, tree if version == "baseline" else None)
                _print_round(pair[version], number, args.shards, f" {version}")
            pair["set_load_gain"] = (
                pair["current"]["set"]["load"]["rows_per_s"]
                / pair["baseline"]["set"]["load"]["rows_per_s"]
            )
            pair["set_read_gain"] = (
                pair["current"]["set"]["read"]["rows_per_s"]
                / pair["baseline"]["set"]["read"]["rows_per_s"]
            )
            print(
                f"round {number + 1}: data set, this checkout / {args.baseline}: load "
                f"{pair['set_load_gain']:.2f}x, read {pair['set_read_gain']:.2f}x",
                flush=True,
            )
            pairs.append(pair)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    result: dict[str, Any] = {
        "n": args.n,
        "shards": args.shards,
        "partitions": args.partitions,
        "master": args.master,
        "baseline": args.baseline,
        "rounds": pairs,
    }
    for version in ("baseline", "current"):
        for step in ("load", "read"):
            for kind in ("", "_cpu"):
                result[f"{version}_{step}{kind}_ratio"] = statistics.median(
                    p[version][f"{step}{kind}_ratio"] for p in pairs
                )
    for step in ("load", "read"):
        result[f"set_{step}_gain"] = statistics.median(p[f"set_{step}_gain"] for p in pairs)
    print(
        f"N = {args.n:,}, {args.master}, load partitions {args.partitions}, {args.rounds} "
        f"round(s), medians: shards / one database: {args.baseline} load "
        f"{result['baseline_load_ratio']:.2f}x read {result['baseline_read_ratio']:.2f}x; this "
        f"checkout load {result['current_load_ratio']:.2f}x read "
        f"{result['current_read_ratio']:.2f}x; data set this checkout / {args.baseline}: load "
        f"{result['set_load_gain']:.2f}x read {result['set_read_gain']:.2f}x; per CPU second, "
        f"shards / one database: {args.baseline} load {result['baseline_load_cpu_ratio']:.2f}x "
        f"read {result['baseline_read_cpu_ratio']:.2f}x, this checkout load "
        f"{result['current_load_cpu_ratio']:.2f}x read {result['current_read_cpu_ratio']:.2f}x"
    )
    print(json.dumps(result))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions of the load")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--baseline", help="a git ref of inkpen to measure in the same run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first-round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline:
        return compare(args)
    rounds = run_rounds(args, [args.first_round + i for i in range(args.rounds)])
    result = {
        "n": args.n,
        "shards": args.shards,
        "partitions": args.partitions,
        "master": args.master,
        "rounds": rounds,
        "load_ratio": statistics.median(r["load_ratio"] for r in rounds),
        "read_ratio": statistics.median(r["read_ratio"] for r in rounds),
        "load_cpu_ratio": statistics.median(r["load_cpu_ratio"] for r in rounds),
        "read_cpu_ratio": statistics.median(r["read_cpu_ratio"] for r in rounds),
    }
    if not args.child:
        print(
            f"N = {args.n:,}, {args.master}, load partitions {args.partitions}, {args.rounds} "
            f"round(s): median ratio (shards / one): load {result['load_ratio']:.2f}x, "
            f"read {result['read_ratio']:.2f}x"
        )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
