"""Ranged fetches over bytes in memory, for the format tests (readers take any fetch)."""

from __future__ import annotations

from inkpen.formats.fetching import Fetch


def memory_fetch(data: bytes) -> Fetch:
    """A fetch over ``data``: bound now, so a reader opened in a loop keeps its own bytes."""

    def fetch(start: int, end: int) -> bytes:
        return data[start:end]

    return fetch


class CountingFetch:
    """A fetch over bytes in memory that records every ranged read; a test may replace
    ``data`` (damage it) after a reader opened it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        return self.data[start:end]
