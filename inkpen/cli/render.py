"""How the ``inkpen`` command shows values: sizes, times, keys, and JSON output.

Buckets, keys and index terms are bytes. They are shown as text when they are UTF-8 without
control characters, else as ``hex:`` followed by their hex digits; :func:`parse_text` reads both
forms back, so anything the command prints can be given to it again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any

import click

from inkpen.formats.keys import Tag, decode_key

HEX_PREFIX = "hex:"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_TAG_NAMES = {Tag.OBJECT: "object", Tag.HEAD: "head", Tag.INDEX: "index", Tag.REVERSE: "reverse"}


def size(count: int | float) -> str:
    """A byte count for people: ``512 B``, ``1.5 KiB``, ``3.2 MiB``."""
    value = float(count)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def timestamp(seconds: float | None) -> str:
    """Seconds since the epoch as a UTC time, or ``-``."""
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def span(seconds: float) -> str:
    """A duration for people: ``45s``, ``12m 5s``, ``3h 20m``, ``2d 4h``."""
    whole = int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def expiry(expire_time: float | None, now: float) -> str:
    """When something expires: ``never``, ``in 9m 58s`` or ``expired 3m 2s ago``."""
    if expire_time is None:
        return "never"
    if expire_time > now:
        return f"in {span(expire_time - now)}"
    return f"expired {span(now - expire_time)} ago"


def text(value: bytes) -> str:
    """``value`` as printable text, or ``hex:<digits>`` when it is not plain UTF-8."""
    try:
        decoded = value.decode("utf-8")
    except UnicodeDecodeError:
        return HEX_PREFIX + value.hex()
    if decoded.startswith(HEX_PREFIX) or any(not ch.isprintable() for ch in decoded):
        return HEX_PREFIX + value.hex()
    return decoded


def parse_text(given: str, what: str) -> bytes:
    """A command-line bucket, key or term: ``hex:<digits>`` or text (stored as UTF-8)."""
    if given.startswith(HEX_PREFIX):
        try:
            return bytes.fromhex(given[len(HEX_PREFIX) :])
        except ValueError:
            raise click.BadParameter(
                f"{given!r} starts with {HEX_PREFIX!r} but the rest is not hex digits",
                param_hint=what,
            ) from None
    return given.encode("utf-8")


def parse_name(given: str, what: str) -> bytes:
    """A bucket, key or index field: as :func:`parse_text`, then checked as every read and write
    checks one (not empty, at most 64 KiB), so a bad one is refused before anything opens."""
    from inkpen.actors.journal.changes import as_bytes
    from inkpen.formats.keys import MAX_KEY_BYTES

    return as_bytes(what, parse_text(given, what), MAX_KEY_BYTES)


def ledger_key(encoded: bytes) -> str:
    """An encoded ledger key as ``object users/alice`` or ``index users/email_bin=a@x -> alice``."""
    try:
        key = decode_key(encoded)
    except ValueError:
        return HEX_PREFIX + encoded.hex()
    name = _TAG_NAMES.get(key.tag, str(key.tag))
    if key.tag is Tag.INDEX:
        return (
            f"{name} {text(key.bucket)}/{text(key.key)}={text(key.subkey)}"
            f" -> {text(key.object_key)}"
        )
    if key.tag is Tag.REVERSE:
        return (
            f"{name} {text(key.bucket)}/{text(key.key)}"
            f" -> {text(key.subkey)}={text(key.object_key)}"
        )
    suffix = f"#{text(key.subkey)}" if key.subkey else ""
    return f"{name} {text(key.bucket)}/{text(key.key)}{suffix}"


def plain(value: Any) -> Any:
    """``value`` with bytes as hex strings and mappings, tuples and dataclasses as JSON types."""
    if isinstance(value, bytes):
        return value.hex()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (bytes as hex)."""
    click.echo(json.dumps(plain(value), indent=2, sort_keys=False))


def table(rows: list[list[str]], *, indent: int = 2) -> list[str]:
    """Rows of cells as lines of left-aligned columns."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    pad = " " * indent
    return [
        pad + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
