"""A close waits for no merge: a merge in flight when the writer closes is abandoned, its
outputs are dropped, L0 stays as the flush left it, and the next writer merges it."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

import inkpen
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, ObjectStore, open_store
from support.waiting import wait_until

DEADLINE = 120.0


class MergeReadGate(CountingStore):
    """Holds the ranged reads the Penciller's clerk makes (a merge's input runs) at a gate:
    ``entered`` is set when the first one arrives, which then waits for ``release``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if threading.current_thread().name.startswith("PencillerClerk"):
            self.entered.set()
            assert self.release.wait(DEADLINE), "the test never released the merge"
        return super().get_range(key, start, end)


def level_sizes(url: str) -> list[int]:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return [len(level) for level in latest.manifest.ledger.levels]
    finally:
        store.close()


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "compute-workers"])
def test_close_abandons_the_merge_in_flight_and_the_next_writer_merges(
    workers: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = str(tmp_path / "db")
    gate = MergeReadGate(open_store(url))
    model: dict[str, bytes] = {}
    book = inkpen.open(gate, max_l0_files=4, compute_workers=workers)
    for round_ in range(2):  # two L0 files: the clerk starts merging them into L1
        for i in range(200):
            key, value = f"k{i:04d}", f"{round_}-{i}".encode() * 20
            book.put("b", key, value)
            model[key] = value
        book.flush()
    assert gate.entered.wait(DEADLINE), "no merge started"
    engine = book._engine
    closing = threading.Thread(target=book.close)
    with caplog.at_level(logging.INFO, logger="inkpen.penciller"):
        closing.start()
        wait_until(lambda: engine.ctx.throttle.error is not None, timeout=DEADLINE)
        gate.release.set()  # the merge goes on, to find its writer halted
        closing.join(DEADLINE)
        assert not closing.is_alive()
    assert any(r.getMessage().find("ledger.merge_abandoned") >= 0 for r in caplog.records)
    assert level_sizes(url)[0] == 2  # the merge committed nothing: both L0 files remain
    with inkpen.open(url) as again:
        assert {k: again.get("b", k) for k in model} == model
        again.compact_ledger()
        assert {k: again.get("b", k) for k in model} == model
    assert level_sizes(url)[0] == 0
    gate.close()
