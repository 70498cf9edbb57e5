"""Planning a read on the driver: which partitions, each with the ranges and files it reads.

Given the pinned manifest and the read's scan ranges, the plan cuts the ranges into partitions
balanced by size (:mod:`.splits`) and gives each partition its own copy of the manifest cut down
to what it reads, so a task opens no file it does not need:

- the SSTs whose key interval meets the partition's ranges (plus every SST that may hold index
  entries, when the read returns indexes), in their levels and L0 order;
- every journal file when values are read (a value may sit in any of them); for heads only,
  just the journal files whose entries lie above the ledger's persisted SQN, which the task
  replays to see writes the ledger did not yet hold;
- the journal state's segment range, unchanged: the task replays those segments too.

Dropping SSTs that cannot hold a key of the ranges changes no answer: a range read only ever
consults files whose interval meets the range.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inkpen.formats.keys import Tag, prefix_end
from inkpen.logs import get_logger
from inkpen.manifest.model import LedgerState, Manifest, SstDescriptor

from .options import ReadOptions
from .ranges import KeyRange
from .splits import partition_count, split_ranges

log = get_logger("inkpen.pipeline")

INDEX_TAG = bytes([Tag.INDEX])
INDEX_RANGE: KeyRange = (INDEX_TAG, prefix_end(INDEX_TAG))


@dataclass(frozen=True, slots=True)
class ScanSlice:
    """One partition of a read: its ranges and the cut-down manifest it reads them from."""

    index: int
    ranges: tuple[KeyRange, ...]
    manifest: Manifest
    manifest_id: int


def _touches(sst: SstDescriptor, ranges: tuple[KeyRange, ...]) -> bool:
    return any(sst.first_key < hi and sst.last_key >= lo for lo, hi in ranges)


def slice_manifest(
    manifest: Manifest, ranges: tuple[KeyRange, ...], *, values: bool, indexes: bool
) -> Manifest:
    """``manifest`` cut down to what a partition reading ``ranges`` needs (module docstring)."""
    wanted = (*ranges, INDEX_RANGE) if indexes else ranges
    levels = tuple(
        tuple(sst for sst in level if _touches(sst, wanted)) for level in manifest.ledger.levels
    )
    ledger = LedgerState(levels=levels, persisted_sqn=manifest.ledger.persisted_sqn)
    journal = manifest.journal
    if not values:
        persisted = manifest.ledger.persisted_sqn
        files = tuple(f for f in journal.files if not f.in_ledger and f.max_sqn > persisted)
        journal = replace(journal, files=files)
    return replace(manifest, ledger=ledger, journal=journal, checkpoints=())


def plan_slices(
    manifest: Manifest,
    manifest_id: int,
    ranges: list[KeyRange],
    options: ReadOptions,
) -> list[ScanSlice]:
    """The partitions of a read of ``ranges`` at ``manifest`` (at least one, maybe empty)."""
    ssts = list(manifest.ledger.ssts())
    count = options.partitions or partition_count(
        ranges,
        ssts,
        journal_bytes=sum(f.size for f in manifest.journal.files),
        partition_bytes=options.partition_bytes,
        values=options.values,
    )
    groups = split_ranges(ranges, ssts, count)
    slices = [
        ScanSlice(
            index,
            group,
            slice_manifest(manifest, group, values=options.values, indexes=options.indexes),
            manifest_id,
        )
        for index, group in enumerate(groups)
    ]
    log.info(
        "pipeline.read_planned",
        manifest_id=manifest_id,
        ranges=len(ranges),
        partitions=len(slices),
        ssts=len(ssts),
        ssts_per_partition=[s.manifest.sst_count() for s in slices],
    )
    return slices
