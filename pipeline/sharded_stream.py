"""The change feed of a sharded data set as one Spark stream: every shard's feed, offsets per shard.

Each chosen shard is followed by its own :class:`~.stream.InkpenStreamReader` (the shard's
database, its own feed cursor), and this reader combines them. An offset holds one entry per
shard, each the single database's offset::

    {"shards": {"0": {"sqn": 120, "cursor": "spark-stream-..."}, "1": {...}, ...}}

so a micro-batch is, on every shard, the changes in ``(start, end]`` of that shard's SQNs, and a
query resumes from its checkpoint exactly where each shard stopped: exactly once per shard, as
:mod:`.stream` argues for one database. Each step calls the same step of every shard's reader
(``latestOffset`` passes the read limit to each, so ``max_rows_per_batch`` bounds each shard);
``partitions`` are each shard's, tagged with the shard, and rows carry a ``shard`` column.

Where a new query starts (``startingOffsets``): ``earliest``, ``latest``, or a JSON object of
shard number to ``earliest`` / ``latest`` / an SQN, e.g. ``{"0": 1500, "3": "latest"}``; shards
it leaves out start at the earliest. A restarted query whose offsets lack a shard it now reads
(the ``shard`` option changed) is refused: start it with a new checkpoint location.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from inkpen.errors import UsageError

from .sharded import SHARD_COLUMN, DataSet, tag_batches, with_shard_column
from .stream import (
    MAX_SQN,
    STARTING_HELP,
    InkpenStreamReader,
    SqnRange,
    Starting,
    StreamOptions,
    feed_schema,
)

SHARDED_STARTING_HELP = (
    "over a data set, option startingOffsets takes earliest, latest, or a JSON object of shard "
    'number to earliest, latest or an SQN (e.g. {"0": 1500, "3": "latest"}; shards it leaves '
    "out start at the earliest)"
)


def per_shard_starting(raw: str | None, data_set: DataSet) -> dict[int, Starting]:
    """Where each chosen shard of a new query starts (module docstring)."""
    if raw is None:
        return {}
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        word: Starting = "earliest" if text.lower() == "earliest" else "latest"
        return {shard: word for shard in data_set.chosen}
    try:
        given: Any = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict) or set(given) == {"sqn"}:
        raise UsageError(f"{SHARDED_STARTING_HELP}; got {raw!r}")
    starting: dict[int, Starting] = {}
    for name, where in given.items():
        shard = int(name) if str(name).isdigit() else -1
        if shard not in data_set.chosen:
            raise UsageError(
                f"option startingOffsets names shard {name!r}, which this stream does not read "
                f"(it reads shards {', '.join(map(str, data_set.chosen))})"
            )
        if where in ("earliest", "latest"):
            starting[shard] = "earliest" if where == "earliest" else "latest"
        elif isinstance(where, int) and not isinstance(where, bool) and 0 <= where < MAX_SQN:
            starting[shard] = where
        else:
            raise UsageError(f"{SHARDED_STARTING_HELP}; shard {name} has {where!r}")
    return starting


def refuse_shard_starting(raw: str | None) -> None:
    """A plain database's stream given a per-shard ``startingOffsets``: say what it takes."""
    if raw is not None and raw.strip().startswith("{"):
        try:
            given: Any = json.loads(raw)
        except ValueError:
            return
        if isinstance(given, dict) and set(given) != {"sqn"}:
            raise UsageError(
                f"a per-shard startingOffsets is for a sharded data set, and this path is one "
                f"database: {STARTING_HELP}"
            )


@dataclass(frozen=True)
class ShardSqnRange(InputPartition):
    """The changes of one shard with ``start < sqn <= end``."""

    shard: int
    start: int
    end: int
    history: int = 0


class ShardedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Every chosen shard's feed, one offset entry per shard (module docstring)."""

    def __init__(
        self, options: StreamOptions, data_set: DataSet, starting: Mapping[int, Starting]
    ) -> None:
        self.options = options
        self.data_set = data_set
        self.readers = {
            shard: InkpenStreamReader(
                replace(
                    options, url=data_set.url_of(shard), starting=starting.get(shard, "earliest")
                )
            )
            for shard in data_set.chosen
        }

    def _split(self, offset: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
        entries = offset.get("shards")
        if not isinstance(entries, dict):
            raise UsageError(
                f"this stream reads the data set {self.data_set.url}, and its checkpoint holds "
                f"an offset of one database ({offset!r}); start the query with a new "
                "checkpoint location"
            )
        missing = [shard for shard in self.readers if str(shard) not in entries]
        if missing:
            raise UsageError(
                f"the query's checkpointed offsets have no position for shard(s) "
                f"{', '.join(map(str, missing))} of {self.data_set.url} (did the shard option "
                "change?); start the query with a new checkpoint location"
            )
        return {shard: dict(entries[str(shard)]) for shard in self.readers}

    @staticmethod
    def _joined(entries: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
        return {"shards": {str(shard): dict(entries[shard]) for shard in sorted(entries)}}

    def initialOffset(self) -> dict[Any, Any]:
        return self._joined({s: r.initialOffset() for s, r in self.readers.items()})

    def prepareForTriggerAvailableNow(self) -> None:
        for reader in self.readers.values():
            reader.prepareForTriggerAvailableNow()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_rows_per_batch
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:
        starts = self._split(start)
        return self._joined({s: r.latestOffset(starts[s], limit) for s, r in self.readers.items()})

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        starts, ends = self._split(start), self._split(end)
        parts: list[InputPartition] = []
        for shard, reader in self.readers.items():
            for part in reader.partitions(starts[shard], ends[shard]):
                assert isinstance(part, SqnRange)
                parts.append(ShardSqnRange(shard, part.start, part.end, part.history))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardSqnRange)
        arrow = to_arrow_schema(with_shard_column(feed_schema(self.options)), timezone="UTC")
        field = arrow.field(SHARD_COLUMN)
        reader = self.readers[partition.shard]
        batches = reader.read(SqnRange(partition.start, partition.end, partition.history))
        return tag_batches(batches, partition.shard, field)

    def commit(self, end: dict[Any, Any]) -> None:
        ends = self._split(end)
        for shard, reader in self.readers.items():
            reader.commit(ends[shard])

    def stop(self) -> None:
        for reader in self.readers.values():
            reader.stop()
