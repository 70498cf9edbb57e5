"""Spark over a sharded data set: finding one, its ``shard`` column, and the read of every shard.

When the ``path`` option names a data set (:func:`inkpen.shards.is_data_set`) rather than one
database, the source works shard by shard, each shard being an ordinary inkpen database at
:func:`inkpen.shards.shard_url`:

- a **read** pins one checkpoint per shard when the DataFrame is loaded (each as
  :mod:`.pinning` pins one database's, in parallel), plans each shard's slices from its own
  pinned manifest (:mod:`.plan`), packs slices of small shards together into partitions of
  about ``partition_bytes`` (:class:`ShardedReader`), and tags every row with its ``shard``
  (int, not null, the last column). The checkpoints are released as a single database's are:
  they expire;
- a **bulk load** routes rows by :func:`inkpen.shards.shard_of` (:mod:`.sharded_load`);
- a **stream** follows every shard's feed with one offset per shard (:mod:`.sharded_stream`).

The option ``shard`` narrows any of them to some shards; a number past the data set's last shard,
or the option on a plain database, is a :class:`~inkpen.errors.UsageError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from inkpen.errors import UsageError
from inkpen.objectstore import open_store
from inkpen.shards import is_data_set, read_descriptor, shard_url

from . import gc_pause
from .options import MAX_PARTITIONS, ReadOptions
from .pinning import PinnedRead, pin_for_read, pinned_manifest
from .plan import ScanSlice, plan_slices
from .ranges import Scope
from .scan import ScanSpec, scan_slice
from .schema import read_schema
from .splits import estimated_bytes

SHARD_COLUMN = "shard"
_WORKERS = 8

_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class DataSet:
    """The data set a job works on: its root, shard count and the shards the job takes."""

    url: str
    shards: int
    chosen: tuple[int, ...]

    def url_of(self, shard: int) -> str:
        return shard_url(self.url, shard)


def data_set_of(url: str, chosen: tuple[int, ...] | None) -> DataSet | None:
    """The data set at ``url`` (None for anything else), narrowed to the ``shard`` option."""
    if not is_data_set(url):
        if chosen is not None:
            raise UsageError(
                f"option shard is for a sharded data set, and {url} is not one (a plain "
                "database has no shards): leave the option out"
            )
        return None
    count = read_descriptor(url).shards
    outside = [number for number in chosen or () if number >= count]
    if outside:
        raise UsageError(
            f"option shard names shard(s) {', '.join(map(str, outside))}, but the data set at "
            f"{url} has {count} shards, numbered 0 to {count - 1}"
        )
    return DataSet(url, count, chosen if chosen else tuple(range(count)))


def per_shard(function: Callable[[int], _R], shards: Sequence[int]) -> list[_R]:
    """``function(shard)`` for every shard, run on up to eight threads, in shard order; the
    first error is raised once all have finished."""
    if len(shards) <= 1:
        return [function(shard) for shard in shards]
    with ThreadPoolExecutor(min(_WORKERS, len(shards)), thread_name_prefix="inkpen-shard") as pool:
        futures = [pool.submit(function, shard) for shard in shards]
    return [future.result() for future in futures]


def with_shard_column(schema: StructType) -> StructType:
    """``schema`` with the ``shard`` column (int, not null) after its own columns."""
    return StructType([*schema.fields, StructField(SHARD_COLUMN, IntegerType(), False)])


def tag_batches(
    batches: Iterator[pa.RecordBatch], shard: int, field: pa.Field
) -> Iterator[pa.RecordBatch]:
    """Each batch with the ``shard`` column appended, holding ``shard`` in every row."""
    value = pa.scalar(shard, type=field.type)
    for batch in batches:
        column = pa.repeat(value, batch.num_rows)
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, column], schema=batch.schema.append(field)
        )


# -- the read ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardPin:
    """One shard of a read: its options (``url`` is the shard's) and its pinned checkpoint."""

    shard: int
    options: ReadOptions
    pinned: PinnedRead


def check_data_set_read(options: ReadOptions, data_set: DataSet) -> None:
    if options.checkpoint is not None:
        raise UsageError(
            f"option checkpoint names one database's checkpoint, and {data_set.url} is a data "
            f"set of {data_set.shards} shards: leave it out (a data set read pins a checkpoint "
            "on every shard itself)"
        )


def pin_shards(options: ReadOptions, data_set: DataSet) -> tuple[ShardPin, ...]:
    """Step 1 of :mod:`.pinning`, on every chosen shard: one checkpoint each."""
    check_data_set_read(options, data_set)

    def pin(shard: int) -> ShardPin:
        shard_options = replace(options, url=data_set.url_of(shard), shards=None)
        return ShardPin(shard, shard_options, pin_for_read(shard_options))

    return tuple(per_shard(pin, data_set.chosen))


@dataclass(frozen=True)
class ShardSlices(InputPartition):
    """One partition of a data set read: slices of one or more shards, each read at its shard's
    pinned checkpoint, one after the other."""

    parts: tuple[tuple[int, ScanSlice], ...]


def pack(weights: Sequence[float], bins: int) -> list[list[int]]:
    """The indexes of ``weights``, in order, cut into at most ``bins`` runs of about equal
    weight: each item goes to the run its midpoint falls in."""
    total = sum(weights)
    if bins >= len(weights) or not total:
        return [[i] for i in range(len(weights))] if total else [list(range(len(weights)))]
    target = total / bins
    runs: dict[int, list[int]] = {}
    at = 0.0
    for index, weight in enumerate(weights):
        runs.setdefault(min(bins - 1, int((at + weight / 2) / target)), []).append(index)
        at += weight
    return list(runs.values())


class ShardedReader(DataSourceReader):
    """Reads every chosen shard at its own pinned checkpoint.

    Each shard is planned from its own pinned manifest (:mod:`.plan`). With the ``partitions``
    option every shard gets that many partitions. Without it the data set is cut by size as one
    database is: each shard's slices weigh its estimated bytes, and consecutive slices are
    packed into ``ceil(total / partition_bytes)`` partitions, so shards smaller than a partition
    share one (and a data set costs no more Spark tasks than one database of its size).
    """

    def __init__(self, options: ReadOptions, pins: tuple[ShardPin, ...]) -> None:
        self.options = options
        self.pins = pins
        self.scope = Scope.of(options)

    def partitions(self) -> Sequence[InputPartition]:
        ranges = self.scope.ranges()

        def plan(index: int) -> tuple[list[ScanSlice], float]:
            pin = self.pins[index]
            store = open_store(pin.options.url)
            try:
                manifest = pinned_manifest(store, pin.pinned)
            finally:
                store.close()
            slices = plan_slices(manifest, pin.pinned.manifest_id, ranges, pin.options)
            estimate = estimated_bytes(
                ranges,
                list(manifest.ledger.ssts()),
                journal_bytes=sum(f.size for f in manifest.journal.files),
                values=self.options.values,
            )
            return slices, estimate

        planned = per_shard(plan, range(len(self.pins)))
        parts = [
            (self.pins[index].shard, slice_)
            for index, (slices, _) in enumerate(planned)
            for slice_ in slices
        ]
        if self.options.partitions is not None:
            return [ShardSlices((part,)) for part in parts]
        weights = [estimate / len(slices) for slices, estimate in planned for _ in slices]
        wanted = max(1, min(MAX_PARTITIONS, math.ceil(sum(weights) / self.options.partition_bytes)))
        return [ShardSlices(tuple(parts[i] for i in run)) for run in pack(weights, wanted)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardSlices)
        arrow = to_arrow_schema(with_shard_column(read_schema(self.options)), timezone="UTC")
        shard_field = arrow.field(SHARD_COLUMN)
        base = arrow.remove(arrow.get_field_index(SHARD_COLUMN))
        return gc_pause.paused_between(self._read(partition, base, shard_field))

    def _read(
        self, partition: ShardSlices, base: pa.Schema, shard_field: pa.Field
    ) -> Iterator[pa.RecordBatch]:
        for shard, slice_ in partition.parts:
            pin = next(p for p in self.pins if p.shard == shard)
            spec = ScanSpec(
                url=pin.options.url,
                checkpoint_id=pin.pinned.checkpoint_id,
                values=self.options.values,
                indexes=self.options.indexes,
                key_type=self.options.key_type,
                batch_rows=self.options.batch_rows,
                now_ms=pin.pinned.now_ms,
                read_ahead_bytes=self.options.read_ahead_bytes,
                cache_dir=self.options.cache_dir,
                cache_dir_bytes=self.options.cache_dir_bytes,
            )
            yield from tag_batches(scan_slice(spec, slice_, base), shard, shard_field)
