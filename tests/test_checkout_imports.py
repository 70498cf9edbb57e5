"""inkpen imports from the checkout's root, where the quickstart leaves a new user.

There Python puts the current directory first on ``sys.path``, so ``import inkpen`` finds the
checkout's ``inkpen/`` folder rather than the installed package; its subpackages are the folders
beside it (``actors/``, ``formats/``, ...). The test scripts set ``PYTHONSAFEPATH`` for their own
processes: these runs drop it, as a user's shell does not have it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from inkpen._checkout import CheckoutRooms, checkout_rooms

ROOT = Path(__file__).resolve().parent.parent

SHOW = """
import sys
import inkpen, inkpen.actors.engine.engine, inkpen.formats.sst, inkpen.manifest.store
import inkpen.objectstore.local, inkpen.pipeline
print(inkpen.__file__)
print(inkpen.actors.__file__)
with inkpen.open("memory://checkout") as book:
    book.put("b", "k", b"v")
    assert book.get("b", "k") == b"v"
print("ok")
"""


def _user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env.pop("PYTHONPATH", None)
    return env


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_python_c_imports_the_checkout_from_its_root() -> None:
    ran = _run("-c", SHOW)
    assert ran.returncode == 0, ran.stderr
    package, actors, ok = ran.stdout.split()
    # The checkout's own folders answer, the way the wheel's mapping lays them out.
    assert Path(package) == ROOT / "inkpen" / "__init__.py"
    assert Path(actors) == ROOT / "actors" / "__init__.py"
    assert ok == "ok"


def test_python_m_inkpen_cli_runs_from_the_root(tmp_path: Path) -> None:
    db = tmp_path / "db"
    helped = _run("-m", "inkpen.cli", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "Usage: inkpen" in helped.stdout
    put = _run("-m", "inkpen.cli", "put", str(db), "users", "alice", "hello", "--create")
    assert put.returncode == 0, put.stderr
    got = _run("-m", "inkpen.cli", "get", str(db), "users", "alice")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello"


def test_the_rooms_are_the_package_dir_mapping() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    expected = {name: ROOT / folder for name, folder in mapping.items() if name != "inkpen"}
    assert checkout_rooms(ROOT / "inkpen") == expected


def test_an_installed_layout_is_left_alone(tmp_path: Path) -> None:
    installed = tmp_path / "site-packages" / "inkpen"
    (installed / "actors").mkdir(parents=True)
    (tmp_path / "site-packages" / "pyproject.toml").write_text('[project]\nname = "inkpen"\n')
    assert checkout_rooms(installed) == {}
    # Nor does another project's pyproject.toml beside an inkpen folder make rooms.
    other = tmp_path / "other"
    (other / "inkpen").mkdir(parents=True)
    (other / "actors").mkdir()
    (other / "actors" / "__init__.py").write_text("")
    (other / "pyproject.toml").write_text(
        '[project]\nname = "other"\n[tool.setuptools.package-dir]\n"inkpen.actors" = "actors"\n'
    )
    assert checkout_rooms(other / "inkpen") == {}


def test_the_finder_answers_only_mapped_rooms(tmp_path: Path) -> None:
    folder = tmp_path / "actors"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    finder = CheckoutRooms({"inkpen.actors": folder})
    spec = finder.find_spec("inkpen.actors", None)
    assert spec is not None and spec.origin == str(folder / "__init__.py")
    assert spec.submodule_search_locations == [str(folder)]
    assert finder.find_spec("inkpen.tests", None) is None
    assert finder.find_spec("actors", None) is None
