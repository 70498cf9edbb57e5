"""A store whose journal segment writes wait at gates the test opens, one slot at a time.

:class:`SegmentGate` wraps a real store. A slot named with :meth:`SegmentGate.hold` keeps its
segment write waiting (``arrived`` is set once the write is there) until :meth:`release` names
what happens to it: ``"land"`` (the write goes through), ``"refuse"`` (a definite
:class:`StoreError`: nothing was written), ``"lose"`` (the write goes through and its answer is
lost: an indefinite error), or ``"vanish"`` (nothing is written and the answer is lost). While
:attr:`SegmentGate.blind` is set, every read of a segment slot fails (indefinite), so an outcome
cannot be read back. A slot in :attr:`SegmentGate.refusing` refuses every write (definitely)
after the held one. ``done`` is set once the write has ended. Every other request passes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal

from inkpen.errors import StoreError
from inkpen.manifest.paths import parse_segment_key
from inkpen.objectstore import ObjectInfo

Outcome = Literal["land", "refuse", "lose", "vanish"]
DEADLINE = 120.0


class _Slot:
    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.gate = threading.Event()
        self.done = threading.Event()
        self.outcome: Outcome = "land"


class SegmentGate:
    """See the module docstring."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        """Slots to hold, until their next write arrives."""
        self._held: dict[int, _Slot] = {}
        """Every slot held, by id (the test's handles on them)."""
        self.blind = False
        self.refusing: set[int] = set()
        """Slots whose every (unheld) write is refused, definitely."""
        self.written: list[int] = []
        """Slots whose segment reached the inner store, in order."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def hold(self, *slots: int) -> None:
        """Hold the next writes of these slots until released."""
        with self._lock:
            for slot in slots:
                self._slots[slot] = self._held[slot] = _Slot()

    def release(self, slot: int, outcome: Outcome = "land") -> None:
        held = self._held[slot]
        held.outcome = outcome
        held.gate.set()

    def wait_arrived(self, slot: int) -> None:
        assert self._held[slot].arrived.wait(DEADLINE), f"segment {slot} was never written"

    def wait_done(self, slot: int) -> None:
        assert self._held[slot].done.wait(DEADLINE), f"segment {slot}'s write never ended"

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        slot = parse_segment_key(key)
        with self._lock:
            held = self._slots.pop(slot, None) if slot is not None else None
        if held is None:
            if slot in self.refusing:
                raise StoreError(f"segment {slot} refused by the test", definite=True, key=key)
            self._inner.put_if_absent(key, data, metadata=metadata)
            if slot is not None:
                self.written.append(slot)
            return
        held.arrived.set()
        try:
            assert held.gate.wait(DEADLINE), f"segment {slot} was never released"
            if held.outcome in ("refuse", "vanish"):
                raise StoreError(
                    f"segment {slot} refused by the test",
                    definite=held.outcome == "refuse",
                    key=key,
                )
            self._inner.put_if_absent(key, data, metadata=metadata)
            assert slot is not None
            self.written.append(slot)
            if held.outcome == "lose":
                raise StoreError(f"answer for segment {slot} lost by the test", definite=False)
        finally:
            held.done.set()

    def _look(self, key: str) -> None:
        if self.blind and parse_segment_key(key) is not None:
            raise StoreError(f"read of {key} failed (the test)", definite=False, key=key)

    def head(self, key: str) -> ObjectInfo:
        self._look(key)
        info: ObjectInfo = self._inner.head(key)
        return info

    def get(self, key: str) -> bytes:
        self._look(key)
        data: bytes = self._inner.get(key)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._look(key)
        data: bytes = self._inner.get_range(key, start, end)
        return data
