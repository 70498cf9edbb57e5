"""The options of the ``inkpen`` Spark data source: their names, defaults, and checks.

Spark hands a data source its options as a case-insensitive map of strings. This module turns
that map into frozen values, once, on the driver, so that every mistake (a missing ``path``, a
misspelt option, a number that is not one) fails before any task runs, with a message that says
what to write instead. Unknown options are refused rather than ignored: a misspelt
``checkpoint`` would otherwise silently read the latest state.

Reading (``spark.read.format("inkpen")``):

- ``path`` (required): the database's store URL (a directory, ``file://`` or ``s3://``);
- ``checkpoint``: read at this existing checkpoint (its owner keeps it alive);
- ``checkpoint_lifetime`` (3600): seconds the checkpoint a read pins for itself lives;
- ``bucket``: only this bucket (UTF-8); ``start``, ``end``: only keys with start <= key <= end;
  ``prefix``: only keys that start with it (UTF-8; these three need ``bucket``). They are how a
  read is narrowed: Spark filters are evaluated by Spark over what the read yields (no pushdown,
  see :mod:`.source`);
- ``values`` (true): false reads heads only (``size`` instead of ``value``, no journal reads);
- ``indexes`` (false): true adds each object's live index entries;
- ``key_type`` (binary): ``string`` gives buckets, keys, fields and terms as UTF-8 strings;
- ``partitions``: how many partitions (Spark tasks) to split the read into; else by size,
  ``partition_bytes`` (32 MiB) each;
- ``batch_rows`` (8192): rows per Arrow batch a task hands to Spark;
- ``read_ahead_bytes`` (8 MiB): bytes a task reads ahead of its scan (0: none), as the option
  of that name does for a fold;
- ``cache_dir``, ``cache_dir_bytes`` (1 GiB): a local disk cache of the file parts tasks read,
  as the options of those names do (a directory on each executor's machine; tasks and
  executors on one machine share it);
- ``shard``: for a sharded data set (``path`` names one, :mod:`inkpen.shards`), read only these
  shards: a shard number or a comma-separated list of them (refused for a plain database);
- ``feed``: accepted and must be false (or left out); ``feed=true`` names the change feed, which
  is read with ``spark.readStream`` (:mod:`.stream`, whose own options, :data:`FEED_OPTIONS`, a
  read refuses the same way).

Streaming (``spark.readStream.format("inkpen")``, :mod:`.stream`), besides ``path``,
``key_type``, ``values``, ``batch_rows`` and ``feed``:

- ``startingOffsets`` (earliest): where a new query starts: ``earliest`` (every change),
  ``latest`` (changes written after it starts) or an SQN N (changes above N; ``{"sqn": N}``
  too); ``starting_sqn=N`` is the older spelling. A restarted query resumes from its checkpoint;
- ``cursor``: the feed cursor's name (default: the query's own, ``spark-stream-<hex>``, named in
  its offsets);
- ``cursor_lifetime`` (259200, 3 days): seconds the cursor lives after its last renewal;
- ``max_rows_per_batch``: at most this many SQNs per micro-batch;
- ``rows_per_partition`` (250000): SQNs per Spark task;
- ``refresh_interval`` (1): seconds between the following Reader's refreshes;
- ``shard``: as for a read, over a data set only.

Over a data set, ``startingOffsets`` also takes a JSON object of shard number to ``earliest``,
``latest`` or an SQN (shards it leaves out start at the earliest), and ``max_rows_per_batch``
bounds each shard's SQNs per micro-batch.

Bulk loading (``df.write.format("inkpen").mode("append")``):

- ``path`` (required): the database's store URL; an empty root gets a new database;
- ``sst_bytes`` (32 MiB): a task starts a new SST when one reaches about this size;
- ``journal_bytes`` (64 MiB): a task starts a new journal file at about this size;
- ``load_id``: the load's name, recorded by its commit (per shard, for a data set): a retried job
  with the same ``load_id`` commits nothing that already committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from inkpen.errors import UsageError

KeyType = Literal["binary", "string"]

MiB = 1024 * 1024
DEFAULT_CHECKPOINT_LIFETIME = 3600.0
DEFAULT_PARTITION_BYTES = 32 * MiB
DEFAULT_BATCH_ROWS = 8192
DEFAULT_READ_AHEAD_BYTES = 8 * MiB
DEFAULT_CACHE_DIR_BYTES = 1024 * MiB
DEFAULT_SST_BYTES = 32 * MiB
DEFAULT_JOURNAL_BYTES = 64 * MiB
MAX_PARTITIONS = 100_000

READ_OPTIONS = frozenset(
    {
        "path",
        "checkpoint",
        "checkpoint_lifetime",
        "bucket",
        "start",
        "end",
        "prefix",
        "values",
        "indexes",
        "key_type",
        "partitions",
        "partition_bytes",
        "batch_rows",
        "read_ahead_bytes",
        "cache_dir",
        "cache_dir_bytes",
        "feed",
        "shard",
    }
)
FEED_OPTIONS = frozenset(
    {
        "cursor",
        "cursor_lifetime",
        "startingoffsets",
        "starting_sqn",
        "max_rows_per_batch",
        "rows_per_partition",
        "refresh_interval",
    }
)
"""The options only a stream (:mod:`.stream`) takes: given any, ``spark.read`` refuses the read."""
LOAD_OPTIONS = frozenset({"path", "sst_bytes", "journal_bytes", "load_id"})
MAX_LOAD_ID_CHARS = 200

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a read asked for (see the module docstring for each option)."""

    url: str
    checkpoint: str | None = None
    checkpoint_lifetime: float = DEFAULT_CHECKPOINT_LIFETIME
    bucket: bytes | None = None
    start: bytes | None = None
    end: bytes | None = None
    prefix: bytes | None = None
    values: bool = True
    indexes: bool = False
    key_type: KeyType = "binary"
    partitions: int | None = None
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    batch_rows: int = DEFAULT_BATCH_ROWS
    shards: tuple[int, ...] | None = None
    """The ``shard`` option: only these shards of a data set (None: every shard)."""
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES
    cache_dir: str | None = None
    cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """What a bulk load asked for (see the module docstring for each option)."""

    url: str
    sst_bytes: int = DEFAULT_SST_BYTES
    journal_bytes: int = DEFAULT_JOURNAL_BYTES
    load_id: str | None = None


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(name).lower(): value for name, value in options.items()}


def _refuse_unknown(given: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        raise UsageError(
            f"unknown option(s) {', '.join(unknown)} for an inkpen {what}; the options are: "
            f"{', '.join(sorted(known))}"
        )


def _url(given: Mapping[str, str], what: str) -> str:
    url = given.get("path")
    if url is None or not str(url).strip():
        raise UsageError(
            f'an inkpen {what} needs the database\'s URL: .option("path", url) with a '
            "directory, file:// or s3:// URL"
        )
    return str(url).strip()


def _bool(given: Mapping[str, str], name: str, default: bool) -> bool:
    raw = given.get(name)
    if raw is None:
        return default
    word = str(raw).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise UsageError(f"option {name} must be true or false, got {raw!r}")


def _int(given: Mapping[str, str], name: str, default: int | None, lo: int, hi: int) -> int | None:
    raw = given.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise UsageError(f"option {name} must be a whole number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise UsageError(f"option {name}={value} is out of range; use a value in [{lo}, {hi}]")
    return value


def _seconds(given: Mapping[str, str], name: str, default: float) -> float:
    raw = given.get(name)
    if raw is None:
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise UsageError(f"option {name} must be a number of seconds, got {raw!r}") from None
    if not 1.0 <= value <= 10 * 365 * 86400.0:
        raise UsageError(f"option {name}={raw} is out of range; use 1 to 315360000 seconds")
    return value


def _name(given: Mapping[str, str], name: str) -> bytes | None:
    raw = given.get(name)
    if raw is None:
        return None
    encoded = str(raw).encode("utf-8")
    if name == "bucket" and not encoded:
        raise UsageError("option bucket must not be empty; leave it out to read every bucket")
    return encoded


def parse_shards(given: Mapping[str, str]) -> tuple[int, ...] | None:
    """The ``shard`` option: shard numbers, sorted and distinct (checked against the data set's
    shard count when it is known: :func:`inkpen.pipeline.sharded.chosen_shards`)."""
    raw = given.get("shard")
    if raw is None:
        return None
    numbers: set[int] = set()
    for part in str(raw).split(","):
        try:
            number = int(part.strip())
        except ValueError:
            raise UsageError(
                f"option shard takes a shard number or a comma-separated list of them "
                f"(e.g. 0,3), got {raw!r}"
            ) from None
        if number < 0:
            raise UsageError(f"option shard: shard numbers are 0 or more, got {number}")
        numbers.add(number)
    return tuple(sorted(numbers))


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a read's options; raise :class:`UsageError` naming the first one that is wrong."""
    given = _lowered(options)
    for_streams = sorted(set(given) & FEED_OPTIONS)
    if for_streams:
        raise UsageError(
            f"option(s) {', '.join(for_streams)} are for the change feed, which is read with "
            "spark.readStream; a spark.read reads one checkpoint and takes: "
            f"{', '.join(sorted(READ_OPTIONS))}"
        )
    _refuse_unknown(given, READ_OPTIONS, "read")
    _bool(given, "feed", False)  # true is refused when the read is planned, naming readStream
    key_type = str(given.get("key_type", "binary")).strip().lower()
    if key_type not in ("binary", "string"):
        raise UsageError(f"option key_type must be binary or string, got {key_type!r}")
    checkpoint = given.get("checkpoint")
    if checkpoint is not None and not str(checkpoint).strip():
        raise UsageError("option checkpoint must be a checkpoint id; leave it out to pin one")
    bucket = _name(given, "bucket")
    start, end, prefix = _name(given, "start"), _name(given, "end"), _name(given, "prefix")
    if bucket is None and (start is not None or end is not None or prefix is not None):
        raise UsageError(
            "options start, end and prefix need option bucket: key ranges are per bucket"
        )
    partitions = _int(given, "partitions", None, 1, MAX_PARTITIONS)
    partition_bytes = _int(given, "partition_bytes", DEFAULT_PARTITION_BYTES, 64 * 1024, 1 << 40)
    batch_rows = _int(given, "batch_rows", DEFAULT_BATCH_ROWS, 1, 1_000_000)
    read_ahead = _int(given, "read_ahead_bytes", DEFAULT_READ_AHEAD_BYTES, 0, 1024 * MiB)
    cache_dir_bytes = _int(given, "cache_dir_bytes", DEFAULT_CACHE_DIR_BYTES, MiB, 1 << 50)
    assert partition_bytes is not None and batch_rows is not None
    assert read_ahead is not None and cache_dir_bytes is not None
    cache_dir = given.get("cache_dir")
    if cache_dir is not None and (not str(cache_dir).strip() or "\x00" in str(cache_dir)):
        raise UsageError(
            "option cache_dir must be a directory path on the executors' machines; leave it "
            "out for no disk cache"
        )
    return ReadOptions(
        url=_url(given, "read"),
        checkpoint=None if checkpoint is None else str(checkpoint).strip(),
        checkpoint_lifetime=_seconds(given, "checkpoint_lifetime", DEFAULT_CHECKPOINT_LIFETIME),
        bucket=bucket,
        start=start,
        end=end,
        prefix=prefix,
        values=_bool(given, "values", True),
        indexes=_bool(given, "indexes", False),
        key_type="string" if key_type == "string" else "binary",
        partitions=partitions,
        partition_bytes=partition_bytes,
        batch_rows=batch_rows,
        shards=parse_shards(given),
        read_ahead_bytes=read_ahead,
        cache_dir=None if cache_dir is None else str(cache_dir).strip(),
        cache_dir_bytes=cache_dir_bytes,
    )


def parse_load_options(options: Mapping[str, str]) -> LoadOptions:
    """Check a bulk load's options; raise :class:`UsageError` naming the first one that is wrong."""
    given = _lowered(options)
    _refuse_unknown(given, LOAD_OPTIONS, "bulk load")
    sst_bytes = _int(given, "sst_bytes", DEFAULT_SST_BYTES, 64 * 1024, 4096 * MiB)
    journal_bytes = _int(given, "journal_bytes", DEFAULT_JOURNAL_BYTES, 64 * 1024, 16384 * MiB)
    assert sst_bytes is not None and journal_bytes is not None
    load_id = given.get("load_id")
    if load_id is not None:
        load_id = str(load_id).strip()
        if not load_id or len(load_id) > MAX_LOAD_ID_CHARS or not load_id.isprintable():
            raise UsageError(
                f"option load_id must be 1 to {MAX_LOAD_ID_CHARS} printable characters (e.g. "
                f"the job's name and date), got {given.get('load_id')!r}"
            )
    return LoadOptions(
        url=_url(given, "bulk load"),
        sst_bytes=sst_bytes,
        journal_bytes=journal_bytes,
        load_id=load_id,
    )
