"""Running the ``inkpen`` command as an operator does: a separate process, output and status.

Commands run as ``python -m inkpen.cli`` with this interpreter and this process's environment,
which holds the dummy AWS credentials while the SeaweedFS fixture runs. Their stderr is a pipe,
so they log progress as plain lines rather than drawing bars.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import inkpen
from inkpen.manifest.model import Manifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY

COMMAND_TIMEOUT = 180.0


@dataclass(frozen=True)
class Ran:
    """One finished command."""

    args: tuple[str, ...]
    code: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def explain(self) -> str:
        command = " ".join(self.args)
        return f"inkpen {command} -> {self.code}\nstdout:\n{self.out}\nstderr:\n{self.stderr}"


def inkpen_command(
    *args: str, stdin: bytes | None = None, cwd: Path | None = None, script: bool = False
) -> Ran:
    """Run ``inkpen ARGS``; ``script`` runs the installed console script instead of ``-m``."""
    if script:
        program = [str(Path(sys.executable).with_name("inkpen"))]
    else:
        program = [sys.executable, "-m", "inkpen.cli"]
    done = subprocess.run(
        [*program, *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=dict(os.environ),
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    return Ran(tuple(args), done.returncode, done.stdout, done.stderr.decode("utf-8", "replace"))


def ok(*args: str, stdin: bytes | None = None) -> Ran:
    """Run ``inkpen ARGS`` and require exit status 0."""
    ran = inkpen_command(*args, stdin=stdin)
    assert ran.code == 0, ran.explain()
    return ran


def fails(code: int, *args: str) -> Ran:
    """Run ``inkpen ARGS`` and require exit status ``code``, one error line and no traceback."""
    ran = inkpen_command(*args)
    assert ran.code == code, ran.explain()
    assert "Traceback" not in ran.stderr, ran.explain()
    errors = [line for line in ran.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, ran.explain()
    return ran


def error_line(ran: Ran) -> str:
    """The one ``Error: ...`` line of a failed command."""
    return next(line for line in ran.stderr.splitlines() if line.startswith("Error: "))


def latest_manifest(url: str) -> tuple[int, Manifest]:
    """The id and contents of the latest manifest at ``url``, read in this process."""
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None, f"no manifest at {url}"
        return latest.id, latest.manifest
    finally:
        store.close()


USERS = 240
CITIES = ("Oslo", "Lima", "Quito")
BINARY_KEY = b"\x00\xffraw"
BINARY_VALUE = bytes(range(256)) * 4


def populate(url: str, *, crash: bool) -> dict[bytes, bytes]:
    """Write a small data set at ``url``; answers the users bucket as a model, key -> value.

    ``users`` holds ``USERS`` profiles indexed by city (``city_bin``), one of them deleted;
    ``files`` holds one binary value under a key that is not UTF-8. The profiles are written with
    tiny files (so the ledger has several levels and the journal many files) by a writer that
    closes; a second writer then makes the last two changes. With ``crash`` it stops as a crash
    would, leaving those changes in unrolled journal segments and its writer checkpoint behind.
    """
    model: dict[bytes, bytes] = {}
    with inkpen.open(url, **TINY) as book:
        for i in range(USERS):
            key, value = f"user{i:04d}", f"profile {i}".encode()
            book.put("users", key, value, indexes=[("add", "city_bin", CITIES[i % len(CITIES)])])
            model[key.encode()] = value
    book = inkpen.open(url, **{**TINY, "roll_segments": 1_000_000, "roll_bytes": 1 << 30})
    try:
        book.put("files", BINARY_KEY, BINARY_VALUE)
        book.delete("users", "user0007", indexes=[("remove", "city_bin", CITIES[7 % 3])])
        del model[b"user0007"]
    except BaseException:
        book.abandon()
        raise
    if crash:
        book.abandon()
    else:
        book.close()
    return model
