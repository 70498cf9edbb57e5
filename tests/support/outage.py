"""Writers that keep putting through a store outage, and what the outage tests check after it.

:class:`Load` runs threads that each put fresh keys (never one key twice) as fast as the Bookie
takes them. It keeps a model of every acknowledged put, every put refused definitely and every
put whose outcome is unknown, each with the time it ended, so a test can ask when the first put
was acknowledged after the store came back, and check afterwards that

- every acknowledged put reads back (from the live Bookie, and after a reopen),
- no put refused definitely is there,
- every failure was a :class:`~inkpen.errors.StoreError` (the writer was never stopped for good).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import inkpen
from inkpen.errors import StoreError
from support.waiting import wait_until

BUCKET = "outage"


@dataclass
class Failure:
    key: str
    at: float
    error: BaseException


@dataclass
class Load:
    """``threads`` writers putting values of ``value_bytes`` into ``book`` until stopped."""

    book: Any
    threads: int = 4
    value_bytes: int = 16 * 1024
    pause_after_failure: float = 0.02
    acknowledged: dict[str, bytes] = field(default_factory=dict)
    acknowledged_at: dict[str, float] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for n in range(self.threads):
            worker = threading.Thread(target=self._run, args=(n,), name=f"load-{n}", daemon=True)
            self._workers.append(worker)
            worker.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=120)
            assert not worker.is_alive(), "a writer thread did not end"

    def _run(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            key = f"w{n}-{i:06}"
            value = (f"{key}:".encode() * (self.value_bytes // 8 + 1))[: self.value_bytes]
            try:
                self.book.put(BUCKET, key, value)
            except Exception as exc:
                with self._lock:
                    self.failures.append(Failure(key, time.monotonic(), exc))
                self._stop.wait(self.pause_after_failure)
                continue
            with self._lock:
                self.acknowledged[key] = value
                self.acknowledged_at[key] = time.monotonic()

    # -- what the tests wait for --------------------------------------------------------------

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def failed_since(self, since: float) -> int:
        with self._lock:
            return sum(1 for failure in self.failures if failure.at >= since)

    def first_ack_since(self, since: float) -> float | None:
        """Seconds from ``since`` to the first put acknowledged at or after it (None: none yet)."""
        with self._lock:
            times = [at for at in self.acknowledged_at.values() if at >= since]
        return min(times) - since if times else None

    def wait(self, what: str, predicate: Any, timeout: float) -> None:
        """Poll ``predicate`` until it holds; fail after ``timeout`` seconds, with the latest
        failures, if it does not."""

        def latest() -> str:
            with self._lock:
                recent = [f"{f.key}: {f.error!r}" for f in self.failures[-3:]]
            return f"latest failures: {recent}"

        wait_until(predicate, what, timeout, interval=0.02, detail=latest)

    # -- what the tests check -----------------------------------------------------------------

    def definitely_failed(self) -> set[str]:
        return {
            f.key
            for f in self.failures
            if isinstance(f.error, StoreError) and f.error.definite is True
        }

    def check_errors(self) -> None:
        """Every failure was a StoreError: none said the writer had stopped for good."""
        wrong = [f for f in self.failures if not isinstance(f.error, StoreError)]
        assert not wrong, f"puts failed with other errors than StoreError: {wrong[:3]}"
        stopped = [f for f in self.failures if "reopen the Bookie" in str(f.error)]
        assert not stopped, f"the writer stopped for good: {stopped[0].error}"

    def check_reads(self, book: Any) -> None:
        """Every acknowledged put reads back from ``book``; no definitely failed one is there."""
        keys = sorted(self.acknowledged)
        found = dict(zip(keys, book.get_many(BUCKET, keys), strict=True)) if keys else {}
        missing = [key for key in keys if found[key] != self.acknowledged[key]]
        assert not missing, f"{len(missing)} acknowledged puts do not read back: {missing[:5]}"
        refused = sorted(self.definitely_failed())
        there = [
            key
            for key, value in zip(refused, book.get_many(BUCKET, refused), strict=True)
            if value is not None
        ]
        assert not there, f"puts that definitely failed are there: {there[:5]}"


def reopen_and_check(url: Any, load: Load, **options: Any) -> None:
    """Open the database again (a new writer) and check every acknowledged put is there."""
    with inkpen.open(url, **options) as again:
        load.check_reads(again)
