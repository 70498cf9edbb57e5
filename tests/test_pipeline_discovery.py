"""Spark finds the ``inkpen`` source by name in a fresh process, and runs it across processes.

Each test starts its own Python process with its own Spark session (a JVM may hold one Spark
context only) that never calls ``inkpen.pipeline.register``; see :mod:`support.spark_fresh`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent
FRESH_JOB = (sys.executable, "-m", "support.spark_fresh")
PIP = (sys.executable, "-m", "pip")
JOB_DEADLINE = 400.0
"""Seconds a fresh-session job may take on a loaded 2-core machine (about 30-60 s quiet)."""


def run_job(master: str, url: str, rows: int, pythonpath: str | None = None) -> dict[str, object]:
    env = dict(os.environ, PYTHONSAFEPATH="1")
    paths = [str(ROOT / "tests")] + ([pythonpath] if pythonpath else [])
    env["PYTHONPATH"] = os.pathsep.join(reversed(paths))
    done = subprocess.run(
        [*FRESH_JOB, "--master", master, "--url", url, "--rows", str(rows)],
        env=env,
        cwd=str(Path(url).parent),
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    result: dict[str, object] = json.loads(lines[-1])
    return result


def test_a_fresh_session_finds_the_source_from_the_editable_install(tmp_path: Path) -> None:
    result = run_job("local[2]", str(tmp_path / "db"), 3000)
    assert result == {
        "inkpen": result["inkpen"],
        "executors": "local[2]",
        "rows": 3000,
        "right": True,
        "filtered": 500,
        "count_after": 3000,
    }


def test_a_fresh_session_finds_the_source_from_a_wheel(tmp_path: Path) -> None:
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=JOB_DEADLINE,
    )
    (wheel,) = wheels.glob("inkpen-*.whl")
    subprocess.run(
        [*PIP, "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=JOB_DEADLINE,
    )
    assert (target / "pyspark_inkpen.py").is_file()
    result = run_job("local[2]", str(tmp_path / "db"), 2000, pythonpath=str(target))
    assert str(result["inkpen"]).startswith(str(target))  # the wheel's copy, not the checkout
    assert (result["rows"], result["right"]) == (2000, True)
    assert (result["filtered"], result["count_after"]) == (500, 2000)


def test_a_load_and_a_read_across_executor_processes(tmp_path: Path) -> None:
    result = run_job("local-cluster[2,1,1024]", str(tmp_path / "db"), 4000)
    assert result["executors"] == "local-cluster[2,1,1024]"
    assert (result["rows"], result["right"]) == (4000, True)
    assert (result["filtered"], result["count_after"]) == (500, 4000)
