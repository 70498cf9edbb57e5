"""Pausing Python's cyclic garbage collector for the work of one Spark task.

A load task makes a few tracked tuples per row (the put, its journal entry, its ledger entries)
and keeps them all until its files are written; a read task decodes SST blocks into tuples the
block cache keeps. None of them form reference cycles, so the cyclic collector frees nothing,
yet it runs every few hundred allocations and its older generations walk everything alive:
measured, a fifth of a load task's CPU time and of a read task's
(docs/spark.md, 'Tasks pause the cyclic collector').
Reference counting frees all of it either way. :func:`paused` switches the collector off for the
``with`` block and restores the state it found, so the cycles a task may still make (an
exception's traceback) are collected after it, by the next automatic collection.
:func:`paused_between` does it for each step of an iterator (a read task's batches): the
collector is off while the next batch is made and on while Spark takes it, so its state never
depends on when, or whether, Spark closes the iterator.

Only Spark's Python workers run these blocks: a task owns its worker process while it runs, so
pausing the collector there holds nobody else's memory.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (module docstring)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def paused_between(items: Iterator[T]) -> Iterator[T]:
    """``items``, each one made with the collector paused (module docstring)."""
    while True:
        with paused():
            try:
                item = next(items)
            except StopIteration:
                return
        yield item
