"""A local Spark session for the pipeline tests, and a way to see which Spark jobs ran.

Test modules load this as a pytest plugin (``pytest_plugins = ("support.spark",)``), so the
``spark`` fixture is one session shared by every module: starting Spark's JVM costs tens of
seconds here. The session runs ``local[2]`` with few shuffle partitions, binds to loopback, and
runs its Python workers with this interpreter. Executors are threads of the driver's JVM and
their Python workers its children, so they see this process's environment as it was when the
JVM started: when the run includes S3 pipeline tests, SeaweedFS (and its AWS settings) is
started first.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import pytest
from pyspark.sql import SparkSession

import inkpen.pipeline

SETTINGS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def start_spark(app_name: str, master: str = "local[2]") -> SparkSession:
    """A SparkSession whose Python workers run this interpreter, with inkpen registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName(app_name)
    for name, value in SETTINGS.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    inkpen.pipeline.register(session)
    return session


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    """One local Spark session for the whole run; stopped at its end."""
    wants_s3 = any(
        item.get_closest_marker("s3") is not None and "test_pipeline" in item.nodeid
        for item in request.session.items
    )
    if wants_s3:
        request.getfixturevalue("seaweed")
    session = start_spark("inkpen-pipeline-tests")
    try:
        yield session
    finally:
        session.stop()


@dataclass
class JobWatch:
    """The Spark jobs run inside one :func:`watch_jobs` block."""

    session: SparkSession
    group: str
    job_ids: list[int] = field(default_factory=list)

    def refresh(self) -> None:
        tracker = self.session.sparkContext.statusTracker()
        self.job_ids = sorted(tracker.getJobIdsForGroup(self.group))

    def tasks_per_job(self) -> list[int]:
        """For each job, the tasks its stages completed."""
        tracker = self.session.sparkContext.statusTracker()
        counts = []
        for job_id in self.job_ids:
            info = tracker.getJobInfo(job_id)
            stages = [] if info is None else [tracker.getStageInfo(s) for s in info.stageIds]
            counts.append(sum(stage.numCompletedTasks for stage in stages if stage is not None))
        return counts


@contextmanager
def watch_jobs(session: SparkSession, name: str) -> Iterator[JobWatch]:
    """Run the block's Spark jobs in a job group of their own and record which ran."""
    context = session.sparkContext
    watch = JobWatch(session, f"{name}-{uuid.uuid4().hex[:8]}")
    context.setJobGroup(watch.group, name)
    try:
        yield watch
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        watch.refresh()


@pytest.fixture
def spark_jobs(spark: SparkSession) -> Callable[[str], AbstractContextManager[JobWatch]]:
    """``with spark_jobs("name") as watch:`` records the Spark jobs the block runs."""
    return lambda name: watch_jobs(spark, name)
