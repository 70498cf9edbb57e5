"""How the command fails: one error line, a meaningful exit status, no traceback unless --debug;
and how it presents itself: help with an example for every command, version, the installed script.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from inkpen.cli import main
from inkpen.objectstore.seaweed import SeaweedServer
from support.cli import COMMAND_TIMEOUT, error_line, fails, inkpen_command, ok, populate

MakeUrl = Callable[[str], str]


def every_command() -> list[list[str]]:
    """The path of every command under the group, e.g. ``["checkpoint", "create"]``."""
    found: list[list[str]] = []

    def walk(group: click.Group, prefix: list[str]) -> None:
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])
            else:
                found.append([*prefix, name])

    walk(main, [])
    return found


def test_every_command_has_help_with_an_example() -> None:
    commands = every_command()
    assert len(commands) >= 17
    runner = CliRunner()
    for path in commands:
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Example:" in result.output, path
    top = ok("--help").out
    assert "Exit status: 0 ok, 1 failed, 2 bad usage, 3 damaged data." in " ".join(top.split())


def test_version_and_the_installed_script() -> None:
    from inkpen import __version__

    assert ok("--version").out.strip() == f"inkpen, version {__version__}"
    ran = inkpen_command("--version", script=True)
    assert ran.code == 0 and __version__ in ran.out


def test_a_missing_local_database_is_reported_and_not_created(tmp_path: Path) -> None:
    where = tmp_path / "no-such-db"
    for args in (
        ("info", str(where)),
        ("ls", str(where)),
        ("get", str(where), "b", "k"),
        ("verify", str(where)),
        ("compact", str(where)),
        ("backup", str(where), str(tmp_path / "copy")),
        ("checkpoint", "create", str(where)),
        ("gc", str(where)),
    ):
        ran = fails(1, *args)
        assert error_line(ran) == (
            f"Error: no inkpen database at {where}: the directory {where} does not exist"
        ), ran.explain()
    assert not where.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "the location is empty" in error_line(fails(1, "info", str(empty)))


def test_bad_urls_are_usage_errors_and_foreign_roots_no_database(tmp_path: Path) -> None:
    assert "unknown store URL scheme 'ftp'" in error_line(fails(2, "info", "ftp://host/db"))
    assert "memory store" in error_line(fails(2, "ls", "memory://db"))
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"not a database")
    assert "not an inkpen database" in error_line(fails(1, "info", str(foreign)))
    fails(2, "gc", str(tmp_path), "--min-age", "soon")
    fails(2, "ls", str(tmp_path), "--start", "a")  # a key range needs a bucket


@pytest.mark.s3
def test_s3_errors_name_the_bucket_and_the_database(seaweed: SeaweedServer) -> None:
    bucket = seaweed.new_bucket()
    empty = f"s3://{bucket}/nothing-{uuid.uuid4().hex[:6]}?endpoint={seaweed.endpoint}"
    assert "no inkpen database at s3://" in error_line(fails(1, "info", empty))
    nowhere = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/db?endpoint={seaweed.endpoint}"
    missing = error_line(fails(2, "ls", nowhere))
    assert "no-such-bucket-" in missing and "create" in missing


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    ran = inkpen_command("--debug", "info", str(tmp_path / "absent"))
    assert ran.code == 1
    assert "Traceback" in ran.stderr and "NotFoundError" in ran.stderr


def test_progress_is_a_bar_on_a_terminal_and_log_lines_elsewhere(
    make_store_url: MakeUrl,
) -> None:
    url = make_store_url("local")
    populate(url, crash=False)
    piped = ok("verify", url)
    progress = [line for line in piped.stderr.splitlines() if " event=verify.progress " in line]
    assert progress, piped.stderr
    assert "'" not in progress[0]  # key=value text, not Python reprs

    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "inkpen.cli", "verify", url],
            stdout=subprocess.PIPE,
            stderr=terminal,
        )
        os.close(terminal)  # the command holds the terminal's only other end now
        shown = _drain(controller)
        stdout, _ = process.communicate(timeout=COMMAND_TIMEOUT)
    finally:
        os.close(controller)
    assert process.returncode == 0
    assert b"result: all " in stdout
    assert b"verify.progress" not in shown, "no log lines on a terminal"
    assert b"\x1b[" in shown, "the bar draws with terminal control sequences"


def _drain(fd: int) -> bytes:
    """Everything written to a pseudo-terminal whose other end is closed."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the writing side is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)
