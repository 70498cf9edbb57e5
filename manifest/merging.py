"""Merging the writer's and the compactor's changes into one manifest: pure functions.

Two roles advance a database's manifest (SlateDB's design): the **writer** adds L0 files and
journal state (rolls, checkpoints), and the **compactor** (another process, fenced by
``compactor_epoch``) replaces files (ledger merges, journal compactions). Every commit of either
is a CAS (:meth:`~inkpen.manifest.store.ManifestStore.update`) whose change is one of the
functions below applied to whatever manifest is latest at that attempt, so a lost race re-reads
and applies the same *delta* again instead of writing back a stale copy of the other role's
half:

- :func:`add_l0` (the writer): the new file becomes the newest of the latest manifest's L0,
  every deeper level is kept as it stands there;
- :func:`replace_ssts` (the compactor): the job's inputs leave whatever level holds them now and
  its outputs enter the target level; an input the latest manifest no longer names raises
  :class:`ManifestConflict` (nothing is written; the compactor drops its outputs and chooses
  again);
- :func:`replace_journal_files` (the compactor): the same for journal files;
- :func:`check_compactor` (the compactor): a newer ``compactor_epoch`` raises
  :class:`~inkpen.errors.FencedError`, so a superseded compactor writes nothing;
- :func:`check_writer_mode` (the compactor): a writer epoch recorded with
  ``writer_compaction="internal"`` (a writer that merges and collects itself) raises
  :class:`~inkpen.errors.FencedError` too, unless it is the one epoch the compactor was told
  is gone (``force``).

Nothing here reads or writes a store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from inkpen.errors import FencedError, InkpenError
from inkpen.manifest.levels import from_manifest
from inkpen.manifest.model import (
    COMPACTION_INTERNAL,
    JournalFileDescriptor,
    Manifest,
    SstDescriptor,
)


class ManifestConflict(InkpenError):
    """The latest manifest no longer holds a file a change replaces (someone else replaced it
    first); the change is dropped and its new files are orphans."""


def check_compactor(manifest: Manifest, epoch: int) -> None:
    """Raise :class:`FencedError` unless ``manifest`` still names compactor ``epoch``."""
    if manifest.compactor_epoch != epoch:
        raise FencedError(
            f"compactor epoch {manifest.compactor_epoch} has claimed this database; this "
            f"compactor (epoch {epoch}) can no longer commit. Only one compactor runs at a time"
        )


def internal_writer(manifest: Manifest) -> bool:
    """Whether ``manifest``'s writer epoch belongs to a writer that merges and collects itself
    (``compaction="internal"``; a database no writer ever claimed has none)."""
    return manifest.writer_epoch > 0 and manifest.writer_compaction == COMPACTION_INTERNAL


def check_writer_mode(manifest: Manifest, epoch: int, tolerated: int | None) -> None:
    """Raise :class:`FencedError` when ``manifest``'s writer runs its own merges
    (:func:`internal_writer`), unless its epoch is ``tolerated`` (the internal writer a forced
    compactor was told is gone). ``epoch``: the compactor's, for the message."""
    if internal_writer(manifest) and manifest.writer_epoch != tolerated:
        raise FencedError(
            f'writer epoch {manifest.writer_epoch} was opened with compaction="internal" '
            f"and runs its own merges and GC: this compactor (epoch {epoch}) stops and commits "
            'nothing more. Reopen the writer with compaction="external", then start a '
            "compactor again"
        )


def add_l0(manifest: Manifest, file: SstDescriptor, persisted_sqn: int) -> Manifest:
    """``manifest`` with ``file`` as its newest L0 file and the persisted SQN raised to
    ``persisted_sqn`` (never lowered); deeper levels as they stand in ``manifest``."""
    ledger = dataclasses.replace(
        manifest.ledger,
        levels=from_manifest(manifest.ledger).with_l0(file).to_manifest(),
        persisted_sqn=max(manifest.ledger.persisted_sqn, persisted_sqn),
    )
    return dataclasses.replace(manifest, ledger=ledger)


def replace_ssts(
    manifest: Manifest, removed: Iterable[str], target: int, added: Sequence[SstDescriptor]
) -> Manifest:
    """``manifest`` with every SST named in ``removed`` dropped from whatever level holds it and
    ``added`` put into level ``target`` (>= 1) in key order.

    Raises :class:`ManifestConflict` when one of ``removed`` is no longer in ``manifest``, and
    :class:`~inkpen.manifest.levels.LevelError` when the result would overlap within a level
    (:meth:`~inkpen.manifest.levels.Levels.apply`, the one place a merge's result is made)."""
    gone = set(removed)
    present = {d.name for d in manifest.ledger.ssts()}
    missing = sorted(gone - present)
    if missing:
        raise ManifestConflict(
            f"{missing[0]} is no longer in the latest manifest: another change replaced it"
        )
    levels = from_manifest(manifest.ledger).apply(gone, target, added)
    ledger = dataclasses.replace(manifest.ledger, levels=levels.to_manifest())
    return dataclasses.replace(manifest, ledger=ledger)


def replace_journal_files(
    manifest: Manifest, removed: Iterable[str], added: Sequence[JournalFileDescriptor]
) -> Manifest:
    """``manifest`` with the journal files named in ``removed`` replaced by ``added`` (SQN
    order kept); :class:`ManifestConflict` when one of ``removed`` is gone already."""
    gone = set(removed)
    present = {d.name for d in manifest.journal.files}
    missing = sorted(gone - present)
    if missing:
        raise ManifestConflict(
            f"{missing[0]} is no longer in the latest manifest: another change replaced it"
        )
    kept = [d for d in manifest.journal.files if d.name not in gone]
    files = tuple(sorted((*kept, *added), key=lambda d: d.min_sqn))
    journal = dataclasses.replace(manifest.journal, files=files)
    return dataclasses.replace(manifest, journal=journal)


def ledger_names(manifest: Manifest) -> frozenset[str]:
    """The names of every SST ``manifest``'s ledger holds."""
    return frozenset(d.name for d in manifest.ledger.ssts())
