"""Jobs run from a virtualenv that is not activated, and the interpreter ``register`` picks.

The Spark tests run :mod:`support.venv_job` in a process whose environment is a user's: no
``PYSPARK_*`` variable, a ``python3`` without inkpen first on PATH (a bare virtualenv, standing
in for the system's), ``PYTHONSAFEPATH=1``, the current directory outside the checkout. The
others check :func:`inkpen.pipeline.interpreter.worker_python` against stand-in interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from inkpen.errors import UsageError
from inkpen.pipeline.interpreter import EXECUTOR_SETTING, is_local, probe, worker_python

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "support" / "venv_job.py"
VENV_BIN = Path(sys.executable).parent
JOB_DEADLINE = 400.0
"""Seconds a job may take on a loaded 2-core machine (about 40 s quiet)."""
MINE = f"{sys.version_info[0]}.{sys.version_info[1]}"


# -- the choice, against stand-in interpreters ------------------------------------------------


@dataclass
class Conf:
    values: dict[str, str] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


@dataclass
class Context:
    pythonExec: str
    master: str = "local[2]"


@dataclass
class Session:
    sparkContext: Context
    conf: Conf = field(default_factory=Conf)


def stand_in(directory: Path, name: str, answer: str) -> Path:
    """An executable ``directory/name`` that answers the probe with ``answer``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho '{answer}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def path_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH, and PYSPARK_PYTHON unset."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    return directory


def test_the_default_python3_without_inkpen_is_replaced_by_this_interpreter(
    path_dir: Path,
) -> None:
    stand_in(path_dir, "python3", f"{MINE} False")
    assert "cannot import inkpen" in str(probe("python3").problem)
    assert worker_python(Session(Context("python3"))) == sys.executable
    assert worker_python(Session(Context("python3", "local-cluster[2,1,1024]"))) == sys.executable


def test_a_python3_that_can_run_inkpen_is_kept(path_dir: Path) -> None:
    stand_in(path_dir, "python3", f"{MINE} True")
    assert worker_python(Session(Context("python3"))) == "python3"


def test_a_python3_of_another_version_is_not_kept(path_dir: Path) -> None:
    stand_in(path_dir, "python3", "3.9 True")
    assert f"is Python 3.9, not {MINE}" in str(probe("python3").problem)
    assert worker_python(Session(Context("python3"))) == sys.executable


def test_a_chosen_interpreter_without_inkpen_is_refused_naming_the_fix(
    path_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = stand_in(path_dir, "other-python", f"{MINE} False")
    monkeypatch.setenv("PYSPARK_PYTHON", str(chosen))
    with pytest.raises(UsageError) as raised:
        worker_python(Session(Context(str(chosen))))
    message = str(raised.value)
    assert f"run PYSPARK_PYTHON={chosen}, but {chosen} cannot import inkpen" in message
    assert f"set PYSPARK_PYTHON={sys.executable} in the environment before" in message


def test_a_remote_master_is_refused_rather_than_given_this_machine_s_path(path_dir: Path) -> None:
    stand_in(path_dir, "python3", f"{MINE} False")
    assert not is_local("spark://head:7077") and is_local("local[*]") and is_local("local")
    with pytest.raises(UsageError, match="the master spark://head:7077 is not local") as raised:
        worker_python(Session(Context("python3", "spark://head:7077")))
    assert f"PYSPARK_PYTHON={sys.executable}" in str(raised.value)


def test_an_executor_python_without_inkpen_is_refused(path_dir: Path) -> None:
    bad = stand_in(path_dir, "executor-python", f"{MINE} False")
    session = Session(Context(sys.executable), Conf({EXECUTOR_SETTING: str(bad)}))
    with pytest.raises(UsageError, match=f"{EXECUTOR_SETTING}={bad}, but .*cannot import inkpen"):
        worker_python(session)


def test_a_missing_interpreter_is_named(path_dir: Path) -> None:
    assert probe("no-such-python-here").problem == "'no-such-python-here' is not on PATH"


# -- real jobs, in a user's environment -------------------------------------------------------


def user_environment(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a user who did not activate the virtualenv, and the ``python3`` that
    comes first on its PATH: a bare virtualenv's, which has neither inkpen nor pyarrow."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python3 = bare / "bin" / "python3"
    assert probe(str(python3)).problem == f"{python3} cannot import inkpen and pyarrow"
    unset = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME"}
    env = {name: value for name, value in os.environ.items() if name not in unset}
    rest = [p for p in env["PATH"].split(os.pathsep) if p and Path(p) != VENV_BIN]
    env["PATH"] = os.pathsep.join([str(python3.parent), *rest])
    env["PYTHONSAFEPATH"] = "1"
    return env, python3


def run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=env,
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE,
        check=False,
    )


def report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    result: dict[str, object] = json.loads(lines[-1])
    return result


def expected(rows: int) -> list[list[str]]:
    return [[f"k{n:04d}", f"v{n}"] for n in range(rows)]


@pytest.mark.spark
def test_python_job_py_from_the_virtualenv_registers_with_its_interpreter(tmp_path: Path) -> None:
    env, python3 = user_environment(tmp_path)
    url = str(tmp_path / "db")
    done = run(
        [sys.executable, str(JOB), "--url", url, "--register", "--then-python", str(python3)],
        env,
        tmp_path,
    )
    result = report(done)
    # Spark's workers run the python3 on PATH, which cannot see inkpen: the lookup misses it.
    assert result["workers"] == "python3"
    assert "DATA_SOURCE_NOT_FOUND" in str(result["found"])
    # register lends the source this interpreter: the load and the read work.
    assert result["written"] == "ok"
    assert result["rows"] == expected(20)
    # A PYSPARK_PYTHON set to a Python without inkpen is refused, naming what to set instead.
    assert result["then_workers"] == str(python3)
    message = str(result["then_register"])
    assert message.startswith("UsageError: Spark's Python workers run PYSPARK_PYTHON=")
    assert f"{python3} cannot import inkpen and pyarrow" in message
    assert f"set PYSPARK_PYTHON={sys.executable} in the environment" in message


@pytest.mark.spark
def test_spark_submit_from_the_virtualenv_needs_pyspark_python(tmp_path: Path) -> None:
    env, _ = user_environment(tmp_path)
    url = str(tmp_path / "db")
    submit = [str(VENV_BIN / "spark-submit"), str(JOB), "--url", url]
    # Without it spark-submit runs python3 to find Spark, before any of the job runs.
    done = run(submit, env, tmp_path)
    assert done.returncode != 0
    assert "Could not find valid SPARK_HOME" in done.stdout + done.stderr
    assert not (tmp_path / "db").exists()
    # With it, the driver, the lookup and every worker run the virtualenv's Python.
    result = report(run(submit, dict(env, PYSPARK_PYTHON=sys.executable), tmp_path))
    assert (result["driver"], result["workers"]) == (sys.executable, sys.executable)
    assert result["found"] == "ok"
    assert result["rows"] == expected(20)
