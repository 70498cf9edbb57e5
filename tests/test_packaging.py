"""The wheel as a user gets it: built from the checkout, installed in a fresh venv, with and
without the ``spark`` extra (dependencies come from the package index, through pip's cache)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEP_TIMEOUT = 900

USE = """
import asyncio, inkpen, inkpen.aio, inkpen.objectstore.s3_obstore, obstore
with inkpen.open("memory://wheel") as book:
    book.put("b", "k", b"v")
    assert book.get("b", "k") == b"v"
inkpen.shards.create("memory://wheel-set", shards=2)
async def main():
    async with inkpen.aio.open("memory://wheel-aio") as book:
        await book.put("b", "k", b"v")
        assert await book.get("b", "k") == b"v"
    async with inkpen.aio.shards.open("memory://wheel-set") as sharded:
        await sharded.put("b", "k", b"v")
        assert await sharded.get("b", "k") == b"v"
asyncio.run(main())
print("ok", inkpen.__version__)
"""

PROMETHEUS = """
import inkpen
try:
    import inkpen.prometheus
except ImportError as exc:
    print(type(exc).__name__, isinstance(exc, inkpen.UsageError), exc)
else:
    print("imported", inkpen.prometheus.register.__name__)
"""

PIPELINE = """
try:
    import inkpen.pipeline
except ImportError as exc:
    print("ImportError:", exc)
else:
    print("imported", inkpen.pipeline.NAME)
"""


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    ran = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, f"{args}\n{ran.stdout}\n{ran.stderr}"
    return ran


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, ROOT, cwd=out)
    (found,) = out.glob("inkpen-*.whl")
    return found


def test_wheel_metadata_and_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in metadata
    assert "inkpen/py.typed" in names and "inkpen/aio/__init__.py" in names
    assert "inkpen/aio/shards.py" in names
    assert "inkpen/operations.py" in names and "pyspark_inkpen.py" in names
    assert "Provides-Extra: spark" in metadata
    assert "Provides-Extra: prometheus" in metadata
    assert "inkpen/prometheus.py" in names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert "Requires-Dist: obstore>=0.12" in requires  # the default S3 client, a core dependency
    assert "Requires-Dist: boto3>=1.35.10" in requires  # still there for client=boto3


def _fresh(tmp_path: Path, wheel: Path, spec: str) -> Path:
    home = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    _run(
        python, "-m", "pip", "install", "--quiet", f"inkpen{spec} @ {wheel.as_uri()}", cwd=tmp_path
    )
    return python


def test_wheel_without_the_extra(tmp_path: Path, wheel: Path) -> None:
    python = _fresh(tmp_path, wheel, "")
    assert _run(python, "-c", USE, cwd=tmp_path).stdout.startswith("ok ")
    said = _run(python, "-c", PIPELINE, cwd=tmp_path).stdout
    assert said.startswith("ImportError:") and "pip install 'inkpen[spark]'" in said, said
    said = _run(python, "-c", PROMETHEUS, cwd=tmp_path).stdout
    assert said.startswith("_MissingExtra True ") and "pip install 'inkpen[prometheus]'" in said
    version = _run(python.with_name("inkpen"), "--version", cwd=tmp_path).stdout
    assert version.strip().endswith(_run(python, "-c", USE, cwd=tmp_path).stdout.split()[1])


def test_wheel_with_the_spark_extra(tmp_path: Path, wheel: Path) -> None:
    python = _fresh(tmp_path, wheel, "[spark]")
    assert _run(python, "-c", PIPELINE, cwd=tmp_path).stdout.strip() == "imported inkpen"


def test_wheel_with_the_prometheus_extra(tmp_path: Path, wheel: Path) -> None:
    python = _fresh(tmp_path, wheel, "[prometheus]")
    assert _run(python, "-c", PROMETHEUS, cwd=tmp_path).stdout.strip() == "imported register"
