"""The ``inkpen`` command over sharded data sets: every command that takes a database URL takes a
data set's URL, acting on every shard or on ``--shard I`` (or routing by key, or saying in one line
what to run instead), on a local directory and on SeaweedFS."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import inkpen
from inkpen import shards
from inkpen.cli import main
from inkpen.objectstore import open_store
from support.cli import inkpen_command

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


# -- every command on a data set URL, and --shard ------------------------------------------------


def _in_shard(url: str, index: int) -> dict[bytes, bytes]:
    with inkpen.open_reader(shards.shard_url(url, index)) as reader:
        return {k: v for _b, k, v in reader.objects("b")}


def _refusal(done: Result, *words: str) -> None:
    """A one-line refusal with exit status 2, saying what the URL is and what to run."""
    assert done.exit_code == 2, done.output
    (line,) = [text for text in done.output.splitlines() if text.startswith("Error: ")]
    assert f"is a sharded data set of {SHARDS} shards" in line
    for word in words:
        assert word in line, line


def test_reads_and_writes_on_a_data_set_url(durable_store_url: str) -> None:
    url = durable_store_url
    written = _fill(url, keys=12)
    keys = sorted(written)
    assert run("ls", url).stdout.splitlines() == ["b"]
    assert run("ls", url, "b").stdout.splitlines() == keys  # every shard, merged in key order
    assert run("ls", url, "b", "--limit", "3").stdout.splitlines() == keys[:3]
    long_form = run("ls", url, "b", "-l").stdout.splitlines()
    assert [line.split()[-1] for line in long_form] == keys
    shard_1 = sorted(k.decode() for k in _in_shard(url, 1))
    assert run("ls", url, "b", "--shard", "1").stdout.splitlines() == shard_1
    got = run("get", url, "b", "k007")
    assert (got.exit_code, got.stdout_bytes) == (0, written["k007"]), got.output
    assert "size           7" in run("get", url, "b", "k007", "--head").stdout
    assert run("get", url, "b", "absent").exit_code == 1
    stored = run("put", url, "b", "new", "fresh", "--index", "t_bin=x")
    assert stored.exit_code == 0, stored.output
    assert _in_shard(url, shards.shard_of("b", "new", SHARDS))[b"new"] == b"fresh"
    assert run("ls", url, "b", "--index", "t_bin").stdout.splitlines() == ["x\tnew"]
    deleted = run("delete", url, "b", "k003")
    assert deleted.exit_code == 0, deleted.output
    assert b"k003" not in _in_shard(url, shards.shard_of("b", "k003", SHARDS))
    # A data-set checkpoint names the state get and ls read at, in every shard.
    made = run("checkpoint", "create", url, "--name", "before", "--lifetime", "1h")
    assert made.exit_code == 0, made.output
    checkpoint = made.stdout.strip()
    run("put", url, "b", "k007", "later")
    assert run("get", url, "b", "k007", "--checkpoint", "before").stdout_bytes == written["k007"]
    assert run("get", url, "b", "k007").stdout_bytes == b"later"
    pinned = run("ls", url, "b", "--checkpoint", checkpoint).stdout.splitlines()
    assert pinned == sorted([*(k for k in keys if k != "k003"), "new"])


def test_inspection_commands_on_a_data_set_url(durable_store_url: str, tmp_path: Path) -> None:
    url = durable_store_url
    _fill(url, keys=12)
    drawn = run("lsm", url)
    assert drawn.exit_code == 0, drawn.output
    assert [line for line in drawn.stdout.splitlines() if line.startswith("shard ")] == [
        f"shard {i}: {open_store(shards.shard_url(url, i)).url}" for i in range(SHARDS)
    ]
    assert len(json.loads(run("lsm", url, "--json").stdout)["shards"]) == SHARDS
    _refusal(run("lsm", url, "--html", str(tmp_path / "page.html")), "--shard I --html")
    page = tmp_path / "shard.html"
    assert run("lsm", url, "--shard", "2", "--html", str(page)).exit_code == 0
    assert page.read_text(encoding="utf-8").startswith("<!doctype html>")
    _refusal(run("manifest", url), f"inkpen manifest {url} --shard I")
    shown = run("manifest", url, "--shard", "2", "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["id"] >= 1
    one = json.loads(run("info", url, "--shard", "1", "--json").stdout)
    assert "shards" not in one and one["url"] == open_store(shards.shard_url(url, 1)).url
    checked = json.loads(run("verify", url, "--shard", "1", "--json").stdout)
    assert checked["ok"] and "shards" not in checked
    listed = run("gc", url, "--dry-run", "--min-age", "0s", "--offline")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("shard ")]
    assert [lines[i].split(":")[0] for i in heads] == [f"shard {i}" for i in range(SHARDS)]
    counts = []
    for position, start in enumerate(heads):  # each object listed under its shard, with why
        end = heads[position + 1] if position + 1 < len(heads) else len(lines)
        counts.append(int(lines[start].split("would delete ")[1].split()[0]))
        planned = [line.strip() for line in lines[start + 1 : end] if ": " in line]
        assert len(planned) == counts[-1]
        assert all(
            line.split(": ")[0].startswith(("manifest/", "journal/", "ledger/")) for line in planned
        )
    assert sum(counts) > 0  # superseded manifests at least: the listing is not vacuous


def test_checkpoints_and_feed_cursors_of_a_data_set(durable_store_url: str) -> None:
    url = durable_store_url
    _fill(url, keys=12)
    made = run("checkpoint", "create", url, "--name", "nightly", "--lifetime", "2h", "--json")
    assert made.exit_code == 0, made.output
    created = json.loads(made.stdout)
    assert created["shards"] == list(range(SHARDS)) and created["complete"]
    (listed,) = json.loads(run("checkpoint", "list", url, "--json").stdout)
    assert (listed["id"], listed["name"]) == (created["id"], "nightly")
    assert f"{SHARDS} of {SHARDS}" in run("checkpoint", "list", url).stdout
    own = json.loads(run("checkpoint", "list", url, "--shard", "0", "--json").stdout)
    assert created["id"] in [cp["id"] for cp in own]  # each shard holds its part
    assert run("checkpoint", "refresh", url, "--name", "nightly", "--lifetime", "3h").exit_code == 0
    refused_source = run("checkpoint", "create", url, "--source", created["id"])
    assert refused_source.exit_code == 2 and "--shard I" in refused_source.output
    gone = run("checkpoint", "delete", url, "--name", "nightly")
    assert gone.exit_code == 0 and f"from {SHARDS} shards" in gone.stdout
    assert json.loads(run("checkpoint", "list", url, "--json", "--all").stdout) == []
    for index in range(SHARDS):
        with inkpen.open_reader(shards.shard_url(url, index)) as reader:
            assert reader.checkpoint_id != created["id"]
    # Feed cursors: one per shard under one name.
    assert run("feed", "create", url, "exporter", "--owner", "tests").exit_code == 0
    rows = run("feed", "list", url).stdout.splitlines()
    assert [row.split("\t")[:2] for row in rows] == [
        [f"shard {i}", "exporter"] for i in range(SHARDS)
    ]
    _refusal(run("feed", "create", url, "late", "--sqn", "3"), "--shard I")
    _refusal(run("feed", "advance", url, "exporter", "1"), "--shard I")
    moved = run("feed", "advance", url, "exporter", "1", "--shard", "2")
    assert moved.exit_code == 0, moved.output
    cursors = json.loads(run("feed", "list", url, "--json").stdout)
    assert [(c["shard"], c["sqn"]) for c in cursors] == [(0, 0), (1, 0), (2, 1)]
    assert run("feed", "delete", url, "exporter", "--shard", "1").exit_code == 0
    assert "from 2 shards" in run("feed", "delete", url, "exporter").stdout
    assert run("feed", "delete", url, "exporter").exit_code == 1


def test_writers_and_copies_of_a_data_set(durable_kind: str, make_store_url: MakeUrl) -> None:
    url, clone, dest = (make_store_url(durable_kind) for _ in range(3))
    written = _fill(url, keys=12)
    compacted = run("compact", url)
    assert compacted.exit_code == 0, compacted.output
    assert f"compacted the {SHARDS} shards of {url}" in compacted.stdout
    assert [line for line in compacted.stdout.splitlines() if line.startswith("shard ")] == [
        f"shard {i}:" for i in range(SHARDS)
    ]
    one = json.loads(run("compact", url, "--shard", "1", "--json").stdout)
    assert "shards" not in one and "journal_compaction" in one
    rounds = run("compactor", url, "--once", "--force")
    assert rounds.exit_code == 0, rounds.output
    claimed = [line for line in rounds.stdout.splitlines() if "claimed for shard" in line]
    assert len(claimed) == SHARDS
    reported = [line for line in rounds.stdout.splitlines() if line.startswith("shard ")]
    assert [line.split(":")[0] for line in reported] == [f"shard {i}" for i in range(SHARDS)]
    run("checkpoint", "create", url, "--name", "cut", "--lifetime", "1h")
    with shards.open(url) as book:
        book.put("b", "k000", b"after the checkpoint")
    cloned = run("clone", url, clone, "--checkpoint", "cut")
    assert cloned.exit_code == 0, cloned.output
    copied = run("backup", url, dest, "--checkpoint", "cut")
    assert copied.exit_code == 0 and "without opening a writer" in copied.stdout, copied.output
    for copy in (clone, dest):  # each at the checkpoint: before the later put
        with shards.open_reader(copy) as reader:
            assert {k.decode(): v for _b, k, v in reader.objects()} == written
    with shards.open(clone) as book:  # a clone is a working data set
        book.put("b", "k001", b"in the clone")
        assert book.get("b", "k000") == written["k000"]
    destroyed = run("destroy", clone, "--yes")
    assert destroyed.exit_code == 0, destroyed.output
    assert not shards.is_data_set(clone)


def test_shard_is_refused_where_it_means_nothing(make_store_url: MakeUrl) -> None:
    url, plain = make_store_url("local"), make_store_url("local")
    _fill(url, keys=3)
    with inkpen.open(plain) as book:
        book.put("b", "k", b"v")
    on_database = run("info", plain, "--shard", "0")
    assert on_database.exit_code == 2 and "leave --shard out" in on_database.output
    out_of_range = run("ls", url, "--shard", "3")
    assert out_of_range.exit_code == 2 and "--shard takes 0 to 2" in out_of_range.output
    assert "--shard" not in run("destroy", "--help").stdout.split("Options:")[1]


def _url_commands() -> list[tuple[str, click.Command]]:
    """Every command (and group subcommand) that takes a database URL, by its full name."""
    found: list[tuple[str, click.Command]] = []
    context = click.Context(main)
    for name in sorted(main.list_commands(context)):
        command = main.get_command(context, name)
        assert command is not None
        children = command.commands.items() if isinstance(command, click.Group) else []
        for full, each in [(name, command), *((f"{name} {n}", c) for n, c in children)]:
            if any(p.name in {"url", "url_a", "backup_url", "parent"} for p in each.params):
                found.append((full, each))
    return found


def test_every_url_command_says_what_it_does_with_a_data_set() -> None:
    """A command that takes a database URL acts on data sets (--shard picks one shard) or its
    help says why it does not: a new command must decide."""
    commands = _url_commands()
    assert {"info", "ls", "get", "put", "delete", "destroy", "feed advance", "merge-operators"} <= {
        name for name, _c in commands
    }
    for name, command in commands:
        text = " ".join((command.help or "").split())
        assert "sharded data set" in text, name
        # routed by key, or all or nothing
        if name not in {"get", "put", "delete", "destroy", "reshard"}:
            assert any(p.name == "shard" for p in command.params), name


def test_info_of_a_data_set_writes_no_progress_lines_to_a_pipe(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    _fill(url, keys=3)
    shown = inkpen_command("info", url)  # stderr is a pipe
    assert shown.code == 0, shown.explain()
    assert shown.stderr == "" and f"shards        {SHARDS}" in shown.out


def test_shard_makes_a_command_act_on_one_shard_as_on_a_database(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    _fill(url, keys=12)
    held = _in_shard(url, 1)
    for command in ("backup", "clone", "restore"):
        dest = make_store_url("local")
        done = run(command, url, dest, "--shard", "1")
        assert done.exit_code == 0, done.output
        assert not shards.is_data_set(dest)  # a database: shard 1's objects alone
        with inkpen.open_reader(dest) as reader:
            assert {k: v for _b, k, v in reader.objects("b")} == held, command
    rounds = run("compactor", url, "--shard", "1", "--once", "--force")
    assert rounds.exit_code == 0, rounds.output
    assert f"claimed for {shards.shard_url(url, 1)}" in rounds.stdout
    assert not any(line.startswith("shard ") for line in rounds.stdout.splitlines())
    collected = json.loads(run("gc", url, "--shard", "2", "--dry-run", "--json").stdout)
    assert (
        collected["url"] == open_store(shards.shard_url(url, 2)).url and "shards" not in collected
    )
