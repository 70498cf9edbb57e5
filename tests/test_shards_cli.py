"""The ``inkpen`` command over sharded data sets: info, verify, gc, backup, restore and diff act on
every shard, on a local directory and on SeaweedFS."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import inkpen
from inkpen import shards
from inkpen.cli import main
from inkpen.objectstore import open_store

MakeUrl = Callable[[str], str]
SHARDS = 3


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _fill(url: str, keys: int = 30) -> dict[str, bytes]:
    shards.create(url, shards=SHARDS)
    written = {f"k{i:03d}": f"value-{i}".encode() for i in range(keys)}
    with shards.open(url) as book:
        for key, value in written.items():
            book.put("b", key, value)
    return written


def test_info_describes_every_shard(durable_store_url: str) -> None:
    written = _fill(durable_store_url)
    done = run("info", durable_store_url, "--json")
    assert done.exit_code == 0, done.output
    found = json.loads(done.stdout)
    assert found["data_set"]["shards"] == SHARDS
    assert found["data_set"]["hash"] == shards.HASH
    per_shard = [s["journal"]["entries"] for s in found["shards"]]
    expected = [sum(1 for k in written if shards.shard_of("b", k, SHARDS) == i) for i in range(3)]
    assert per_shard == expected
    text = run("info", durable_store_url)
    assert text.exit_code == 0, text.output
    assert f"shards        {SHARDS} (hash {shards.HASH}" in text.stdout
    assert "total         " in text.stdout and f"{len(written)} journal entries" in text.stdout


def test_verify_checks_every_shard_and_names_a_damaged_one(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    _fill(url)
    clean = run("verify", url, "--json")
    assert clean.exit_code == 0, clean.output
    report = json.loads(clean.stdout)
    assert report["ok"] and len(report["shards"]) == SHARDS
    assert all(s["checked"]["sst"]["objects"] >= 1 for s in report["shards"])
    # Damage the SSTs of shard 1: verify exits 3 and the report puts the damage in shard 1.
    ledger = Path(shards.shard_url(url, 1)) / "ledger"
    names = set()
    for sst in ledger.iterdir():
        data = bytearray(sst.read_bytes())
        data[len(data) // 3] ^= 0xFF
        sst.write_bytes(bytes(data))
        names.add(sst.name)
    damaged = run("verify", url, "--json")
    assert damaged.exit_code == 3, damaged.output
    found = json.loads(damaged.stdout)
    assert not found["ok"]
    assert [s["ok"] for s in found["shards"]] == [True, False, True]
    assert found["shards"][1]["problems"][0]["object"].split("/")[-1] in names
    text = run("verify", url)
    assert text.exit_code == 3 and "shard 1: DAMAGED" in text.stdout


def test_backup_restore_and_diff_shard_by_shard(durable_kind: str, make_store_url: MakeUrl) -> None:
    url, backup, restored = (make_store_url(durable_kind) for _ in range(3))
    written = _fill(url)
    copied = run("backup", url, backup, "--no-fence", "--json")
    assert copied.exit_code == 0, copied.output
    assert len(json.loads(copied.stdout)["shards"]) == SHARDS
    assert shards.read_descriptor(backup) == shards.read_descriptor(url)
    back = run("restore", backup, restored)
    assert back.exit_code == 0, back.output
    same = run("diff", url, restored)
    assert (same.exit_code, same.stdout) == (0, ""), same.output
    with shards.open(restored) as book:
        assert book.get_many("b", sorted(written)) == [written[k] for k in sorted(written)]
    # A change to the source shows as one differing key, in the shard that holds it.
    with shards.open(url) as book:
        book.put("b", "k007", b"changed")
        book.delete("b", "k011")
    differing = run("diff", url, restored, "--json")
    assert differing.exit_code == 1, differing.output
    report = json.loads(differing.stdout)
    assert not report["same"]
    seen = {
        (index, d["kind"], d["key"])
        for index, shard in enumerate(report["shards"])
        for d in shard["differences"]
    }
    assert seen == {
        (shards.shard_of("b", "k007", SHARDS), "different", "k007"),
        (shards.shard_of("b", "k011", SHARDS), "only-in-b", "k011"),
    }
    against = run("verify", url, "--against", restored)
    assert against.exit_code == 1, against.output
    assert "against" in against.stdout and "2 keys differ" in against.stdout
    # An incremental backup into the same place brings it up to date.
    again = run("backup", url, backup, "--no-fence")
    assert again.exit_code == 0, again.output
    assert run("diff", url, backup).exit_code == 0


def test_gc_collects_every_shard(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    _fill(url)
    done = run("gc", url, "--dry-run", "--json")
    assert done.exit_code == 0, done.output
    found = json.loads(done.stdout)
    assert [s["url"] for s in found["shards"]] == [
        open_store(shards.shard_url(url, i)).url for i in range(SHARDS)
    ]
    assert all(s["dry_run"] for s in found["shards"])
    text = run("gc", url, "--min-age", "0s", "--offline")
    assert text.exit_code == 0, text.output
    assert [line.split(":")[0] for line in text.stdout.splitlines()] == [
        f"shard {i}" for i in range(SHARDS)
    ]
    assert run("verify", url).exit_code == 0


def test_copies_into_another_kind_of_root_are_refused(
    make_store_url: MakeUrl, tmp_path: Path
) -> None:
    url, other, plain = (make_store_url("local") for _ in range(3))
    _fill(url, keys=5)
    shards.create(other, shards=2)
    with inkpen.open(plain) as book:
        book.put("b", "k", b"v")
    into_database = run("backup", url, plain, "--no-fence")
    assert into_database.exit_code == 2
    assert "holds a plain inkpen database" in into_database.output
    into_other = run("backup", url, other, "--no-fence")
    assert into_other.exit_code == 2 and "has 2 shards" in into_other.output
    unknown = run("verify", url, "--checkpoint", "x")
    assert unknown.exit_code == 1 and "no data-set checkpoint with the id or name 'x'" in (
        unknown.output
    )
    assert not os.path.exists(shards.shard_url(other, 2))  # nothing was copied


def test_a_data_set_compares_whole_with_a_database_or_another_count(
    make_store_url: MakeUrl,
) -> None:
    url, other, plain = (make_store_url("local") for _ in range(3))
    written = _fill(url, keys=12)
    shards.create(other, shards=2)
    with inkpen.open(plain) as book, shards.open(other) as resharded:
        for key, value in written.items():
            book.put("b", key, value)
            resharded.put("b", key, value)
    for against in (plain, other):  # the merged trees of the shards are a database's tree
        same = run("diff", url, against)
        assert (same.exit_code, same.stdout) == (0, ""), same.output
    with inkpen.open(plain) as book:
        book.put("b", "k003", b"changed")
        book.delete("b", "k004")
    differing = run("diff", url, plain)
    assert differing.exit_code == 1, differing.output
    assert differing.stdout.splitlines() == ["different\tb\tk003", "only-in-a\tb\tk004"]
    verified = run("verify", url, "--against", plain, "--json")
    assert verified.exit_code == 1, verified.output
    (whole,) = json.loads(verified.stdout)["against"]  # one comparison: the data set whole
    assert {d["key"] for d in whole["differences"]} == {"k003", "k004"}
    one_shard = run("diff", url, other, "--shard", "1")  # shard 1 of each side
    assert one_shard.exit_code == 1  # the shards of 3 and of 2 hold other keys


@pytest.mark.parametrize("command", ["info", "verify", "gc"])
def test_a_shard_url_is_an_ordinary_database(make_store_url: MakeUrl, command: str) -> None:
    url = make_store_url("local")
    _fill(url, keys=5)
    done = run(command, shards.shard_url(url, 0), "--json")
    assert done.exit_code == 0, done.output
    assert "shards" not in json.loads(done.stdout)
