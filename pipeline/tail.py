"""The journal tail of a database a bulk load has just claimed: what its writer left undone.

A writer leaves two things for the next start-up, and a bulk load must finish both itself:

- **writes its ledger lacks.** The ledger persists only up to ``ledger.persisted_sqn``; every
  acknowledged write above it lives in the journal alone (journal files not marked
  ``in_ledger``, and unrolled segments) and in the fenced writer's memory, and start-up would
  replay it. A bulk load puts its SSTs in L0 and raises ``persisted_sqn`` to its top SQN, so
  nothing would replay those writes any more: the load adds their ledger entries as an SST.
- **segments it has not rolled.** The accepted segments after ``last_rolled_segment`` hold
  values (of ledger entries below and above ``persisted_sqn`` alike) that no journal file holds
  yet. A writer rolls them into one journal file spanning their SQNs; after a load, that file's
  range would reach past the loaded journal files below it, which journal files must never do.
  So the load rolls them itself, into a journal file below its own, and moves
  ``last_rolled_segment`` to its fence.

After :func:`inkpen.manifest.fencing.claim_writer`, no older writer can add a segment (the fence
holds the slot after the last one) or change the manifest (its epoch is stale), so the tail is
fixed: the accepted segments between ``last_rolled_segment`` and the claim's fence, and the
journal files above ``persisted_sqn``. It is read with the same view builder every reader uses
(:func:`inkpen.actors.read.checkpoint_views.load_views` on the claimed manifest, its segment range
stretched to the fence and its SSTs left out), so the tail's ledger entries are exactly those
start-up replay would produce, newest per key, tombstones and index entries included.

The same pass finds the highest SQN anywhere in the database (SSTs, journal files, the
accepted segments, the tail): the load's SQNs start above it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inkpen.actors.kernel.views import segment_entries
from inkpen.actors.read.checkpoint_views import load_views
from inkpen.formats.journal import JournalEntry
from inkpen.formats.keys import LedgerValue
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import WriterClaim
from inkpen.manifest.model import LedgerState, Manifest
from inkpen.options import Options


@dataclass(frozen=True, slots=True)
class JournalTail:
    """What the claimed database's writer left: ledger entries, unrolled entries, the top SQN."""

    entries: tuple[tuple[bytes, LedgerValue], ...]
    """Ledger entries of the journal above ``persisted_sqn``: in key order, newest per key."""
    unrolled: tuple[JournalEntry, ...]
    """Every entry of the accepted unrolled segments, in SQN order."""
    top_sqn: int
    """The highest SQN anywhere in the database."""


def _replay_manifest(manifest: Manifest, fence_segment: int) -> Manifest:
    """``manifest`` reduced to what replay reads: its replayable journal files and every
    segment up to the fence; no SSTs."""
    persisted = manifest.ledger.persisted_sqn
    journal = manifest.journal
    files = tuple(f for f in journal.files if not f.in_ledger and f.max_sqn > persisted)
    stretched = replace(journal, files=files, next_segment=max(journal.next_segment, fence_segment))
    return replace(
        manifest,
        journal=stretched,
        ledger=LedgerState(levels=(), persisted_sqn=persisted),
        checkpoints=(),
    )


def read_journal_tail(
    resolver: StoreResolver, claim: WriterClaim, options: Options | None = None
) -> JournalTail:
    """The journal tail of the database as ``claim`` found it (module docstring)."""
    manifest = claim.versioned.manifest
    views = load_views(
        resolver,
        _replay_manifest(manifest, claim.fence_segment),
        claim.versioned.id,
        options if options is not None else Options(),
    )
    table = views.ledger.mem[0] if views.ledger.mem else None
    entries = tuple(sorted(table.entries.items())) if table is not None else ()
    top = max(
        [
            manifest.ledger.persisted_sqn,
            views.journal.max_sqn(),
            0 if table is None else table.max_sqn,
            *(f.max_sqn for f in manifest.journal.files),
            *(s.max_sqn for s in manifest.ledger.ssts()),
        ]
    )
    return JournalTail(entries, tuple(segment_entries(views.journal.segments)), top)
