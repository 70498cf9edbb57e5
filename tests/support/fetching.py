"""A ranged fetch over bytes in memory, for the format tests (readers take any fetch)."""

from __future__ import annotations


class CountingFetch:
    """A fetch over bytes in memory that records every ranged read; a test may replace
    ``data`` (damage it) after a reader opened it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        return self.data[start:end]
