"""inkpen.backup / restore / destroy / list_databases on every store, against a model dict."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import inkpen
from inkpen.manifest.checkpoints import delete_checkpoint
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY


def _fill(url: str, model: dict[bytes, bytes], start: int, count: int) -> None:
    with inkpen.open(url, **TINY) as book:
        for i in range(start, start + count):
            key, value = f"k{i:04d}".encode(), f"value {i}".encode() * 3
            book.put("b", key, value)
            model[key] = value


def _contents(url: str) -> dict[bytes, bytes]:
    with inkpen.open_reader(url) as reader:
        return {k: v for _, k, v in reader.objects("b")}


def _objects(url: str) -> list[str]:
    with open_store(url) as store:
        return [info.key for info in store.list("")]


def test_backup_fences_nobody_is_incremental_and_restores(
    store_url: str, make_store_url: Callable[[str], str], store_kind: str
) -> None:
    model: dict[bytes, bytes] = {}
    _fill(store_url, model, 0, 40)
    dest = make_store_url(store_kind)
    with inkpen.open(store_url, **TINY) as live:
        first = inkpen.backup(store_url, dest)
        live.put("b", "after", b"written after the backup")  # the writer was not fenced
        assert first.files_copied == first.files > 0
        assert _contents(dest) == model
        second = inkpen.backup(store_url, dest)
    model[b"after"] = b"written after the backup"
    assert second.files_kept > 0  # the second copy reused what the first one copied
    assert _contents(dest) == model

    restored = make_store_url(store_kind)
    report = inkpen.restore(dest, restored)
    assert report.files == report.files_copied > 0
    assert _contents(restored) == model
    with inkpen.open(restored) as book:  # a working database
        book.put("b", "new", b"x")
        assert book.get("b", "k0001") == model[b"k0001"]
    with pytest.raises(inkpen.UsageError):
        inkpen.restore(dest, restored)  # restore never merges into a database
    assert _contents(dest) == model


def test_backup_at_a_named_checkpoint_writes_nothing_to_the_source(
    store_url: str, make_store_url: Callable[[str], str], store_kind: str
) -> None:
    model: dict[bytes, bytes] = {}
    _fill(store_url, model, 0, 10)
    with inkpen.open(store_url, **TINY) as book:
        checkpoint = book.checkpoint(600)
        book.put("b", "later", b"not in the checkpoint")
    before = _objects(store_url)
    dest = make_store_url(store_kind)
    inkpen.backup(store_url, dest, checkpoint=checkpoint)
    assert _objects(store_url) == before
    assert _contents(dest) == model


def test_destroy_hard_refused_while_checkpoints_live_then_removes_everything(
    store_url: str, store_kind: str
) -> None:
    model: dict[bytes, bytes] = {}
    _fill(store_url, model, 0, 10)
    with inkpen.open(store_url) as book:
        checkpoint = book.checkpoint(600)
    before = _objects(store_url)
    with pytest.raises(inkpen.UsageError, match="inkpen checkpoint delete") as refused:
        inkpen.destroy(store_url, soft=False)
    assert checkpoint in str(refused.value)
    assert _objects(store_url) == before
    with pytest.raises(inkpen.UsageError):
        inkpen.destroy(store_url, soft="no")  # type: ignore[arg-type]
    inkpen.destroy(store_url, soft=True)
    with pytest.raises(inkpen.InkpenError):
        inkpen.open_reader(store_url)
    gc = GcOptions(min_age=0.0, destroy_grace=0.0, offline=True)
    run_gc(store_url, options=gc)
    assert _objects(store_url) != []  # the live checkpoint still holds it
    with open_store(store_url) as store:
        delete_checkpoint(ManifestStore(store), checkpoint)
    run_gc(store_url, options=gc)
    if store_kind == "local":  # no empty directories left behind (looking would make one)
        assert not os.path.exists(store_url), os.listdir(store_url)
    else:
        assert _objects(store_url) == []


def test_destroy_hard_leaves_no_directory(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    _fill(url, {}, 0, 30)
    inkpen.destroy(url, soft=False)
    assert not os.path.exists(url)
    with pytest.raises(inkpen.NotFoundError):
        inkpen.destroy(url, soft=False)
    assert not os.path.exists(url)


def test_destroy_is_hard_by_default_as_the_command_is(store_url: str, store_kind: str) -> None:
    """``inkpen.destroy(url)`` is ``destroy(url, soft=False)``, as ``inkpen destroy URL`` is hard
    unless given ``--soft``: refused with the same message while a checkpoint lives, then every
    object removed at once, no GC pass needed."""
    _fill(store_url, {}, 0, 10)
    with inkpen.open(store_url) as book:
        checkpoint = book.checkpoint(600)
    before = _objects(store_url)
    refusals = []
    calls: list[Callable[[], object]] = [
        lambda: inkpen.destroy(store_url),
        lambda: inkpen.destroy(store_url, soft=False),
    ]
    for call in calls:
        with pytest.raises(inkpen.UsageError, match="has live checkpoints") as refused:
            call()
        refusals.append(str(refused.value))
        assert _objects(store_url) == before
    assert refusals[0] == refusals[1] and checkpoint in refusals[0]
    with open_store(store_url) as store:
        delete_checkpoint(ManifestStore(store), checkpoint)
    inkpen.destroy(store_url)
    if store_kind == "local":
        assert not os.path.exists(store_url)
    else:
        assert _objects(store_url) == []
    with pytest.raises(inkpen.NotFoundError):
        inkpen.destroy(store_url)


def test_list_databases_names_only_database_children(
    make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    root = str(tmp_path / "backups")
    assert inkpen.list_databases(root) == []
    assert not os.path.exists(root)
    for name in ("b-two", "a-one"):
        _fill(f"{root}/{name}", {}, 0, 3)
    os.makedirs(f"{root}/not-a-database")
    Path(f"{root}/not-a-database/file").write_bytes(b"x")
    assert inkpen.list_databases(root) == ["a-one", "b-two"]


def test_backup_of_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(inkpen.NotFoundError, match="no inkpen database"):
        inkpen.backup(str(tmp_path / "absent"), str(tmp_path / "dest"))
    assert not (tmp_path / "absent").exists()


def test_list_databases_leaves_out_soft_destroyed_databases(tmp_path: Path) -> None:
    root = str(tmp_path / "backups")
    for name in ("a-live", "b-gone", "c-live"):
        _fill(f"{root}/{name}", {}, 0, 3)
    inkpen.destroy(f"{root}/b-gone", soft=True)
    assert inkpen.list_databases(root) == ["a-live", "c-live"]
    assert inkpen.list_databases(root, include_destroyed=True) == ["a-live", "b-gone", "c-live"]
    with pytest.raises(inkpen.UsageError, match="include_destroyed must be True or False"):
        inkpen.list_databases(root, include_destroyed="yes")  # type: ignore[arg-type]
