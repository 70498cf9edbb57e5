"""What the command says and its exit status where a new user went wrong or was misled."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import inkpen
from support.cli import error_line, fails, inkpen_command, ok


def _database(path: Path, n: int = 5) -> str:
    url = str(path)
    with inkpen.open(url) as book:
        for i in range(n):
            book.put(
                "users", f"u{i}", f"profile {i}".encode(), indexes=[("add", "city_bin", "Oslo")]
            )
    return url


def test_put_without_a_value_says_what_is_missing(tmp_path: Path) -> None:
    url = _database(tmp_path / "db")
    line = error_line(fails(2, "put", url, "users", "alice"))
    assert "no value to store" in line and "--file" in line and "not both" not in line
    both = tmp_path / "v"
    both.write_bytes(b"x")
    assert "not both" in error_line(fails(2, "put", url, "users", "a", "text", "--file", str(both)))


def test_checkpoint_refresh_and_delete_take_the_name_given_at_create(tmp_path: Path) -> None:
    url = _database(tmp_path / "db")
    made = ok("checkpoint", "create", url, "--name", "nightly", "--lifetime", "1h").lines[0]
    ok("checkpoint", "refresh", url, "--name", "nightly", "--lifetime", "2h")
    ok("checkpoint", "refresh", url, "nightly", "--lifetime", "3h")  # the name as ID works too
    listed = json.loads(ok("checkpoint", "list", url, "--json").out)
    mine = [cp for cp in listed if cp["id"] == made]
    assert len(mine) == 1
    missing = error_line(fails(1, "checkpoint", "delete", url, "--name", "weekly"))
    assert "`inkpen checkpoint list" in missing and "()" not in missing
    assert "one of them" in error_line(fails(2, "checkpoint", "delete", url, made, "--name", "x"))
    ok("checkpoint", "delete", url, "--name", "nightly")
    assert all(cp["id"] != made for cp in json.loads(ok("checkpoint", "list", url, "--json").out))


def test_a_file_is_not_called_a_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    for command in (("info",), ("ls",), ("verify",)):
        line = error_line(fails(1, *command, str(path)))
        assert "is a file, not a directory" in line and "does not exist" not in line
    assert path.read_text() == "hello"


def test_a_directory_that_is_no_database_exits_1_like_a_missing_one(tmp_path: Path) -> None:
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"not a database")
    assert "not an inkpen database" in error_line(fails(1, "info", str(foreign)))
    assert "not an inkpen database" in error_line(fails(1, "ls", str(foreign)))
    fails(1, "info", str(tmp_path / "absent"))
    assert sorted(os.listdir(foreign)) == ["cat.jpg"]


def test_ls_index_long_shows_size_sqn_and_time(tmp_path: Path) -> None:
    url = _database(tmp_path / "db", n=3)
    short = ok("ls", url, "users", "--index", "city_bin").lines
    assert short == [f"Oslo\tu{i}" for i in range(3)]
    long = ok("ls", url, "users", "--index", "city_bin", "-l").lines
    assert len(long) == 3
    for i, line in enumerate(long):
        size, sqn = line.split()[:2]
        assert int(size) == len(f"profile {i}") and int(sqn) == i + 1, line
        assert line.endswith(f"Oslo\tu{i}")


def test_restore_reports_the_rebuild_and_counts_its_steps(tmp_path: Path) -> None:
    url = _database(tmp_path / "db", n=200)
    ok("backup", url, str(tmp_path / "hot"))
    ran = ok("restore", str(tmp_path / "hot"), str(tmp_path / "restored"), "--json")
    report = json.loads(ran.out)
    assert report["total_seconds"] >= report["seconds"] + report["rebuild_seconds"] - 0.01
    finished = [line for line in ran.stderr.splitlines() if "event=restore.finished" in line]
    assert len(finished) == 1 and " done=2 " in finished[0], ran.stderr
    assert "total=?" not in ran.stderr and "total=2" in ran.stderr
    text = ok("restore", str(tmp_path / "hot"), str(tmp_path / "again")).lines[-1]
    assert re.fullmatch(r"took +[\d.]+s: [\d.]+s copying, [\d.]+s rebuilding the ledger", text)


def test_soft_destroy_then_gc_leaves_no_directory(tmp_path: Path) -> None:
    url = _database(tmp_path / "db")
    ok("destroy", url, "--soft", "--yes")
    ok("gc", url, "--destroy-grace", "0", "--min-age", "0", "--offline")
    assert not (tmp_path / "db").exists()
    ran = inkpen_command("info", url)
    assert ran.code == 1 and not (tmp_path / "db").exists()
