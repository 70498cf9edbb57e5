"""A bulk load into a sharded data set: rows routed to shards, one atomic commit per shard.

Protocol (each step as for one database, :mod:`.commit`, applied to every shard):

1. **Prepare, on the driver.** Every shard's database is opened (:func:`.target.prepare_load`);
   the DataFrame's columns are checked once.
2. **Route and write, in each task.** A task makes each of its rows a checked put, as one
   database's load does (a bad row refuses the load by its number), computes its shard from the
   put's bucket and key bytes (:func:`inkpen.shards.shard_of`), keeps each shard's puts in input
   order (so the later row of a key still wins) and writes them as that shard's files
   (:func:`.load_task.write_changes`; files nobody references yet). It reports ``{shard:
   LoadedPartition}``.
3. **Commit, on the driver, per shard.** Every shard that received rows gets one
   :func:`.commit.commit_load` of the partitions that wrote to it, on up to eight threads. Each
   is atomic for its shard; the shards together are not (there is no cross-database CAS). With
   the ``load_id`` option each shard's commit records the id in that shard's manifest, so a
   job retried after some shards committed (a driver killed mid-commit, a shard's commit that
   failed) commits only the shards that had not: the others find the id and are skipped.
   When some shard fails, the error names the shards that committed and those that did not, and
   says to retry with the same ``load_id``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from inkpen.actors.journal.changes import PendingChange
from inkpen.errors import InkpenError, UsageError
from inkpen.logs import get_logger
from inkpen.options import Options
from inkpen.shards import shards_of

from .commit import LoadReport, commit_load
from .load_task import LoadedPartition, check_puts, write_changes
from .options import LoadOptions
from .schema import LoadColumns
from .sharded import DataSet, per_shard
from .target import LoadTarget, prepare_load

log = get_logger("inkpen.pipeline")


@dataclass(frozen=True, slots=True)
class ShardedTarget:
    """Where the tasks of one load into a data set write: one :class:`LoadTarget` per shard."""

    url: str
    shards: int
    targets: tuple[LoadTarget, ...]
    load_id: str | None


def prepare_sharded_load(
    options: LoadOptions, columns: LoadColumns, data_set: DataSet
) -> ShardedTarget:
    """Step 1: open every shard's database."""
    if data_set.chosen != tuple(range(data_set.shards)):
        raise UsageError("option shard is for reads and streams; a bulk load routes every row")

    def prepare(shard: int) -> LoadTarget:
        return prepare_load(
            LoadOptions(
                url=data_set.url_of(shard),
                sst_bytes=options.sst_bytes,
                journal_bytes=options.journal_bytes,
            ),
            columns,
        )

    targets = tuple(per_shard(prepare, range(data_set.shards)))
    return ShardedTarget(data_set.url, data_set.shards, targets, options.load_id)


def write_shards(
    target: ShardedTarget,
    batches: Iterable[pa.RecordBatch],
    *,
    partition_id: int,
    attempt: int,
) -> dict[int, LoadedPartition]:
    """Step 2: one task's rows written into their shards; what each shard got.

    One pass makes every row a checked put (:func:`.load_task.check_puts`, refusing a bad row by
    its number in the task), routes each by the bytes of its bucket and key
    (:func:`inkpen.shards.shards_of`) into its shard's list, in input order, and writes each
    list as that shard's files (:func:`.load_task.write_changes`)."""
    options = Options()
    changes = check_puts(target.targets[0].columns, batches, options, partition_id)
    routed: dict[int, list[PendingChange]] = {}
    numbers = shards_of([(change.bucket, change.key) for change in changes], target.shards)
    for shard, change in zip(numbers, changes, strict=True):
        found = routed.get(shard)
        if found is None:
            routed[shard] = [change]
        else:
            found.append(change)
    return write_routed(
        target.targets, routed, partition_id=partition_id, attempt=attempt, options=options
    )


def write_routed(
    targets: Sequence[LoadTarget],
    routed: dict[int, list[PendingChange]],
    *,
    partition_id: int,
    attempt: int,
    options: Options,
) -> dict[int, LoadedPartition]:
    """Each shard's puts written as that shard's files (:func:`.load_task.write_changes`), the
    shards on up to eight threads: encoding holds the GIL, but one shard's store writes (an
    fsync, an S3 upload) wait beside another's encoding, and a task writes to every shard."""

    def write(shard: int) -> LoadedPartition:
        return write_changes(
            targets[shard],
            routed[shard],
            partition_id=partition_id,
            attempt=attempt,
            options=options,
        )

    return dict(zip(sorted(routed), per_shard(write, sorted(routed)), strict=True))


@dataclass(frozen=True, slots=True)
class ShardCommit:
    """What the commit did on one shard: its report, or None (no rows, or already committed)."""

    shard: int
    report: LoadReport | None


def commit_shards(
    target: ShardedTarget, parts: Sequence[dict[int, LoadedPartition] | None]
) -> list[ShardCommit]:
    """Step 3: one commit per shard that got rows (module docstring)."""
    if any(part is None for part in parts):
        raise InkpenError("a bulk load was asked to commit with a failed task; it must abort")
    by_shard: dict[int, list[LoadedPartition | None]] = {}
    for part in parts:
        assert part is not None
        for shard, loaded in part.items():
            by_shard.setdefault(shard, []).append(loaded)
    shards = sorted(by_shard)
    outcomes: dict[int, LoadReport | Exception | None] = {}

    def commit(shard: int) -> None:
        url = target.targets[shard].url
        try:
            outcomes[shard] = commit_load(url, by_shard[shard], load_id=target.load_id)
        except Exception as exc:  # recorded: the other shards' outcomes are reported with it
            outcomes[shard] = exc

    per_shard(commit, shards)
    failed = {s: o for s, o in outcomes.items() if isinstance(o, Exception)}
    if failed:
        first = min(failed)
        done = sorted(set(shards) - set(failed))
        again = (
            f"run the job again with the same load_id ({target.load_id}): the shards that "
            "committed are skipped"
            if target.load_id is not None
            else "the shards that committed keep their rows, so a rerun without the load_id "
            "option loads them again (set load_id on loads into data sets)"
        )
        log.error(
            "pipeline.sharded_load_partial",
            url=target.url,
            load_id=target.load_id,
            committed=done,
            failed=sorted(failed),
            error=str(failed[first]),
        )
        raise InkpenError(
            f"the bulk load into the data set {target.url} committed shard(s) "
            f"{_listed(done)} but not {_listed(sorted(failed))}; shard {first}: "
            f"{failed[first]}. To finish it, {again}"
        ) from failed[first]
    commits = [
        ShardCommit(s, o) for s, o in sorted(outcomes.items()) if not isinstance(o, Exception)
    ]
    log.info(
        "pipeline.sharded_load_committed",
        url=target.url,
        load_id=target.load_id,
        shards=len(shards),
        rows=sum(c.report.rows for c in commits if c.report is not None),
        skipped=[c.shard for c in commits if c.report is None],
    )
    return commits


def _listed(shards: Sequence[int]) -> str:
    return ", ".join(map(str, shards)) if shards else "none"
