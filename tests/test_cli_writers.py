"""The commands that change a database: put, delete, compact, gc, backup, restore, clone, destroy.

Each runs as a separate process against its own database. Which commands fence a live writer is
checked against a Bookie kept open in this process: only the writing ones may.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

import inkpen
from inkpen.objectstore import open_store
from support.cli import (
    BINARY_KEY,
    BINARY_VALUE,
    error_line,
    fails,
    latest_manifest,
    ok,
    populate,
)

MakeUrl = Callable[[str], str]


def object_keys(url: str) -> set[str]:
    store = open_store(url)
    try:
        return {info.key for info in store.list("")}
    finally:
        store.close()


def test_put_get_delete_from_the_command_line(durable_kind: str, make_store_url: MakeUrl) -> None:
    url = make_store_url(durable_kind)
    missing = fails(1, "put", url, "users", "alice", "hello")
    assert "--create" in error_line(missing)

    ok("put", url, "users", "alice", "hello", "--create", "--index", "email_bin=alice@x.org")
    ok("put", url, "files", "hex:" + BINARY_KEY.hex(), "--file", "-", stdin=BINARY_VALUE)
    ok("put", url, "sessions", "s1", "token", "--ttl", "1h")
    assert ok("get", url, "users", "alice").stdout == b"hello"
    assert ok("get", url, "files", "hex:" + BINARY_KEY.hex()).stdout == BINARY_VALUE
    assert "expires        -" not in ok("get", url, "sessions", "s1", "--head").out
    assert ok("ls", url, "users", "--index", "email_bin").lines == ["alice@x.org\talice"]

    ok("delete", url, "users", "alice", "--unindex", "email_bin=alice@x.org")
    fails(1, "get", url, "users", "alice")
    assert ok("ls", url, "users", "--index", "email_bin").lines == []
    assert ok("ls", url).lines == ["files", "sessions"]

    if durable_kind == "local":  # refused before the store is reached: one kind of store shows it
        bad_index = fails(2, "put", url, "users", "bob", "x", "--index", "nofield")
        assert "FIELD=TERM" in error_line(bad_index)
        fails(2, "put", url, "users", "bob", "x", "--file", "-")  # both VALUE and --file
        fails(2, "put", url, "users", "", "x")  # inkpen's own checks: keys are never empty
        fails(2, "put", url, "users", "bob", "x", "--ttl", "400000d")  # over a century


def test_only_writing_commands_fence_a_live_writer(make_store_url: MakeUrl) -> None:
    url, backup = make_store_url("local"), make_store_url("local")
    with inkpen.open(url) as book:
        book.put("users", "alice", b"one")
        for args in (
            ("info", url),
            ("manifest", url),
            ("ls", url, "users"),
            ("get", url, "users", "alice"),
            ("checkpoint", "list", url),
            ("verify", url),
            ("gc", url, "--dry-run"),
            ("backup", url, backup, "--no-fence"),
        ):
            ok(*args)
            book.put("users", "alice", b"still the writer after " + args[0].encode())
        with inkpen.open_reader(backup) as copy:
            assert copy.get("users", "alice") == b"still the writer after gc"

        fails(2, "put", url, "users", "", "refused")  # a refused put opens nothing
        book.put("users", "alice", b"still the writer after a refused put")

        ok("put", url, "users", "bob", "from the command line")
        with pytest.raises(inkpen.FencedError):
            book.put("users", "carol", b"too late")
        assert book.get("users", "alice") == b"still the writer after a refused put"  # reads go on
        book.abandon()
    assert ok("get", url, "users", "bob").stdout == b"from the command line"


def test_compact_merges_the_ledger_and_rewrites_the_journal(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    for round_ in range(3):
        book = inkpen.open(url)
        for i in range(200):
            book.put("b", f"k{i:04d}", b"round %d of %d " % (round_, i) * 20)
        if round_ < 2:
            book.close()
        else:
            book.abandon()  # the last round is only in the journal: the ledger needs a flush
    report = json.loads(ok("compact", url, "--json").out)
    before, after, journal = report["before"], report["after"], report["journal_compaction"]
    assert journal["compacted"], "the first rounds' journal files hold only replaced values"
    assert journal["bytes_after"] < journal["bytes_before"]
    assert after["journal_bytes"] < before["journal_bytes"]
    assert before["memory_entries"] > 0, "recovery replayed the last round into memory"
    assert after["memory_entries"] == 0 and after["l0_files"] == 0, "persisted and merged down"
    assert sum(after["level_files"]) >= 1
    assert ok("get", url, "b", "k0123").stdout == b"round 2 of 123 " * 20
    text = ok("compact", url).out
    assert text.startswith(f"compacted {url}\nledger   0 -> 0 entries in memory, L0 0 -> 0 files")


def test_gc_plans_then_deletes_only_old_unneeded_objects(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    for round_ in range(2):
        with inkpen.open(url) as book:  # default gc_min_age: the writer leaves its garbage
            for i in range(100):
                book.put("b", f"k{i:03d}", b"v%d" % round_)
    before = object_keys(url)
    plan = json.loads(ok("gc", url, "--dry-run", "--min-age", "0", "--offline", "--json").out)
    planned = {item["key"] for item in plan["planned"]}
    assert planned and planned < before
    assert all(item["reason"] for item in plan["planned"])
    assert object_keys(url) == before, "a dry run deletes nothing"
    text = ok("gc", url, "--dry-run", "--min-age", "0", "--offline").out
    assert text.startswith(f"would delete {len(planned)} objects")

    young = json.loads(ok("gc", url, "--min-age", "1h", "--json").out)
    assert young["deleted"] == [] and object_keys(url) == before

    done = json.loads(ok("gc", url, "--min-age", "0", "--offline", "--json").out)
    assert set(done["deleted"]) == planned
    assert object_keys(url) == before - planned
    assert done["bytes_deleted"] > 0
    assert ok("get", url, "b", "k042").stdout == b"v1"
    ok("verify", url)


def test_backup_and_restore(durable_kind: str, make_store_url: MakeUrl) -> None:
    url, backup, restored = (
        make_store_url(durable_kind),
        make_store_url(durable_kind),
        make_store_url(durable_kind),
    )
    model = populate(url, crash=False)
    first = json.loads(ok("backup", url, backup, "--json").out)
    assert first["files_copied"] == first["files"] > 0

    ran = ok("restore", backup, restored)
    assert ran.lines[0] == f"restored {backup} into {restored}"
    assert "ledger        up to SQN" in ran.out
    assert "copy.finished" in ran.stderr and "restore.finished" in ran.stderr
    keys = ok("ls", restored, "users").lines
    assert [k.encode() for k in keys] == sorted(model)
    assert ok("get", restored, "users", "user0100").stdout == model[b"user0100"]
    assert ok("get", restored, "files", "hex:" + BINARY_KEY.hex()).stdout == BINARY_VALUE
    oslo = ok("ls", restored, "users", "--index", "city_bin", "--start", "Oslo", "--end", "Oslo")
    assert len(oslo.lines) == len([k for k in model if int(k[4:]) % 3 == 0])
    _, manifest = latest_manifest(restored)
    assert manifest.sst_count() >= 1, "the restore left a built ledger"

    again = json.loads(ok("backup", url, backup, "--json").out)
    assert again["files_kept"] > 0, "a second backup into the same place is incremental"
    occupied = fails(2, "restore", backup, restored)
    assert "already holds an inkpen database" in error_line(occupied)


def test_backup_without_fencing_copies_a_live_writers_acknowledged_writes(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url, backup, restored = (
        make_store_url(durable_kind),
        make_store_url(durable_kind),
        make_store_url(durable_kind),
    )
    with inkpen.open(url) as book:
        for i in range(50):
            book.put("b", f"k{i:02d}", b"acknowledged %d" % i)
        copied = json.loads(ok("backup", url, backup, "--no-fence", "--json").out)
        book.put("b", "after", b"the writer was not fenced")
    assert copied["segments_rolled"] >= 1, "unrolled segments are part of the copy"
    ok("restore", backup, restored)
    assert len(ok("ls", restored, "b").lines) == 50
    assert ok("get", restored, "b", "k49").stdout == b"acknowledged 49"
    fails(1, "get", restored, "b", "after")


def test_clone_shares_the_parents_files(make_store_url: MakeUrl) -> None:
    parent, child = make_store_url("local"), make_store_url("local")
    model = populate(parent, crash=False)
    assert ok("clone", parent, child).out.startswith(f"cloned {parent} into {child}")
    assert "clone of      file://" in ok("info", child).out
    assert len(ok("ls", child, "users").lines) == len(model)
    ok("put", child, "users", "zed", "only in the clone")
    fails(1, "get", parent, "users", "zed")
    assert any(
        cp["kind"] == "clone" for cp in json.loads(ok("checkpoint", "list", parent, "--json").out)
    )


def test_destroy_needs_yes_and_respects_checkpoints(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    populate(url, crash=False)
    before = object_keys(url)
    refused = fails(2, "destroy", url)
    assert "--yes" in error_line(refused)
    assert object_keys(url) == before

    (checkpoint_id,) = ok("checkpoint", "create", url).lines
    pinned = fails(2, "destroy", url, "--yes")
    assert checkpoint_id in error_line(pinned)
    assert "inkpen checkpoint delete" in error_line(pinned)
    ok("checkpoint", "delete", url, checkpoint_id)

    ok("destroy", url, "--soft", "--yes")
    assert "destroyed     at " in ok("info", url).out
    assert "was destroyed" in error_line(fails(1, "get", url, "users", "user0001"))
    gone = ok("gc", url, "--destroy-grace", "0", "--min-age", "0", "--offline")
    assert "the database was destroyed and is now removed" in gone.out
    assert object_keys(url) == set()
    fails(1, "info", url)


def test_hard_destroy_removes_every_object(durable_kind: str, make_store_url: MakeUrl) -> None:
    url = make_store_url(durable_kind)
    populate(url, crash=False)
    assert object_keys(url)
    assert ok("destroy", url, "--yes").out.strip() == f"destroyed {url}: every object is removed"
    assert object_keys(url) == set()
    fails(1, "ls", url)
