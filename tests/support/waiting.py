"""Waiting in tests: poll the state a test waits for, with a deadline, never a bare sleep.

Every wait in the tests goes through here: :func:`wait_until` (fail at the deadline),
:func:`held_within` (report whether the state came by the deadline) and :func:`wait_until_async`
(inside an event loop). A condition may do work each time it is polled (run a compactor round,
write a key): the deadline bounds the work too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEFAULT_TIMEOUT = 60.0


def _awaited(condition: Callable[[], object], what: str) -> str:
    return what or getattr(condition, "__name__", repr(condition))


def wait_until(
    condition: Callable[[], object],
    what: str = "",
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.01,
    give_up: Callable[[], str | None] | None = None,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``condition`` until it holds (is truthy); fail after ``timeout`` seconds, naming
    ``what`` was awaited.

    ``give_up`` (optional) is asked after each miss: a message from it fails the wait at once
    (a child process that died, say). ``detail`` (optional) adds text to the failure message.
    """
    end = time.monotonic() + timeout
    while not condition():
        cause = give_up() if give_up is not None else None
        if cause is None and time.monotonic() > end:
            cause = f"timed out after {timeout:g} s"
        if cause is not None:
            extra = f"\n{detail()}" if detail is not None else ""
            raise AssertionError(f"{cause} waiting for {_awaited(condition, what)}{extra}")
        time.sleep(interval)


def held_within(condition: Callable[[], object], timeout: float, *, interval: float = 0.01) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; whether it held. For a test
    that asserts on the outcome itself, or reports what it found when the state never came."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(interval)
    return True


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
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {_awaited(condition, what)}"
            )
        await asyncio.sleep(interval)
