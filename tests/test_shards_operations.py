"""inkpen.backup, restore, destroy (soft and hard) and list_databases on sharded data sets, against
a model (a dict per shard), on a local directory and on SeaweedFS."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import inkpen
from inkpen import shards
from inkpen._shard_layout import adopt_descriptor
from inkpen.manifest.checkpoints import delete_checkpoint
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.cli import inkpen_command

MakeUrl = Callable[[str], str]
SHARDS = 3
Held = list[dict[tuple[bytes, bytes], bytes]]


def _fill(url: str, start: int = 0, count: int = 24) -> Held:
    """Write ``count`` objects into the data set at ``url`` (creating it); answers the model."""
    shards.create(url, shards=SHARDS)
    with shards.open(url) as book:
        for i in range(start, start + count):
            book.put("b", f"k{i:03d}", f"value {i}".encode())
    return _model(range(start + count))


def _model(indexes: range) -> Held:
    held: Held = [{} for _ in range(SHARDS)]
    for i in indexes:
        key = f"k{i:03d}"
        held[shards.shard_of("b", key, SHARDS)][(b"b", key.encode())] = f"value {i}".encode()
    return held


def _contents(url: str) -> Held:
    found: Held = []
    for index in range(SHARDS):
        with inkpen.open_reader(shards.shard_url(url, index)) as reader:
            found.append({(b, k): v for b, k, v in reader.objects()})
    return found


def _objects(url: str) -> list[str]:
    with open_store(url) as store:
        return [info.key for info in store.list("")]


def test_backup_and_restore_of_a_data_set(durable_kind: str, make_store_url: MakeUrl) -> None:
    url, dest, restored = (make_store_url(durable_kind) for _ in range(3))
    model = _fill(url)
    with shards.open(url) as live:
        first = inkpen.backup(url, dest)
        live.put("b", "k100", b"value 100")  # the writers were not fenced
    assert isinstance(first, inkpen.DataSetCopyReport)
    assert len(first.shards) == SHARDS and first.files == sum(r.files for r in first.shards)
    assert shards.read_descriptor(dest) == shards.read_descriptor(url)
    assert _contents(dest) == model
    second = inkpen.backup(url, dest)  # again: brought up to date, copying only new files
    assert isinstance(second, inkpen.DataSetCopyReport) and second.files_kept > 0
    model[shards.shard_of("b", "k100", SHARDS)][(b"b", b"k100")] = b"value 100"
    assert _contents(dest) == model
    report = inkpen.restore(dest, restored)
    assert isinstance(report, inkpen.DataSetCopyReport) and len(report.shards) == SHARDS
    assert _contents(restored) == model
    with shards.open(restored) as book:  # a working data set
        book.put("b", "new", b"x")
        assert book.get("b", "k001") == b"value 1"
    with pytest.raises(inkpen.UsageError, match="already holds a data set"):
        inkpen.restore(dest, restored)  # restore never merges into a data set
    other = make_store_url(durable_kind)
    shards.create(other, shards=2)
    with pytest.raises(inkpen.UsageError, match="has 2 shards"):
        inkpen.backup(url, other)


def test_an_interrupted_data_set_restore_resumes(make_store_url: MakeUrl) -> None:
    url, restored = make_store_url("local"), make_store_url("local")
    model = _fill(url)
    adopt_descriptor(restored, shards.read_descriptor(url))  # as a restore cut short leaves it
    inkpen.restore(shards.shard_url(url, 1), shards.shard_url(restored, 1))
    report = inkpen.restore(url, restored)
    assert isinstance(report, inkpen.DataSetCopyReport)
    assert len(report.shards) == SHARDS - 1  # shard 1 was there already
    assert _contents(restored) == model


def test_destroy_of_a_data_set_hard_and_soft(durable_kind: str, make_store_url: MakeUrl) -> None:
    url = make_store_url(durable_kind)
    _fill(url)
    with shards.open(url) as book:
        held = book.shard(2)
        assert isinstance(held, inkpen.Bookie)
        pin = held.checkpoint(600)
    before = _objects(url)
    with pytest.raises(inkpen.UsageError, match=f"shard 2: {pin}") as refused:
        inkpen.destroy(url)  # hard: refused while any shard has a live checkpoint
    assert "inkpen checkpoint delete" in str(refused.value)
    assert _objects(url) == before
    inkpen.destroy(url, soft=True)
    with pytest.raises(inkpen.InkpenError, match="destroyed"):
        inkpen.open_reader(shards.shard_url(url, 0))
    gc = GcOptions(min_age=0.0, destroy_grace=0.0, offline=True)
    for index in range(SHARDS):
        run_gc(shards.shard_url(url, index), options=gc)
    assert shards.is_data_set(url)  # shard 2's live checkpoint still holds it
    with open_store(shards.shard_url(url, 2)) as store:
        delete_checkpoint(ManifestStore(store), pin)
    done = inkpen_command("gc", url, "--min-age", "0s", "--destroy-grace", "0s", "--offline")
    assert done.code == 0, done.explain()
    assert "the destroyed data set" in done.out
    if durable_kind == "local":
        assert not os.path.exists(url)
    else:
        assert _objects(url) == []
    # A hard destroy removes every shard and the descriptor at once.
    again = make_store_url(durable_kind)
    _fill(again)
    inkpen.destroy(again)
    if durable_kind == "local":
        assert not os.path.exists(again)
    else:
        assert _objects(again) == []


def test_list_databases_lists_data_sets_marked_as_such(tmp_path: Path) -> None:
    root = str(tmp_path / "backups")
    with inkpen.open(f"{root}/a-plain") as book:
        book.put("b", "k", b"v")
    _fill(f"{root}/b-set", count=3)
    _fill(f"{root}/c-gone", count=3)
    inkpen.destroy(f"{root}/c-gone", soft=True)
    listed = inkpen.list_databases(root)
    assert listed == ["a-plain", "b-set"]
    assert [(name.is_data_set, name.shards) for name in listed] == [(False, None), (True, SHARDS)]
    every = inkpen.list_databases(root, include_destroyed=True)
    assert every == ["a-plain", "b-set", "c-gone"] and every[2].shards == SHARDS
    assert repr(every[1]) == "DatabaseName('b-set', shards=3)" and repr(every[0]) == "'a-plain'"
    with shards.open(f"{root}/b-set") as book:  # and each listed data set opens as one
        assert book.get("b", "k000") == b"value 0"
