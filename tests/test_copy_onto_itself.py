"""No copy of a database lands on its source: every copy path refuses the source itself, any
alias of it, a location inside it and one around it, before it writes anything."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import inkpen
from inkpen.cli import main
from inkpen.manifest.clones import create_clone
from inkpen.manifest.copies import copy_database
from inkpen.manifest.model import Manifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.objectstore.url import locations_overlap
from support.engine import TINY

Tree = dict[str, tuple[int, int]]

ALIASES: dict[str, Callable[[Path], str]] = {
    "same": lambda db: str(db),
    "file-url": lambda db: f"file://{db}",
    "trailing-slash": lambda db: f"{db}/",
    "dot-dot": lambda db: str(db / ".." / db.name),
    "symlink": lambda db: str(db.parent / "link"),
    "relative": lambda db: os.path.join(".", db.name),
    "inside": lambda db: str(db / "copy"),
    "around": lambda db: str(db.parent),
}


def _cli(*args: str) -> int:
    return CliRunner().invoke(main, list(args)).exit_code


def _copy_database(source: str, dest: str) -> None:
    with open_store(source) as src, open_store(dest) as target:
        copy_database(src, target)


API_PATHS: dict[str, Callable[[str, str], object]] = {
    "backup": lambda source, dest: inkpen.backup(source, dest),
    "restore": lambda source, dest: inkpen.restore(source, dest),
    "copy-database": _copy_database,
    "clone": lambda source, dest: create_clone(source, dest),
}

CLI_PATHS: dict[str, Callable[[str, str], list[str]]] = {
    "cli-backup": lambda source, dest: ["backup", source, dest],
    "cli-backup-no-fence": lambda source, dest: ["backup", source, dest, "--no-fence"],
    "cli-restore": lambda source, dest: ["restore", source, dest],
    "cli-clone": lambda source, dest: ["clone", source, dest],
}


def _tree(root: Path) -> Tree:
    """Every file under ``root``: size and modification time (a rewrite changes them)."""
    found: Tree = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture
def source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "db"
    with inkpen.open(str(db), **TINY) as book:
        for i in range(20):
            book.put("b", f"k{i:02d}", b"v" * 50)
    (tmp_path / "link").symlink_to(db)
    monkeypatch.chdir(tmp_path)
    return db


def _latest(url: str) -> tuple[int, object]:
    with open_store(url) as store:
        latest = ManifestStore(store).latest()
    assert latest is not None
    return latest.id, latest.manifest


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("path", sorted(API_PATHS))
def test_api_copy_paths_refuse_the_source_and_its_aliases(
    source: Path, path: str, alias: str
) -> None:
    before = _tree(source.parent)
    with pytest.raises(inkpen.UsageError, match="onto itself"):
        API_PATHS[path](str(source), ALIASES[alias](source))
    assert _tree(source.parent) == before


def _outside(root: Path, source: Path) -> Tree:
    """The files under ``root`` but outside the database ``source``, and the entries directly
    in ``source`` (a copy inside it would add one)."""
    found = {k: v for k, v in _tree(root).items() if not k.startswith(f"{source.name}/")}
    found.update({f"entry {p.name}": (0, 0) for p in source.iterdir()})
    return found


def _epoch(url: str) -> int:
    manifest = _latest(url)[1]
    assert isinstance(manifest, Manifest)
    return manifest.writer_epoch


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_hot_backups_refuse_the_source_and_its_aliases(source: Path, alias: str) -> None:
    """A writer is open on the source (it may write on its own meanwhile): nothing appears
    outside its database or beside its folders, and its epoch stays."""
    dest = ALIASES[alias](source)
    with inkpen.open(str(source)) as book:
        epoch, before = _epoch(str(source)), _outside(source.parent, source)
        with pytest.raises(inkpen.UsageError, match="onto itself"):
            book.hot_backup()(dest)
        assert (_epoch(str(source)), _outside(source.parent, source)) == (epoch, before)
        book.put("b", "after", b"still the writer")


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_async_hot_backups_refuse_the_source_and_its_aliases(source: Path, alias: str) -> None:
    dest = ALIASES[alias](source)

    async def run() -> None:
        async with inkpen.aio.open(str(source)) as book:
            epoch, before = _epoch(str(source)), _outside(source.parent, source)
            backup = await book.hot_backup()
            with pytest.raises(inkpen.UsageError, match="onto itself"):
                await backup(dest)
            assert (_epoch(str(source)), _outside(source.parent, source)) == (epoch, before)
            await book.put("b", "after", b"still the writer")

    asyncio.run(run())


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("path", sorted(CLI_PATHS))
def test_cli_copy_paths_refuse_the_source_and_its_aliases(
    source: Path, path: str, alias: str
) -> None:
    before = _tree(source.parent)
    assert _cli(*CLI_PATHS[path](str(source), ALIASES[alias](source))) == 2
    assert _tree(source.parent) == before


@pytest.mark.parametrize("alias", ["same", "file-url", "symlink", "inside"])
def test_a_live_writer_is_not_fenced_by_a_refused_backup(source: Path, alias: str) -> None:
    with inkpen.open(str(source), **TINY) as book:
        epoch = _epoch(str(source))
        assert _cli("backup", str(source), ALIASES[alias](source)) == 2
        book.put("b", "after", b"still the writer")
        assert book.get("b", "after") == b"still the writer"
        assert _epoch(str(source)) == epoch


def test_a_sibling_sharing_a_name_prefix_is_accepted(source: Path) -> None:
    assert _cli("backup", str(source), str(source.parent / "db2"), "--no-fence") == 0
    assert _cli("clone", str(source), "./db3") == 0
    inkpen.restore(str(source), "db4")
    with inkpen.open_reader("db2") as copy:
        assert copy.get("b", "k05") == b"v" * 50
    with inkpen.open_reader("db4") as restored:
        assert restored.get("b", "k05") == b"v" * 50


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("s3://bkt/db", "s3://bkt/db", True),
        ("s3://bkt/db", "s3://bkt/db/", True),
        ("s3://bkt/db", "s3://bkt/db/copy", True),
        ("s3://bkt/db/inner", "s3://bkt/db", True),
        ("s3://bkt", "s3://bkt/db", True),
        ("s3://bkt/db", "s3://bkt/db2", False),
        ("s3://bkt/db", "s3://other/db", False),
        ("s3://bkt/db?endpoint=http://a:1", "s3://bkt/db?endpoint=http://a:1/", True),
        ("s3://bkt/db?endpoint=http://a:1", "s3://bkt/db?endpoint=http://b:1", False),
        ("memory://space/db", "memory://space/db/x", True),
        ("memory://space/db", "memory://space/db2", False),
        ("memory://space/db", "memory://other/db", False),
        ("/tmp/db", "s3://tmp/db", False),
    ],
)
def test_locations_overlap_by_whole_segments(a: str, b: str, overlap: bool) -> None:
    assert locations_overlap(a, b) is overlap
    assert locations_overlap(b, a) is overlap
