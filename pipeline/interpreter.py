"""Which Python runs the ``inkpen`` source's workers, checked when :func:`.register` is called.

Spark 4 picks the interpreter of a Python data source's workers in three places (docs/spark.md,
'Which Python runs the workers'):

- the lookup of ``pyspark_*`` modules, once per JVM: ``PYSPARK_DRIVER_PYTHON``, else
  ``PYSPARK_PYTHON``, else ``python3``, from the JVM's environment when it started; sources it
  finds run their planner and executor workers with that interpreter too;
- a source registered by hand: ``SparkContext.pythonExec`` when it is registered, which pyspark
  set from ``PYSPARK_PYTHON`` (else ``python3``) when the context started; its planner workers
  (``schema``, ``reader``, ``writer``, ``commit``) run it on the driver;
- its executor workers: the runtime SQL setting ``spark.sql.execution.pyspark.python`` if set,
  else the same interpreter as the planner.

A job run as ``.venv/bin/python job.py`` without ``PYSPARK_PYTHON`` therefore has every worker
start the ``python3`` first on PATH, which is not the virtualenv's. :func:`worker_python` finds
the interpreter inkpen's source should be registered with: Spark's own when it can import
inkpen; this interpreter (``sys.executable``) when Spark's is its unset default and the master
is local, so that every worker runs on this machine; otherwise it raises a
:class:`~inkpen.errors.UsageError` that says what to set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from inkpen.errors import UsageError
from inkpen.logs import get_logger

log = get_logger("inkpen.pipeline")

DEFAULT = "python3"
"""The interpreter pyspark and Spark's JVM use when neither PYSPARK_PYTHON nor the other is set."""

EXECUTOR_SETTING = "spark.sql.execution.pyspark.python"
"""The runtime SQL setting that, when set, names the executors' Python for the source's reads
and writes instead of the interpreter the source was registered with."""

_PROBE = (
    "import importlib.util, sys; "
    "print('%d.%d' % sys.version_info[:2], "
    "importlib.util.find_spec('inkpen') is not None "
    "and importlib.util.find_spec('pyarrow') is not None)"
)
_PROBE_DEADLINE = 60.0


@dataclass(frozen=True)
class Probe:
    """What one interpreter said when asked whether it can run inkpen's workers."""

    executable: str
    problem: str | None
    """None if it can; else why not, in words."""


def probe(executable: str) -> Probe:
    """Whether ``executable`` (a path or a name on PATH) imports inkpen and runs this Python's
    version, which Spark requires of every worker."""
    if executable == sys.executable:
        return Probe(executable, None)
    found = shutil.which(executable)
    if found is None:
        return Probe(executable, f"{executable!r} is not on PATH")
    try:
        done = subprocess.run(
            [found, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=_PROBE_DEADLINE,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(executable, f"{found} could not be run ({exc})")
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2:
        return Probe(executable, f"{found} could not be run (exit status {done.returncode})")
    version, has_inkpen = words
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if has_inkpen != "True":
        return Probe(executable, f"{found} cannot import inkpen and pyarrow")
    if version != mine:
        return Probe(executable, f"{found} is Python {version}, not {mine} like the driver")
    return Probe(executable, None)


def is_local(master: str) -> bool:
    """Whether every executor of ``master`` runs on this machine."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def _fix(reason: str) -> str:
    exe = sys.executable
    return (
        f"{reason}. Start the session with this interpreter for Spark's Python workers: "
        f"set PYSPARK_PYTHON={exe} in the environment before the SparkSession starts "
        f"(for spark-submit too, which also runs the job itself with it), or activate the "
        f"virtualenv that has inkpen; with another master, PYSPARK_PYTHON must name a Python "
        f"with inkpen on the driver and every executor"
    )


def worker_python(spark: Any) -> str:
    """The interpreter to register inkpen's source with on this session (see the module doc).

    Raises :class:`~inkpen.errors.UsageError`, naming what to set, when no interpreter that
    this session can use would import inkpen.
    """
    context = spark.sparkContext
    chosen = str(context.pythonExec)
    master = str(context.master)
    local = is_local(master)
    executors = spark.conf.get(EXECUTOR_SETTING, None)
    if executors and local:
        seen = probe(executors)
        if seen.problem is not None:
            raise UsageError(
                f"Spark's executors would run {EXECUTOR_SETTING}={executors}, but "
                f"{seen.problem}: unset it, or set it to {sys.executable}"
            )
    seen = probe(chosen)
    if seen.problem is None:
        return chosen
    from_environment = os.environ.get("PYSPARK_PYTHON")
    if chosen == DEFAULT and from_environment is None and local:
        log.info(
            "pipeline.worker_python",
            spark_default=chosen,
            problem=seen.problem,
            using=sys.executable,
            master=master,
        )
        return sys.executable
    if chosen != DEFAULT or from_environment is not None:
        reason = f"Spark's Python workers run PYSPARK_PYTHON={chosen}, but {seen.problem}"
    else:
        reason = (
            f"PYSPARK_PYTHON is not set, so Spark's Python workers run {DEFAULT}, but "
            f"{seen.problem}, and the master {master} is not local, so inkpen cannot use "
            f"this interpreter in its place"
        )
    raise UsageError(_fix(reason))
