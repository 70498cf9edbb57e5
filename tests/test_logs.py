"""inkpen's logs in someone else's application: routed and silenced by stdlib logging alone.

Each case runs an application in a subprocess that configures structlog for itself (rendering
its own events as JSON to stdout) and stdlib logging its own way; inkpen's events must follow
the stdlib configuration, never the application's structlog one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

APP = """
import json, logging, sys
import structlog

structlog.configure(
    processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
    logger_factory=structlog.PrintLoggerFactory(sys.stdout),
)
app_log = structlog.get_logger("app")

handler = logging.FileHandler(sys.argv[2])
handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.DEBUG)
MODE = sys.argv[3]
if MODE == "silenced":
    logging.getLogger("inkpen").setLevel(logging.CRITICAL)
elif MODE == "info":
    logging.getLogger("inkpen").setLevel(logging.INFO)

import inkpen

app_log.info("app.started")
with inkpen.open(sys.argv[1]) as book:
    book.put("b", "k", b"v")
    app_log.info("app.put")
app_log.info("app.done")
"""


def _run(tmp_path: Path, mode: str) -> tuple[list[dict[str, object]], list[str]]:
    logfile = tmp_path / f"{mode}.log"
    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APP), str(tmp_path / mode), str(logfile), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    stdout = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    lines = logfile.read_text().splitlines()
    assert lines or mode != "debug"  # the handler works: other libraries' records reach it
    return stdout, [line for line in lines if line.split(" ")[1].startswith("inkpen")]


def test_debug_routes_every_event_to_the_stdlib_handler_not_to_app_structlog(
    tmp_path: Path,
) -> None:
    app_events, lines = _run(tmp_path, "debug")
    # the application's structlog output holds its own events and nothing of inkpen's
    assert [e["event"] for e in app_events] == ["app.started", "app.put", "app.done"]
    inkpen_lines = [line for line in lines if " inkpen." in line]
    assert any(line.startswith("DEBUG inkpen.manifest event=manifest.commit ") for line in lines)
    assert any(line.startswith("INFO inkpen.bookie event=bookie.open ") for line in lines)
    # real logfmt: no Python reprs (quotes around plain strings) in the messages
    for line in inkpen_lines:
        assert "event='" not in line and "level='" not in line, line


def test_info_is_a_few_summary_lines_for_open_put_close(tmp_path: Path) -> None:
    _, lines = _run(tmp_path, "info")
    events = [line.split(" ")[2] for line in lines]
    assert "event=bookie.open" in events and "event=bookie.close" in events
    assert all(line.startswith(("INFO ", "WARNING ")) for line in lines), lines
    assert len(lines) <= 5, lines  # open, the L0 flush and merge at close, close


def test_silenced_by_the_stdlib_level_alone(tmp_path: Path) -> None:
    app_events, lines = _run(tmp_path, "silenced")
    assert [e["event"] for e in app_events] == ["app.started", "app.put", "app.done"]
    assert lines == []
