"""Compacting a sharded data set with Spark: each shard's external compactor as one Spark task.

A data set whose writers run ``compaction="external"`` needs a compactor per shard (the
``inkpen compactor`` role, :mod:`inkpen.actors.engine.compactor`). :func:`compact` runs one round
of it on every shard at once, as the tasks of one Spark job of N partitions: each task claims its
shard's compactor epoch (fencing an older compactor of that shard, never a writer), runs
``run_once`` (merges, journal compaction, a GC pass) and closes it. The driver gets one
:class:`ShardCompaction` per shard, logs each and returns them in shard order. A shard whose
writer runs internal compaction refuses the claim, and the job fails naming it (``force=True``
claims anyway, for shards whose internal writers are known to be gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inkpen.actors.engine.compactor import open_compactor
from inkpen.errors import UsageError
from inkpen.logs import get_logger

from .sharded import data_set_of

log = get_logger("inkpen.pipeline")


@dataclass(frozen=True, slots=True)
class ShardCompaction:
    """What the compactor round did on one shard."""

    shard: int
    url: str
    epoch: int
    merges: int
    l0_files: int
    level_files: tuple[int, ...]
    gc_deleted: int
    summary: str


def compact_shard(shard: int, url: str, force: bool) -> ShardCompaction:
    """One shard's compactor round (the body of one Spark task)."""
    with open_compactor(url, force=force) as compactor:
        report = compactor.run_once()
    return ShardCompaction(
        shard=shard,
        url=url,
        epoch=report.epoch,
        merges=report.merges,
        l0_files=report.l0_files,
        level_files=report.level_files,
        gc_deleted=0 if report.gc is None else len(report.gc.deleted),
        summary=report.summary(),
    )


def compact(spark: Any, url: str, *, force: bool = False) -> list[ShardCompaction]:
    """Run one compactor round on every shard of the data set at ``url``, one Spark task per
    shard (module docstring); the per-shard summaries, in shard order."""
    data_set = data_set_of(url, None)
    if data_set is None:
        raise UsageError(
            f"{url} is not a sharded data set; compact one database with `inkpen compactor "
            "URL --once` (or inkpen.open_compactor)"
        )
    jobs = [(shard, data_set.url_of(shard), force) for shard in data_set.chosen]
    rdd = spark.sparkContext.parallelize(jobs, len(jobs))
    done: list[ShardCompaction] = sorted(
        rdd.map(lambda job: compact_shard(*job)).collect(), key=lambda c: c.shard
    )
    for each in done:
        log.info("pipeline.shard_compacted", url=url, shard=each.shard, summary=each.summary)
    return done
