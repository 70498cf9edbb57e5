"""The checks every public argument that is a number, a name or a duration goes through.

One module, so that every entry point (``Bookie`` methods, ``Reader``, ``Snapshot``, the
``inkpen.aio`` twins, the manifest-layer functions and the ``inkpen`` command's click types in
:mod:`inkpen.cli.params`) refuses the same values with the same :class:`UsageError`, before
anything is written. The bounds are what the formats can store:

- an SQN is an int in ``[0, MAX_SQN]``: the journal stores it as an unsigned 64-bit field and the
  manifest as a msgpack integer, and the Spark reader exposes it as a signed 64-bit ``LongType``
  column, so the largest SQN every one of them holds is ``2**63 - 1``;
- a duration is a finite number of seconds up to ``MAX_SECONDS`` (ten years);
- a count or limit is an int up to ``MAX_COUNT`` (``2**63 - 1``, the largest index a sequence can
  have);
- a name is a non-empty str of printable characters, at most ``MAX_NAME`` long.
"""

from __future__ import annotations

from typing import Any

from .errors import UsageError

MAX_SQN = 2**63 - 1
"""The largest SQN any format holds (the journal's u64, msgpack, Spark's int64 ``sqn``)."""
MAX_SECONDS = 10 * 365 * 86400.0
"""The longest duration any option or argument takes (ten years, in seconds)."""
MAX_COUNT = 2**63 - 1
"""The largest count or limit any argument takes."""
MAX_TIMESTAMP = float(1 << 53)
"""The latest time (seconds since the epoch) any argument takes: exact as a float."""
MAX_NAME = 256
"""The longest name (feed cursor, and the like) in characters."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sqn(name: str, value: Any) -> int:
    """An SQN argument: an int in ``[0, MAX_SQN]`` (not a bool, not a float)."""
    if not _is_int(value) or not 0 <= value <= MAX_SQN:
        raise UsageError(f"{name} must be an SQN (an int from 0 to {MAX_SQN}), got {value!r}")
    return int(value)


def check_count(name: str, value: Any, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """A count or limit: an int in ``[minimum, maximum]``."""
    if not _is_int(value) or not minimum <= value <= maximum:
        raise UsageError(f"{name} must be an int from {minimum} to {maximum}, got {value!r}")
    return int(value)


def check_seconds(
    name: str,
    value: Any,
    *,
    minimum: float = 0.0,
    above_minimum: bool = False,
    maximum: float = MAX_SECONDS,
) -> float:
    """A duration argument as a float: a real number (not a bool, not NaN or infinite, not an
    int too large for a float) in ``[minimum, maximum]`` (``(minimum, ...]`` with
    ``above_minimum``); anything else is a :class:`UsageError`."""
    if minimum == 0:
        what = "a positive number of seconds" if above_minimum else "a number of seconds >= 0"
    else:
        what = f"a number of seconds {'above' if above_minimum else 'at least'} {minimum:g}"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        # Comparisons first: they are exact for any int and false for NaN.
        or not (value > minimum if above_minimum else value >= minimum)
        or not value <= maximum
    ):
        raise UsageError(f"{name} must be {what} up to {maximum:.0f}, got {value!r}")
    return float(value)


def check_timestamp(name: str, value: Any) -> float:
    """A time argument: seconds since the epoch, a real number in ``[0, MAX_TIMESTAMP]``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_TIMESTAMP  # false for NaN
    ):
        raise UsageError(f"{name} must be seconds since the epoch (a number >= 0), got {value!r}")
    return float(value)


def check_flag(name: str, value: Any) -> bool:
    """A True/False argument; anything else (1, "yes", None) is a :class:`UsageError`."""
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, got {value!r}")
    return value


def check_text(name: str, value: Any, *, limit: int = 1024, optional: bool = False) -> str | None:
    """A name stored as UTF-8 (a checkpoint name, say): a str of at most ``limit`` characters
    with no NUL and no lone surrogate; None when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a str, got {type(value).__name__}")
    if len(value) > limit:
        raise UsageError(f"{name} is {len(value)} characters; the limit is {limit}")
    if "\x00" in value:
        raise UsageError(f"{name} must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{name} {value!r} is not valid Unicode text (a lone surrogate at {exc.start})"
        ) from None
    return value


def check_name(name: str, value: Any, *, limit: int = MAX_NAME) -> str:
    """A name an operator types and reads back (a feed cursor's, say): a non-empty str of at
    most ``limit`` printable characters (no control characters, no lone surrogates)."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > limit
        or not value.isprintable()  # also false for NUL and lone surrogates
    ):
        shown = value if not isinstance(value, str) or len(value) <= 80 else value[:80] + "..."
        raise UsageError(
            f"{name} must be a printable, non-empty str of at most {limit} characters, "
            f"got {shown!r}"
        )
    return value
