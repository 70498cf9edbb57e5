"""Large allocations go straight back to the operating system: glibc's mmap threshold, fixed.

A writer's large buffers are short-lived: a segment's bytes, a roll's entries on their way to a
compute worker, a merge's input runs and output SSTs, a journal file's index on open. glibc
serves an allocation at or above its *mmap threshold* with its own mapping, unmapped when freed,
and everything smaller from its heaps (arenas), which keep freed memory for reuse. By default
the threshold starts at 128 KiB and rises to the size of each mapped block freed, up to 32 MiB,
so after the first few rolls and merges every later buffer of that size lands in an arena. With
hundreds of client threads spread over many arenas, the freed buffers leave holes that are
never handed back, and the process's resident memory grows with the data written although the
objects that Python keeps alive do not (docs/performance.md, 'Large values'; a 1,000,000-put
load peaked at 272 MB resident with the rising threshold and 197 MB with it fixed at 1 MiB;
tracemalloc saw 30 MB of live Python objects).

:func:`limit_heap_growth` fixes the threshold (option ``malloc_mmap_threshold``; 0 leaves the
allocator alone). Fixing it also stops the rise, which is the point. It is process-wide: the
first Bookie opened with a non-zero value sets it, and compute workers are started with the
same setting through glibc's ``MALLOC_MMAP_THRESHOLD_`` variable in their environment only
(:func:`worker_environment`; the application's own environment is left as it is). On a C
library other than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable

from inkpen.logs import get_logger

log = get_logger("inkpen.heap")

_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold."""

ENV_VARIABLE = "MALLOC_MMAP_THRESHOLD_"
"""The variable glibc reads at start-up for the same setting (compute workers get it)."""

_lock = threading.Lock()
_applied: int | None = None


def limit_heap_growth(threshold: int) -> bool:
    """Serve allocations of ``threshold`` bytes or more by their own mappings, from now on,
    in this process and in compute workers started later; True if the C library took it.

    0 changes nothing. The first non-zero threshold applied wins; later calls with another
    value are ignored (one process, one allocator).
    """
    global _applied
    if threshold <= 0:
        return False
    with _lock:
        if _applied is not None:
            return _applied == threshold
        mallopt = _mallopt()
        if mallopt is None or not mallopt(_M_MMAP_THRESHOLD, threshold):
            log.debug("heap.mmap_threshold_unavailable", threshold=threshold)
            _applied = 0
            return False
        _applied = threshold
        log.debug("heap.mmap_threshold_set", threshold=threshold)
        return True


def worker_environment() -> dict[str, str]:
    """What a compute worker's environment adds so that it runs with this process's setting
    (nothing when none was applied, or when the environment already says)."""
    if not _applied or ENV_VARIABLE in os.environ:
        return {}
    return {ENV_VARIABLE: str(_applied)}


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None on a C library without one."""
    name = ctypes.util.find_library("c")
    if name is None or "libc.so" not in name:
        return None
    try:
        function = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int
    return function
