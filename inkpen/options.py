"""Options: every tunable of a Bookie, with its default and its valid range.

``inkpen.open(url, **options)`` builds an :class:`Options` from keyword arguments (or takes one
whole); every field is checked when the value is built, so a bad option fails at once with a
message saying what to change, before anything touches the store.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .checks import MAX_SECONDS, check_flag
from .errors import UsageError

if TYPE_CHECKING:
    from .manifest.merge_policy import MergePolicy

FlushPolicy = Literal["idle", "interval"]
HeadOnlyMode = Literal["with_lookup", "no_lookup"]
HEAD_ONLY_MODES = ("with_lookup", "no_lookup")
HEAD_ONLY_TRIM_INTERVAL = 60.0
"""Seconds between automatic journal trims of a head-only store without compaction_interval."""
ReloadStrategy = Literal["retain", "recovr"]
Compaction = Literal["internal", "external"]

KiB = 1024
MiB = 1024 * KiB

MAX_SEGMENTS_IN_FLIGHT = 32
"""The most journal segment writes a writer may keep in flight (option ``segments_in_flight``)."""

MAX_OPERATOR_NAME = 200
"""Longest merge operator name, in characters."""


class MergeOperator(Protocol):
    """A merge operator (``inkpen.open(url, merge_operators={"name": fn})``): folds operands
    onto a value.

    ``fn(key, existing, operands)`` gets the object key (bytes), the key's current value
    (``None`` when the key is absent, deleted or expired) and the operands to apply, oldest
    first (bytes each), and answers the new value: bytes, or a ``bytearray`` or ``memoryview``,
    which is copied into bytes as a put's value is (anything else refuses the write). It must
    be deterministic and must not call back into the Bookie: it runs in the writer, between the
    key's earlier and later changes. An exception it raises refuses that write (a
    ``UsageError`` naming it) and writes nothing.

    It is not given the bucket: each merge names its operator, so an application that folds
    differently per bucket registers a name per bucket (``functools.partial`` of one function,
    say) and merges with the one it needs.
    """

    def __call__(
        self, key: bytes, existing: bytes | None, operands: Sequence[bytes], /
    ) -> bytes | bytearray | memoryview: ...


RENAMED_OPTIONS = {
    "fold_bytes": "roll_bytes",
    "fold_segments": "roll_segments",
    "fold_on_close": "roll_on_close",
}
"""Old option names, still accepted with a ``DeprecationWarning``; "fold" now means reading."""


@dataclass(frozen=True, slots=True)
class Options:
    """The settings of one open Bookie. All sizes are bytes, all times seconds.

    Group commit (the Inker)
        ``flush_policy``: ``"idle"`` writes a journal segment as soon as the journal writer is
        idle, so concurrent puts share the segment that is written while they arrive;
        ``"interval"`` writes at most one segment per ``flush_interval``: a batch waits until
        ``flush_interval`` has passed since the previous segment write began (at once if it
        has), so a put waits at most ``flush_interval`` plus one write. Either way a batch is
        written at once when it reaches ``max_batch_bytes``: by default (None) 32 MiB on a local
        directory or in memory, so that several large values share one segment and one fsync
        (group commit by bytes), and 4 MiB on an object store, where a segment is one request.
        ``segments_in_flight``: how many segment writes may be in flight at once (1 to 32);
        batches keep being taken and written while earlier segments are on their way, and each
        put is acknowledged once its segment and every earlier one are durable, in SQN order.
        By default (None) 2 on a local directory or in memory (the next segment is encoded while
        the last is fsynced) and 8 on an object store, where a write is a round trip
        (docs/writes.md, 'Segments in flight').
        ``put_timeout``: the longest a put
        or delete waits for its segment to be acknowledged by the store; past it the call raises
        ``StoreError`` (``definite=False``: the write may still land, as the Inker goes on
        retrying). None (the default) waits as long as the store's own retries take (on S3,
        ``max_attempts`` tries of up to ``connect_timeout``/``read_timeout`` seconds each).

    Ledger (the Bookie and the Penciller)
        ``ledger_cache_entries``: ledger changes the Bookie gathers before pushing them to the
        Penciller. ``l0_cache_entries``: entries the Penciller keeps in memory before writing an
        L0 SST. ``max_l0_files``: once this many L0 SSTs wait to be merged, pushes are refused
        and writers are first slowed, then blocked (backpressure); 12, so that L0 absorbs about
        20 s of writes at 18,000 puts/s while a merge of L0 into L1 runs (half of it, 6, is
        when L0 asks to be merged first). ``sst_target_bytes``: merges
        split their output at about this size. ``l1_target_files`` and ``level_fanout``: level n
        holds about ``l1_target_files * level_fanout ** (n - 1)`` files before it merges down.
        ``merge_policy``: a :class:`~inkpen.manifest.merge_policy.MergePolicy` choosing the
        ledger's merges; None (the default) is Leveled's policy with the two sizes above (a
        policy given here brings its own sizes).
        ``compaction``: ``"internal"`` (the default) runs ledger merges, journal compaction and
        GC in this process; ``"external"`` runs none of them: a compactor process
        (``inkpen.open_compactor``, ``inkpen compactor URL``) does, and until one keeps up the
        writer's backpressure holds its puts once ``max_l0_files`` L0 files wait.

    Journal (the Inker and its clerk)
        ``roll_bytes`` / ``roll_segments``: unrolled segments are rolled into one journal file
        when their bytes or their count reach these; a segment of at least ``roll_link_bytes``
        (large values) is not rewritten but linked as a journal file of its own (a hard link,
        or a server-side copy on S3), so its bytes are written once.
        ``journal_file_target_bytes``: compaction
        splits its output at about this size. ``max_run_length``,
        ``single_file_compaction_pct``, ``max_run_compaction_pct``: Leveled's run-selection
        thresholds. ``reload_strategy``: per tag, ``"retain"`` keeps the key changes of replaced
        values so the ledger can always be rebuilt from the journal; ``"recovr"`` drops them.
        ``compaction_interval``: run journal compaction on this schedule (None: only on request).

    Snapshots, checkpoints and GC
        ``snapshot_timeout_short`` / ``snapshot_timeout_long``: how long a snapshot's registration
        holds files back if it is never closed. ``delete_poll_interval``: first wait of a file
        clerk in delete_pending before it asks its owner again (then doubling, up to 60 s).
        ``checkpoint_lifetime``: lifetime of a reader's own checkpoint (refreshed at half-life).
        ``gc_min_age``: GC never deletes an object younger than this, except the writer's own
        rolled segments no checkpoint pins (their writes are in a journal file; they go within
        10 s of a roll, and at close). ``gc_interval``: how often the writer runs GC when files
        were dropped.

    Compute
        ``compute_workers``: worker processes (shared by every Bookie of the process) that
        encode L0 files, merges and journal rolls, so that this work does not hold the
        interpreter lock the actors serving reads and writes need; 0 does it in the clerks'
        threads. Merges take at most ``compute_workers - 1`` workers at once (at least one), so
        with two or more an L0 build or a journal roll never waits behind a merge.
        ``malloc_mmap_threshold``: on glibc, allocations of this many bytes or more get their
        own mappings, returned to the system when freed (1 MiB by default; process-wide, the
        first open's value wins; 0 leaves the allocator alone). Without it, the buffers of
        rolls and merges leave holes in the C heap and resident memory grows with the data
        written. Values of a MiB or more then each get a fresh mapping on every read, whose
        pages are faulted in one by one: an application of large values gets more than twice
        the read bandwidth with 0 or a threshold above its value size
        (docs/performance.md, 'Large values').

    Head-only stores (Leveled's ``head_only``)
        ``head_only``: None (the default) for a normal store; ``"with_lookup"`` or
        ``"no_lookup"`` for a store of small values written in batches with ``Bookie.mput``,
        kept in the ledger alone, whose journal only serves recovery and is trimmed once the
        ledger has persisted it (every ``compaction_interval``, or every 60 s without one).
        ``with_lookup`` also answers ``head_only_get``. The mode is recorded when the database
        is created; opening it in another mode is refused.

    Damage
        ``allow_missing_segments``: open a database whose journal lacks a segment that must
        exist (an id below a later segment, or below the manifest's ``next_segment``). By
        default ``inkpen.open`` and ``inkpen.open_reader`` refuse such a database with a
        ``CorruptionError`` naming the missing segment, writing nothing: the writes it held
        are lost, and a key it updated would read as its older value. With True the
        operator opens what is left: a warning (``journal.segments_missing``) names the
        missing segments, every other segment is read, and a writer rolls the survivors at
        once and moves ``last_rolled_segment`` past the gap, so later opens need the option no
        more. The writes the missing segments held are gone: a key they updated reads as its
        previous value, or, when the ledger had already recorded the lost write, reading it
        raises ``CorruptionError``. Restore the missing objects from a backup first when there
        is one.

    Where values live
        ``inline_value_bytes``: a value of at most this many bytes (1 KiB by default; 0: none)
        is kept in the ledger beside its key as well as in the journal, so a GET reads one
        ledger block (or nothing, when the block is cached) and a key-order scan reads SSTs
        alone; larger values live in the journal only, where the ledger's SQN finds them. As
        Titan's and BlobDB's ``min_blob_size``: small values in the tree make their reads cheap,
        large ones out of it keep merges light. It applies to what is written from now on;
        entries written before keep their place, and every read finds a value either way.

    Caches and limits
        ``block_cache_bytes``: SST blocks (runs as stored; a block point lookups use again is
        kept decoded while there is room, weighed by its memory);
        ``journal_cache_bytes``: journal file chunks and blocks; ``journal_index_cache_bytes``:
        the journal files' SQN block indexes (16 bytes per ~4 KiB block of records, read whole
        when a file is opened; a lookup whose file's index was evicted reads it again, then its
        block), and pages of the hash tables of journal files written before format version 2
        (a lookup whose page is not cached reads that 1 KiB page; such a file held open costs
        about 4 bytes per 32 entries beyond it). Each bounds the memory it names whatever the
        amount of data.
        ``read_ahead_bytes``: a key-order fold (``objects``, ``keys``, ``heads``,
        ``index_query``; a Spark partition) reads its next SST blocks and files, and each
        window's journal reads, on a shared pool of threads while it decodes the current ones,
        with at most this many bytes read ahead and not yet used (8 MiB; 0: reads are made
        when the fold gets to them, one after another). On an object store, where each read
        is a round trip, this is what keeps a scan going at the speed it decodes.
        ``cache_dir``: a local directory (made if missing) where the parts of SST and journal
        files that reads fetch are kept on disk, checksummed, so that a restarted process (or
        another one sharing the directory) reads its hot blocks with no request;
        ``cache_dir_bytes`` bounds the files it holds (1 GiB), the least recently used going
        first. None (the default): no disk cache.
        ``max_key_bytes``, ``max_value_bytes``, ``max_indexes``: enforced on every call.

    Transactions (``Bookie.transaction``)
        ``transaction_max_keys``: the most keys one transaction may track: the keys it writes,
        plus under ``serializable`` the keys and the ranges it reads (10,000; a commit also
        holds at most 10,000 changes, as a batch does). ``transaction_max_bytes``: the most
        bytes of buckets, keys and values it may buffer (64 MiB, at most 256 MiB: a batch's
        limit). Past either, the call raises ``UsageError`` and the transaction stays as it was.
        ``transaction_window_keys``: the most ledger keys the writer's record of recent commits
        holds while transactions are open (about 100 bytes each); a transaction whose snapshot
        is older than what the record still holds conflicts at commit, as it can no longer be
        checked.

    Metrics
        ``metrics``: record every put, delete, batch, get and fold (counts, value bytes and a
        latency histogram each) and count the store's requests, for ``metrics()`` (True, the
        default). False makes that recording a no-op; ``metrics()`` still answers the state
        (files per level, the journal, backpressure, caches) and the owners' work.

    Merge operators
        ``merge_operators``: a mapping of names to :class:`MergeOperator` functions, which
        ``Bookie.merge(bucket, key, operand, operator=name)`` folds onto a key's value in the
        writer. The first merge with a name records it in the manifest; a database with a
        recorded name refuses to open for writing without an operator of that name.

    ``clock``: the wall clock in seconds (TTL expiry and last-modified times); tests inject one.
    """

    flush_policy: FlushPolicy = "idle"
    flush_interval: float = 0.010
    max_batch_bytes: int | None = None
    segments_in_flight: int | None = None
    put_timeout: float | None = None

    ledger_cache_entries: int = 2500
    l0_cache_entries: int = 28000
    max_l0_files: int = 12
    sst_target_bytes: int = 4 * MiB
    sst_block_bytes: int = 4 * KiB
    bloom_bits_per_key: int = 10
    l1_target_files: int = 4
    level_fanout: int = 8
    merge_policy: MergePolicy | None = None
    merge_poll_interval: float = 0.2
    compaction: Compaction = "internal"

    roll_bytes: int = 32 * MiB
    roll_segments: int = 256
    roll_on_close: bool = True
    roll_link_bytes: int = 256 * KiB
    journal_file_target_bytes: int = 64 * MiB
    max_run_length: int = 8
    single_file_compaction_pct: float = 30.0
    max_run_compaction_pct: float = 70.0
    compaction_sample_size: int = 192
    reload_strategy: Mapping[str, ReloadStrategy] = field(
        default_factory=lambda: MappingProxyType({"o": "retain", "h": "retain"})
    )
    compaction_interval: float | None = None

    snapshot_timeout_short: float = 900.0
    snapshot_timeout_long: float = 43200.0
    checkpoint_lifetime: float = 600.0
    gc_min_age: float = 300.0
    gc_interval: float = 600.0
    manifest_update_timeout: float = 60.0
    delete_poll_interval: float = 1.0

    compute_workers: int = 2
    malloc_mmap_threshold: int = 1 * MiB

    head_only: HeadOnlyMode | None = None

    allow_missing_segments: bool = False

    inline_value_bytes: int = 1 * KiB

    block_cache_bytes: int = 64 * MiB
    journal_cache_bytes: int = 64 * MiB
    journal_index_cache_bytes: int = 32 * MiB
    journal_chunk_bytes: int = 256 * KiB
    read_ahead_bytes: int = 8 * MiB
    cache_dir: str | None = None
    cache_dir_bytes: int = 1024 * MiB

    max_key_bytes: int = 64 * KiB
    max_value_bytes: int = 64 * MiB
    max_indexes: int = 1024

    transaction_max_keys: int = 10_000
    transaction_max_bytes: int = 64 * MiB
    transaction_window_keys: int = 1_000_000

    metrics: bool = True

    merge_operators: Mapping[str, MergeOperator] = field(
        default_factory=lambda: MappingProxyType({})
    )

    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        _check_choice("flush_policy", self.flush_policy, ("idle", "interval"))
        if self.head_only is not None:
            _check_choice("head_only", self.head_only, HEAD_ONLY_MODES)
        _check_choice("compaction", self.compaction, ("internal", "external"))
        for name in ("roll_on_close", "allow_missing_segments", "metrics"):
            check_flag(f"option {name}", getattr(self, name))
        for name in ("flush_interval", "merge_poll_interval"):
            _check_range(name, getattr(self, name), 0.0, 60.0)
        for name in (
            "snapshot_timeout_short",
            "snapshot_timeout_long",
            "checkpoint_lifetime",
            "gc_interval",
            "manifest_update_timeout",
            "delete_poll_interval",
        ):
            _check_range(name, getattr(self, name), 0.001, MAX_SECONDS)
        _check_range("gc_min_age", self.gc_min_age, 0.0, MAX_SECONDS)
        if self.put_timeout is not None:
            _check_range("put_timeout", self.put_timeout, 0.001, MAX_SECONDS)
        if self.compaction_interval is not None:
            _check_range("compaction_interval", self.compaction_interval, 0.01, 365 * 86400.0)
        if self.max_batch_bytes is not None:
            if not isinstance(self.max_batch_bytes, int) or isinstance(self.max_batch_bytes, bool):
                raise UsageError(
                    f"option max_batch_bytes must be an int or None, got {self.max_batch_bytes!r}"
                )
            _check_range("max_batch_bytes", self.max_batch_bytes, 1 * KiB, 1024 * MiB)
        if self.segments_in_flight is not None:
            if not isinstance(self.segments_in_flight, int) or isinstance(
                self.segments_in_flight, bool
            ):
                raise UsageError(
                    "option segments_in_flight must be an int or None, got "
                    f"{self.segments_in_flight!r}"
                )
            _check_range("segments_in_flight", self.segments_in_flight, 1, MAX_SEGMENTS_IN_FLIGHT)
        int_limits: dict[str, tuple[int, int]] = {
            "ledger_cache_entries": (1, 10_000_000),
            "l0_cache_entries": (1, 10_000_000),
            "max_l0_files": (1, 1000),
            "sst_target_bytes": (1 * KiB, 4096 * MiB),
            "sst_block_bytes": (64, 16 * MiB),
            "bloom_bits_per_key": (1, 64),
            "l1_target_files": (1, 10_000),
            "level_fanout": (2, 1000),
            "roll_bytes": (1, 16384 * MiB),
            "roll_segments": (1, 10_000_000),
            "roll_link_bytes": (1, 16384 * MiB),
            "journal_file_target_bytes": (1 * KiB, 16384 * MiB),
            "max_run_length": (1, 1000),
            "compaction_sample_size": (1, 1_000_000),
            "inline_value_bytes": (0, 64 * KiB),
            "block_cache_bytes": (0, 1 << 40),
            "journal_cache_bytes": (0, 1 << 40),
            "journal_index_cache_bytes": (0, 1 << 40),
            "journal_chunk_bytes": (4 * KiB, 64 * MiB),
            "read_ahead_bytes": (0, 1024 * MiB),
            "cache_dir_bytes": (1 * MiB, 1 << 50),
            "max_key_bytes": (1, 64 * KiB),
            "max_value_bytes": (0, 1024 * MiB),
            "max_indexes": (0, 1_000_000),
            "transaction_max_keys": (1, 1_000_000),
            "transaction_max_bytes": (1 * KiB, 256 * MiB),
            "transaction_window_keys": (1, 100_000_000),
            "compute_workers": (0, 64),
            "malloc_mmap_threshold": (0, 1024 * MiB),
        }
        for name, (lo, hi) in int_limits.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"option {name} must be an int, got {value!r}")
            _check_range(name, value, lo, hi)
        _check_range("single_file_compaction_pct", self.single_file_compaction_pct, 0.0, 100.0)
        _check_range("max_run_compaction_pct", self.max_run_compaction_pct, 0.0, 100.0)
        if self.single_file_compaction_pct > self.max_run_compaction_pct:
            raise UsageError(
                "option single_file_compaction_pct must not exceed max_run_compaction_pct "
                f"({self.single_file_compaction_pct} > {self.max_run_compaction_pct})"
            )
        if not isinstance(self.reload_strategy, Mapping):
            raise UsageError("option reload_strategy must map tags ('o', 'h') to a strategy")
        for tag, strategy in self.reload_strategy.items():
            if tag not in ("o", "h"):
                raise UsageError(f"option reload_strategy has unknown tag {tag!r}; use 'o' or 'h'")
            _check_choice(f"reload_strategy[{tag!r}]", strategy, ("retain", "recovr"))
        object.__setattr__(self, "reload_strategy", MappingProxyType(dict(self.reload_strategy)))
        # MergePolicy is a protocol of one method: checked by its shape, so that the options
        # (which every layer reads) import nothing of the layers above them.
        if self.merge_policy is not None and not callable(
            getattr(self.merge_policy, "choose", None)
        ):
            raise UsageError(
                "option merge_policy must be a MergePolicy (an object with a "
                f"choose(levels, *, turn) method) or None, got {self.merge_policy!r}"
            )
        object.__setattr__(self, "cache_dir", _check_directory("cache_dir", self.cache_dir))
        if not callable(self.clock):
            raise UsageError("option clock must be a callable returning seconds since the epoch")
        object.__setattr__(self, "merge_operators", _check_operators(self.merge_operators))

    @classmethod
    def build(cls, options: Options | None = None, **overrides: Any) -> Options:
        """An Options from an optional base plus keyword overrides; unknown names are refused."""
        known = {f.name for f in fields(cls)}
        for old in set(overrides) & RENAMED_OPTIONS.keys():
            new = RENAMED_OPTIONS[old]
            if new in overrides:
                raise UsageError(f"option {old} is the old name of {new}; give only {new}")
            warnings.warn(
                f"inkpen option {old} is now called {new}", DeprecationWarning, stacklevel=3
            )
            overrides[new] = overrides.pop(old)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise UsageError(
                f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(sorted(known))}"
            )
        base = options if options is not None else cls()
        if not isinstance(base, Options):
            raise UsageError(f"options must be an inkpen.Options, got {type(base).__name__}")
        if not overrides:
            return base
        values = {f.name: getattr(base, f.name) for f in fields(cls)}
        values.update(overrides)
        return cls(**values)

    def strategy_for(self, tag: str) -> ReloadStrategy:
        """The reload strategy of a tag ('o' objects, 'h' head-only objects)."""
        return self.reload_strategy.get(tag, "retain")


def check_operator_name(name: Any, what: str = "merge operator name") -> str:
    """A merge operator's name: non-empty text of at most ``MAX_OPERATOR_NAME`` characters,
    without NUL or lone surrogates."""
    if not isinstance(name, str):
        raise UsageError(f"{what} must be a str, got {type(name).__name__}")
    if not name or len(name) > MAX_OPERATOR_NAME:
        raise UsageError(
            f"{what} must be 1 to {MAX_OPERATOR_NAME} characters, got {len(name)} characters"
        )
    if "\x00" in name:
        raise UsageError(f"{what} {name!r} contains a NUL; choose a plain name")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} {name!r} is not valid Unicode text") from None
    return name


def _check_operators(operators: Any) -> Mapping[str, MergeOperator]:
    if not isinstance(operators, Mapping):
        raise UsageError(
            "option merge_operators must map names to functions fn(key, existing, operands) "
            f"-> bytes, got {type(operators).__name__}"
        )
    checked: dict[str, MergeOperator] = {}
    for name, operator in operators.items():
        check_operator_name(name, "option merge_operators: a name")
        if not callable(operator):
            raise UsageError(
                f"option merge_operators[{name!r}] must be a function fn(key, existing, "
                f"operands) -> bytes, got {type(operator).__name__}"
            )
        checked[name] = operator
    return MappingProxyType(checked)


def _check_directory(name: str, value: Any) -> str | None:
    """A directory option: None, or a path (``str`` or ``os.PathLike``) as a non-empty ``str``
    without NUL."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise UsageError(
            f"option {name} must be a directory path (str or os.PathLike) or None, got {value!r}"
        )
    if not value or "\x00" in value:
        raise UsageError(f"option {name}={value!r} is not a usable directory path")
    return value


def _check_range(name: str, value: Any, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"option {name} must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise UsageError(f"option {name}={value!r} is out of range; use a value in [{lo}, {hi}]")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"option {name}={value!r} is invalid; choose one of {', '.join(choices)}")
