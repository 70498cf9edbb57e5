"""The examples run as a user runs them, and say what they did.

- ``quickstart.py`` in a fresh directory with its default location, twice (the second run reuses
  the database and backs up only what is new);
- ``http_app.py``: its service driven over loopback by concurrent clients in this process, and the
  script itself started, asked, and stopped with SIGINT;
- ``backup_cron.py``: three runs keeping two dated backups, which restore as databases;
- every example (``spark_job.py`` and ``stream_job.py`` run in the pipeline tests):
  ``--help`` says what it is and how to call it, and touches nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import inkpen
from support.cli import ok, populate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUN_TIMEOUT = 180.0
START_TIMEOUT = 60.0


def example(name: str) -> ModuleType:
    """An example script as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


ALL_EXAMPLES = sorted(path.stem for path in EXAMPLES.glob("*.py"))


def test_every_example_is_covered_here() -> None:
    """A new example gets its ``--help`` run below; this guards the listing itself."""
    assert {"backup_cron", "http_app", "quickstart", "spark_job", "stream_job"} <= set(ALL_EXAMPLES)


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_every_example_answers_help_and_touches_nothing(name: str, tmp_path: Path) -> None:
    ran = run_example(name, "--help", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"usage: {name}.py ")
    docstring = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8").split('"""')[1]
    description = ran.stdout.split("\n\n")[1]  # argparse's description: the docstring's start
    assert description.split()[:5] == docstring.split()[:5]
    assert list(tmp_path.iterdir()) == []  # no database, no directory named --help


def test_quickstart_runs_in_a_fresh_directory_and_again(tmp_path: Path) -> None:
    first = run_example("quickstart", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    demo = tmp_path / ".inkpen-demo"
    assert lines[0] == f"inkpen {inkpen.__version__}: database in {demo / 'db'}"
    assert re.fullmatch(r"load  3,000 users with 2 index entries each in [\d.]+ s", lines[1])
    assert "index city_bin = Oslo -> 600 users, first user00001" in lines
    assert "index born_bin 1990..1994 -> 330 users, first user00030 (born 1990)" in lines
    assert "fold  users -> 3000 objects, 160,290 bytes of profiles" in lines
    assert 'snapshot sees {"name": "User 0", "city": "Lisbon", "born": "1960"}' in lines
    assert 'live book sees {"name": "Renamed"}' in lines
    assert any(re.match(r"hot backup -> .*: \d+ file\(s\), \d+ copied", x) for x in lines)
    assert 'backup reads as a database: 3000 users, users/user00000 -> {"name": "Renamed"}' in lines
    assert lines[-1].endswith(f"restore {demo / 'backup'} {demo / 'restored'}")
    hint = lines[-1].split()
    restored = subprocess.run(
        [sys.executable, "-m", "inkpen.cli", *hint[1:]], capture_output=True, text=True, check=False
    )
    assert restored.returncode == 0, restored.stderr  # the printed hint works

    again = run_example("quickstart", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    second_hint = again.stdout.splitlines()[-1]
    assert second_hint.endswith(f"restore {demo / 'backup'} {demo / 'restored-2'}")
    restored = subprocess.run(
        [sys.executable, "-m", "inkpen.cli", *second_hint.split()[1:]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert restored.returncode == 0, restored.stderr  # and still works on a second run
    backup_line = next(x for x in again.stdout.splitlines() if x.startswith("hot backup"))
    kept = int(re.search(r"(\d+) already there", backup_line).group(1))  # type: ignore[union-attr]
    assert kept >= 1, backup_line
    with inkpen.open_reader(str(demo / "db")) as db:
        assert sum(1 for _ in db.keys("users")) == 3000
        assert db.get("sessions", "s1") == b"token"


# -- the HTTP application -------------------------------------------------------------------


class Client:
    """Requests to one server over loopback."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.base + path, data=body, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, dict(reply.headers), reply.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def json(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        status, _, payload = self.call(method, path, body)
        return status, json.loads(payload)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Client, str]]:
    """The example's service on a Bookie in tmp_path, on a free loopback port."""
    app = example("http_app")
    url = str(tmp_path / "db")
    service = app.ObjectService(
        inkpen.open(url), tmp_path / "backups", reopen=lambda: inkpen.open(url)
    )
    try:
        server = app.ObjectServer(("127.0.0.1", 0), service)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield Client(f"http://127.0.0.1:{server.server_address[1]}"), url
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
    finally:
        service.close()


def test_http_app_serves_objects_to_concurrent_clients(served: tuple[Client, str]) -> None:
    client, _ = served

    def put(i: int) -> int:
        status, _ = client.json(
            "PUT",
            f"/objects/users/user{i:03d}?index=city_bin:{['Oslo', 'Lima'][i % 2]}",
            b"profile %d" % i,
        )
        return status

    with ThreadPoolExecutor(max_workers=16) as pool:
        assert set(pool.map(put, range(200))) == {201}

    status, _, body = client.call("GET", "/objects/users/user042")
    assert (status, body) == (200, b"profile 42")
    status, headers, body = client.call("HEAD", "/objects/users/user042")
    assert status == 200 and body == b""
    assert headers["Content-Length"] == "10" and int(headers["X-Inkpen-Sqn"]) >= 1
    assert client.json("GET", "/objects/users?start=user010&end=user013") == (
        200,
        ["user010", "user011", "user012", "user013"],
    )
    status, entries = client.json("GET", "/index/users/city_bin?start=Lima&end=Lima")
    assert status == 200 and len(entries) == 100 and entries[0] == ["Lima", "user001"]
    assert client.json("GET", "/buckets") == (200, ["users"])

    assert client.call("DELETE", "/objects/users/user042?unindex=city_bin:Oslo")[0] == 204
    assert client.call("GET", "/objects/users/user042")[0] == 404
    assert client.call("HEAD", "/objects/users/user042")[0] == 404
    status, entries = client.json("GET", "/index/users/city_bin?start=Oslo&end=Oslo")
    assert len(entries) == 99

    status, error = client.json("PUT", "/objects/users/x?index=nofield", b"v")
    assert status == 400 and "FIELD:TERM" in error["error"]
    assert client.json("PUT", "/objects/users/x?ttl=soon", b"v")[0] == 400
    assert client.call("GET", "/nowhere")[0] == 404
    status, slash = client.json("PUT", "/objects/paths/a%2Fb", b"slash in a key")
    assert status == 201 and slash["key"] == "a/b"
    assert client.call("GET", "/objects/paths/a%2Fb")[2] == b"slash in a key"

    status, report = client.json("POST", "/backup")
    assert status == 200 and report["files"] >= 1
    with inkpen.open_reader(report["destination"]) as backup:
        assert backup.get("users", "user199") == b"profile 199"
        assert backup.get("users", "user042") is None


def _raw(base: str, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` bytes as they are (as curl sends them) and read the whole answer."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_http_app_takes_curl_requests_and_explains_bad_ones(served: tuple[Client, str]) -> None:
    client, _ = served
    assert client.call("PUT", "/objects/b/k", b"v")[0] == 201
    # curl -X POST .../backup sends neither a body nor a Content-Length
    status, body = _raw(
        client.base, b"POST /backup HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert status == 200, body
    with inkpen.open_reader(json.loads(body)["destination"]) as backup:
        assert backup.get("b", "k") == b"v"
    status, error = client.json("PUT", "/objects/b/k2?ttl=soon", b"v")
    assert status == 400 and error["error"] == "ttl='soon' must be a number of seconds above 0"
    status, error = client.json("PUT", "/objects/b/k2?ttl=-5", b"v")
    assert status == 400 and "ttl='-5'" in error["error"]
    status, error = client.json("GET", "/objects/b?limit=many")
    assert status == 400 and "limit='many' must be a count" in error["error"]
    assert "could not convert" not in json.dumps(error)
    status, body = _raw(
        client.base,
        b"PUT /objects/b/k3 HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n"
        b"Connection: close\r\n\r\n",
    )
    assert status == 400 and client.call("GET", "/objects/b/k3")[0] == 404


def test_http_app_recovers_from_being_fenced(served: tuple[Client, str]) -> None:
    client, url = served
    assert client.call("PUT", "/objects/b/k", b"first")[0] == 201
    with inkpen.open(url) as other:  # another process opening the database for writing
        other.put("b", "other", b"from the other writer")
        status, error = client.json("PUT", "/objects/b/k", b"second")
        assert status == 409 and "POST /reopen" in error["error"], error
        assert client.call("GET", "/objects/b/k")[2] == b"first"  # reads go on
        assert client.json("PUT", "/objects/b/k", b"third")[0] == 409  # until reopened
    status, reopened = client.json("POST", "/reopen")
    assert status == 200, reopened
    assert client.call("PUT", "/objects/b/k", b"fourth")[0] == 201
    assert client.call("GET", "/objects/b/k")[2] == b"fourth"
    assert client.call("GET", "/objects/b/other")[2] == b"from the other writer"


def test_http_app_serves_prometheus_metrics(served: tuple[Client, str]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    client, url = served

    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, headers, body = client.call("GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=")
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
        }

    for i in range(12):
        assert client.call("PUT", f"/objects/b/k{i}", b"value")[0] == 201
    for i in range(5):
        assert client.call("GET", f"/objects/b/k{i}")[0] == 200
    assert client.call("GET", "/objects/b/missing")[0] == 404
    samples = scraped()
    assert samples["inkpen_puts_total", ()] == 12
    assert samples["inkpen_gets_total", ()] == 6
    assert samples["inkpen_put_seconds_count", ()] == 12
    assert samples["inkpen_get_seconds_bucket", (("le", "+Inf"),)] == 6
    assert samples["inkpen_level_files", (("level", "0"),)] == 0
    assert samples["inkpen_store_requests_total", (("op", "put"),)] >= 12
    with inkpen.open(url):  # fenced: the server reopens, and its metrics follow the new Bookie
        pass
    assert client.json("POST", "/reopen")[0] == 200
    assert client.call("PUT", "/objects/b/after", b"v")[0] == 201
    samples = scraped()
    assert samples["inkpen_puts_total", ()] == 1 and samples["inkpen_fenced", ()] == 0


def _line(process: subprocess.Popen[str], deadline: float) -> str:
    """The next line of the process's stdout, waiting until ``deadline`` at most."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                return process.stdout.readline()
    raise AssertionError("the example printed nothing before the deadline")


def test_http_app_script_starts_answers_and_stops_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "db"
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "http_app.py"), str(db), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread's stack
    )
    try:
        first = _line(process, time.monotonic() + START_TIMEOUT)
        match = re.match(r"listening on (http://127\.0\.0\.1:\d+) \(database file://", first)
        assert match, first
        client = Client(match.group(1))
        assert client.call("PUT", "/objects/b/k", b"over loopback")[0] == 201
        assert client.call("GET", "/objects/b/k")[2] == b"over loopback"
        process.send_signal(signal.SIGINT)
        try:
            out, err = process.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, err = process.communicate(timeout=30)
            raise AssertionError(f"the app did not stop within {RUN_TIMEOUT} s:\n{err}") from None
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert out.strip() == "stopped; database closed"
    assert ok("get", str(db), "b", "k").stdout == b"over loopback"


# -- the cron backup --------------------------------------------------------------------------


def test_backup_cron_keeps_dated_backups_that_restore(tmp_path: Path) -> None:
    source, backups = str(tmp_path / "db"), tmp_path / "backups"
    model = populate(source, crash=True)  # as if the application were still running
    lines = []
    for _ in range(3):
        ran = run_example("backup_cron", source, str(backups), "--keep", "2", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        lines.append(ran.stdout.strip())
    assert all(
        re.match(rf"backed up {re.escape(source)} to {re.escape(str(backups))}/", x) for x in lines
    )
    assert lines[0].endswith("removed 0 old backup(s)")
    assert lines[2].endswith("removed 1 old backup(s)")
    kept = sorted(name for name in os.listdir(backups) if not name.startswith(".inkpen-"))
    assert len(kept) == 2 and all(re.fullmatch(r"\d{8}T\d{6}\.\d{3}Z", name) for name in kept)
    newest = str(backups / kept[-1])
    restored = str(tmp_path / "restored")
    ok("restore", newest, restored)
    assert [k.encode() for k in ok("ls", restored, "users").lines] == sorted(model)

    failed = run_example("backup_cron", str(tmp_path / "absent"), str(backups), cwd=tmp_path)
    assert failed.returncode == 1
    assert failed.stderr.strip().startswith(f"backup of {tmp_path / 'absent'} failed: ")
