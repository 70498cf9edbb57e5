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


class PartsFetch(CountingFetch):
    """A :class:`CountingFetch` of a store whose ranged reads are cheap (``in_parts``: a reader
    reads a large record in parts), answering every read with bytes of its own and keeping them
    (``answers``), so that a test can tell a body returned as it was read from a copy."""

    in_parts = True

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.answers: list[bytes] = []

    def __call__(self, start: int, end: int) -> bytes:
        self.calls.append((start, end))
        answer = bytes(bytearray(self.data[start:end]))
        self.answers.append(answer)
        return answer

    def direct_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return [self(start, end) for start, end in ranges]
