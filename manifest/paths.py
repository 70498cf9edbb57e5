"""Object keys of one database's layout, and the parsers that read them back.

Layout under a database root::

    manifest/<20-digit id>.manifest     one object per manifest version; ids start at 1
    journal/<20-digit id>.jnl           journal segments; ids start at 1 and are contiguous
    journal/compacted/<file-id>.jnl     compacted journal files
    ledger/<file-id>.sst                ledger SST files

Numeric ids are zero-padded to 20 digits so that key order is id order (a u64 fits). A
``<file-id>`` is 13 hex digits of milliseconds since the Unix epoch followed by 12 random hex
digits: names sort by creation time and two writers never pick the same one.
"""

from __future__ import annotations

import re
import secrets
import time

from inkpen.errors import UsageError

MANIFEST_PREFIX = "manifest/"
JOURNAL_PREFIX = "journal/"
JOURNAL_FILES_PREFIX = "journal/compacted/"
LEDGER_PREFIX = "ledger/"
LAYOUT_PREFIXES = (MANIFEST_PREFIX, JOURNAL_PREFIX, LEDGER_PREFIX)
"""Every object a database writes lives under one of these prefixes."""
DATA_SET_KEY = "inkpen-data-set.json"
"""The descriptor of a sharded data set (``inkpen.shards``), at the root of the data set: a root
holding it is a data set of databases (``shard-NNNN/``), not a database itself."""

MAX_ID = 10**20 - 1
_MANIFEST_KEY = re.compile(r"^manifest/(\d{20})\.manifest$")
_SEGMENT_KEY = re.compile(r"^journal/(\d{20})\.jnl$")
_FILE_ID = re.compile(r"^[0-9a-f]{25}$")
_JOURNAL_FILE_KEY = re.compile(r"^journal/compacted/([0-9a-f]{25})\.jnl$")
_SST_KEY = re.compile(r"^ledger/([0-9a-f]{25})\.sst$")


def _check_id(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ID:
        raise UsageError(f"{what} must be an int from 1 to {MAX_ID}, got {value!r}")
    return value


def _check_file_id(file_id: object) -> str:
    if not isinstance(file_id, str) or not _FILE_ID.match(file_id):
        raise UsageError(
            f"file id must be 25 lower-case hex digits (see new_file_id()), got {file_id!r}"
        )
    return file_id


def manifest_key(manifest_id: int) -> str:
    """``manifest/<20-digit id>.manifest``."""
    return f"{MANIFEST_PREFIX}{_check_id(manifest_id, 'manifest id'):020d}.manifest"


def segment_key(segment_id: int) -> str:
    """``journal/<20-digit id>.jnl``."""
    return f"{JOURNAL_PREFIX}{_check_id(segment_id, 'segment id'):020d}.jnl"


def journal_file_key(file_id: str) -> str:
    """``journal/compacted/<file-id>.jnl``."""
    return f"{JOURNAL_FILES_PREFIX}{_check_file_id(file_id)}.jnl"


def sst_key(file_id: str) -> str:
    """``ledger/<file-id>.sst``."""
    return f"{LEDGER_PREFIX}{_check_file_id(file_id)}.sst"


def new_file_id(now: float | None = None) -> str:
    """13 hex digits of milliseconds since the epoch, then 12 random hex digits."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"{ms:013x}{secrets.token_hex(6)}"


def file_id_time(file_id: str) -> float:
    """Seconds since the epoch at which a file id was made."""
    return int(_check_file_id(file_id)[:13], 16) / 1000.0


def parse_manifest_key(key: str) -> int | None:
    """The id of a manifest key, or None when ``key`` is not one."""
    match = _MANIFEST_KEY.match(key)
    return int(match.group(1)) if match else None


def parse_segment_key(key: str) -> int | None:
    """The id of a journal segment key, or None when ``key`` is not one."""
    match = _SEGMENT_KEY.match(key)
    return int(match.group(1)) if match else None


def is_journal_file_key(key: str) -> bool:
    """True for ``journal/compacted/<file-id>.jnl``."""
    return _JOURNAL_FILE_KEY.match(key) is not None


def is_sst_key(key: str) -> bool:
    """True for ``ledger/<file-id>.sst``."""
    return _SST_KEY.match(key) is not None
