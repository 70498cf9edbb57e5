"""examples/spark_job.py at a small size, on the suite's Spark session: it loads, reads, reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "spark_job.py"


def example() -> ModuleType:
    """The example script as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("spark_job_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_example_job_loads_reads_and_reports(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    example().main(["--n", "4000", "--partitions", "3", "--dir", str(store)], spark=spark)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("load: 4,000 rows in ")
    assert "tasks per job [3]" in lines[0]
    assert lines[1].startswith("read all: 4,000 rows in ")
    assert lines[2].startswith("read bucket-1 [key-0000000400, key-0000000800]: 100 rows in ")
    assert lines[3] == "files written: 3 SSTs, 3 journal files"
    report = json.loads(lines[4])
    load, read_all, read_range = report["steps"]
    assert (load["rows"], read_all["rows"], read_range["rows"]) == (4000, 4000, 100)
    assert report["expected_range_rows"] == 100
    assert all(step["rows_per_second"] > 0 for step in report["steps"])
    assert read_all["tasks_per_job"] and all(n >= 1 for n in read_all["tasks_per_job"])
    assert report["files_written"] == {"ssts": 3, "journal_files": 3}
    assert store.is_dir()
