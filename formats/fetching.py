"""Ranged reads for the file readers: the ``fetch`` callable they take, and a checked wrapper.

Readers in :mod:`inkpen.formats` do no I/O of their own. They are handed a ``fetch(start, end)``
callable that returns the object's bytes ``[start, end)``; a store clips a range that runs past
the end of the object, so a short answer means the object is shorter than its own header or
footer says, which is corruption, not a reason to return partial data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from inkpen.errors import CorruptionError

Fetch = Callable[[int, int], bytes]
"""``fetch(start, end) -> bytes``: the object's bytes ``[start, end)``."""

Piece = tuple[int, int, int, int]
"""One read of a scan's plan: ``(start, end, first, end_run)``, the bytes ``[start, end)`` of
the file, which hold whole runs (or blocks) ``first`` to ``end_run`` exclusive of the reader
that planned it."""


class Prefetched(Protocol):
    """Reads a scan planned (:meth:`~inkpen.formats.sst.SstReader.scan_plan`) and another
    thread makes ahead of it: the reader takes each one when it gets there."""

    def take(self, owner: object, offset: int) -> tuple[Piece, bytes] | None:
        """The planned piece of ``owner`` (the reader that planned it) that holds byte
        ``offset``, with its bytes (waiting for them if they are still being read), or None
        when no piece planned ahead holds it (the reader then reads it itself). Pieces planned
        before it and not taken are dropped."""
        ...


def fetch_exact(fetch: Fetch, start: int, end: int, name: str) -> bytes:
    """Read bytes ``[start, end)`` through ``fetch``; raise :class:`CorruptionError` if short."""
    data = fetch(start, end)
    if len(data) != end - start:
        raise short_read(name, start, end, len(data))
    return data


def short_read(name: str, start: int, end: int, got: int) -> CorruptionError:
    """The error for a ranged read of ``[start, end)`` that returned only ``got`` bytes."""
    return CorruptionError(
        name,
        f"asked for bytes [{start}, {end}) but the object returned {got} bytes; "
        "it is shorter than its own layout says (truncated)",
        offset=start,
    )
