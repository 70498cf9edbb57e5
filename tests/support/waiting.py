"""Waiting in tests: poll the state a test waits for, with a deadline, never a bare sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEFAULT_TIMEOUT = 60.0


def wait_until(
    condition: Callable[[], object],
    what: str = "",
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.01,
) -> None:
    """Poll ``condition`` until it holds (is truthy); fail after ``timeout`` seconds, naming
    ``what`` was awaited."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            awaited = what or getattr(condition, "__name__", repr(condition))
            raise AssertionError(f"timed out after {timeout:g} s waiting for {awaited}")
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], object],
    what: str = "",
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.01,
) -> None:
    """:func:`wait_until` inside an event loop: polls between asyncio yields, never blocking the
    loop's thread, so the coroutines the condition waits for keep running."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            awaited = what or getattr(condition, "__name__", repr(condition))
            raise AssertionError(f"timed out after {timeout:g} s waiting for {awaited}")
        await asyncio.sleep(interval)
