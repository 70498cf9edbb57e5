"""A Reader in another process keeps reading its checkpoint while the writer moves on.

The writer overwrites everything, merges, compacts the journal and collects garbage; the Reader
still sees exactly its checkpoint's objects, because GC keeps every file its checkpoint's manifest
names. Once the Reader closes — or dies and its checkpoint expires — GC removes those files.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import inkpen
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import SMALL
from support.latency_proxy import DURABLE_KIND_PARAMS, with_latency
from support.waiting import wait_until

READER = Path(__file__).parent / "support" / "reader_process.py"


@pytest.fixture(params=with_latency(DURABLE_KIND_PARAMS, tier=True))
def durable_kind(request: pytest.FixtureRequest) -> str:
    """A directory, SeaweedFS, and SeaweedFS behind the latency proxy (the latency tier)."""
    return str(request.param)


@pytest.fixture
def url(durable_store_url: str) -> str:
    """A fresh store root another process can open too: a directory, or SeaweedFS."""
    return durable_store_url


def start_reader(url: str, lifetime: float) -> tuple[subprocess.Popen[str], str]:
    reader = subprocess.Popen(
        [sys.executable, str(READER), url, str(lifetime)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None
    first = reader.stdout.readline().split()
    assert first[0] == "checkpoint", first
    return reader, first[1]


def ask(reader: subprocess.Popen[str], command: str) -> str:
    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.write(command + "\n")
    reader.stdin.flush()
    return reader.stdout.readline().strip()


def data_files(url: str) -> set[str]:
    store = open_store(url)
    return {i.key for p in ("ledger/", "journal/compacted/") for i in store.list(p)}


def checkpoint_files(url: str, checkpoint_id: str) -> set[str]:
    manifests = ManifestStore(open_store(url))
    latest = manifests.latest()
    assert latest is not None
    found = latest.manifest.checkpoint(checkpoint_id)
    assert found is not None
    return {name for _, name in manifests.read(found.manifest_id).referenced_objects()}


def churn(book: inkpen.Bookie, value: bytes) -> None:
    for i in range(300):
        book.put("r", f"k{i:03d}", value)
    book.flush()
    book.compact_ledger()
    for _ in range(20):
        if not book.compact_journal().compacted:
            break
    book.run_gc(min_age=0)


def test_reader_keeps_its_checkpoint_while_the_writer_compacts(url: str) -> None:
    with inkpen.open(url, **SMALL) as book:
        churn(book, b"first")
        reader, checkpoint_id = start_reader(url, lifetime=120.0)
        try:
            pinned = checkpoint_files(url, checkpoint_id)
            churn(book, b"second")
            churn(book, b"third")
            assert pinned - {h.name for h in book._engine.ctx.board.ledger.handles()}
            assert pinned <= data_files(url), "GC deleted a file the reader's checkpoint names"
            seen = json.loads(ask(reader, "check").removeprefix("objects "))
            assert seen == {f"k{i:03d}": "first" for i in range(300)}
            assert ask(reader, "close") == "closed"
        finally:
            reader.kill()
            reader.wait(timeout=30)
        assert book.get("r", "k000") == b"third"

        def collected() -> bool:
            book.run_gc(min_age=0)
            return not (pinned - referenced_now(url)) & data_files(url)

        wait_until(collected, timeout=90.0)


def referenced_now(url: str) -> set[str]:
    latest = ManifestStore(open_store(url)).latest()
    assert latest is not None
    return {name for _, name in latest.manifest.referenced_objects()}


def test_a_dead_readers_checkpoint_expires_and_its_files_go(url: str) -> None:
    with inkpen.open(url, **SMALL) as book:
        churn(book, b"first")
        reader, checkpoint_id = start_reader(url, lifetime=8.0)
        pinned = checkpoint_files(url, checkpoint_id)
        reader.send_signal(signal.SIGKILL)
        reader.wait(timeout=30)
        churn(book, b"second")
        # Killed, so never released: the checkpoint lapses after its lifetime, GC drops it and
        # then the files only it named.
        orphaned = pinned - referenced_now(url)
        assert orphaned

        def collected() -> bool:
            book.run_gc(min_age=0)
            latest = ManifestStore(open_store(url)).latest()
            assert latest is not None
            return latest.manifest.checkpoint(checkpoint_id) is None and not (
                orphaned & data_files(url)
            )

        wait_until(collected, timeout=90.0)


def test_reader_on_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-db"
    with pytest.raises(inkpen.NotFoundError, match="does not exist"):
        inkpen.open_reader(str(missing))
    assert not missing.exists()
