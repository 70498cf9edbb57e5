"""``inkpen verify`` on damaged databases: a flipped byte in an SST, in a journal file, in the
latest manifest, and a missing file, each reported with its object and offset and exit status 3.

The database is closed and small (one SST and one journal file), so which keys a damaged byte
touches is known: the journal's first record is the first put, the SST's first block holds its
first keys, the index entries.
"""

from __future__ import annotations

import json
from pathlib import Path

import inkpen
from inkpen.formats.journal import HEADER_SIZE
from support.cli import error_line, fails, inkpen_command, latest_manifest, ok
from support.damage import flip_in_file

EXIT_DAMAGED = 3


def build(root: Path) -> tuple[str, str, str]:
    """A closed database; answers its URL, its SST's key and its journal file's key."""
    url = str(root)
    # Values in the journal only, so that a get reads the journal record the tests damage.
    with inkpen.open(url, inline_value_bytes=0) as book:
        for i in range(200):
            book.put("users", f"user{i:04d}", b"profile %d" % i, indexes=[("add", "n_int", str(i))])
    _, manifest = latest_manifest(url)
    (sst,) = list(manifest.ledger.ssts())
    (journal,) = manifest.journal.files
    return url, sst.name, journal.name


def test_verify_reports_damaged_sst_and_journal_file(tmp_path: Path) -> None:
    url, sst, journal = build(tmp_path / "db")
    assert ok("verify", url).lines[-1].startswith("result: all ")
    flip_in_file(tmp_path / "db" / sst, 10, 0x10)
    flip_in_file(tmp_path / "db" / journal, HEADER_SIZE + 20, 0x10)

    ran = inkpen_command("verify", url)
    assert ran.code == EXIT_DAMAGED, ran.explain()
    assert f"DAMAGED {sst} at offset 0: SST data block 0 checksum mismatch" in ran.lines
    assert (
        f"DAMAGED {journal} at offset {HEADER_SIZE}: journal record checksum mismatch" in ran.lines
    )
    assert ran.lines[-1].startswith("result: 2 of ") and "damaged or missing" in ran.lines[-1]

    report = json.loads(inkpen_command("verify", url, "--json").out)
    assert not report["ok"]
    assert {(p["object"], p["kind"], p["offset"]) for p in report["problems"]} == {
        (sst, "sst", 0),
        (journal, "journal file", HEADER_SIZE),
    }
    assert report["checked"]["sst"] == {"objects": 1, "ok": 0, "units": 0}

    value = fails(EXIT_DAMAGED, "get", url, "users", "user0000")  # the first journal record
    assert journal in error_line(value) and f"offset {HEADER_SIZE}" in error_line(value)
    index = fails(EXIT_DAMAGED, "ls", url, "users", "--index", "n_int")  # the SST's first block
    assert sst in error_line(index)
    assert ok("get", url, "users", "user0199").stdout == b"profile 199"  # undamaged data reads


def test_verify_reports_a_missing_file(tmp_path: Path) -> None:
    url, sst, _ = build(tmp_path / "db")
    (tmp_path / "db" / sst).unlink()
    ran = inkpen_command("verify", url)
    assert ran.code == EXIT_DAMAGED, ran.explain()
    assert f"MISSING {sst}: named by a manifest but absent" in ran.lines


def test_verify_reports_a_damaged_latest_manifest(tmp_path: Path) -> None:
    url, _, _ = build(tmp_path / "db")
    manifest_id, _ = latest_manifest(url)
    key = f"manifest/{manifest_id:020d}.manifest"
    path = tmp_path / "db" / key
    flip_in_file(path, path.stat().st_size - 6, 0x10)

    ran = inkpen_command("verify", url, "--json")
    assert ran.code == EXIT_DAMAGED, ran.explain()
    (problem,) = json.loads(ran.out)["problems"]
    assert problem["object"] == key and problem["kind"] == "manifest"
    assert "restore the database from a backup" in problem["detail"]
    info = fails(EXIT_DAMAGED, "info", url)
    assert key in error_line(info)
