"""Messages that cross from one actor role to another (each actor's private messages live in its
own module).

Who may wait on whom (``call``), so that no two actors ever wait on each other:

    Bookie ──▶ Inker, Penciller, clones          clones ──▶ Inker, Penciller
    Inker ──▶ Penciller, file clerks             Penciller ──▶ file clerks
    clerks of the Inker and Penciller ──▶ Bookie, Penciller, file clerks

Everything in the other direction is a tell: the Inker tells the Bookie a batch is durable, the
Penciller tells the Bookie it has room again, clerks tell their owners their results. The fence
is no message: every actor asks the manifest keeper (``ManifestKeeper.fenced``).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from inkpen.actors.journal.clerk import CompactionReport
from inkpen.actors.journal.intake import Batch
from inkpen.formats.journal import JournalEntry


@dataclass(frozen=True, slots=True)
class ApplyBatch:
    """Inker to Bookie: these entries are durable and visible in the journal view; cache their
    ledger entries, then release the batch's callers."""

    batch: Batch
    entries: tuple[JournalEntry, ...]


@dataclass(frozen=True, slots=True)
class LedgerRoom:
    """Penciller to Bookie: an L0 write or a merge finished; pushes may be taken again."""


@dataclass(frozen=True, slots=True)
class CompactJournal:
    """To the Bookie (from the engine, or from the Inker retrying a compaction whose commit
    failed): start a journal compaction against a fresh ledger snapshot; its report goes to
    ``result``."""

    result: Future[CompactionReport]
