"""What journal compaction keeps: the per-entry rules, as pure functions.

Journal compaction rewrites journal files without the values the ledger no longer needs. Each
entry is judged against a ledger snapshot (the ledger's view when compaction began):

===========================  ====================================================================
entry, as the ledger sees it   decision
===========================  ====================================================================
SQN above the snapshot's     keep (the snapshot cannot judge it)
  highest SQN
OBJECT, current, live        keep; once the ledger has persisted it (SQN at or below
                             ``trim_through``) and its ledger entry holds the value (a small
                             value, ``inline_value_bytes``), keep it as VALUE_IN_LEDGER: the
                             metadata and index specs without the body
OBJECT, current, expired     keep as a TOMBSTONE with the same index specs and expiry: the value
                             goes, but the entry still shadows any older put of the key when the
                             ledger is rebuilt from the journal
OBJECT with an expiry now    the same: the ledger reaps expired entries at the basement, so the
  past, absent from the        key may be absent only because this put expired, and an older put
  ledger                       of it may still sit in a journal file not compacted yet
TOMBSTONE, current or the    keep: a deletion must outlive every older put of its key, and a
  key absent (reaped)        tombstone reaped from the ledger may still shadow puts in journal
                             files not compacted yet
OBJECT or TOMBSTONE,         ``retain``: keep only its key changes (KEY_CHANGES entry) while one
  replaced by a newer SQN    of its index specs is still needed (below), else drop it;
  (or OBJECT absent)         ``recovr``: drop it
KEY_CHANGES                  ``retain``: keep while one of its index specs is still needed, else
                             drop; ``recovr``: drop
===========================  ====================================================================

An index spec is still needed when the ledger's entry for that index key, or for its REVERSE twin
(the two are written together with the same value, but may be reaped at different times; a
ledger written before REVERSE entries existed has none), has this entry's SQN (it is the current
state), or when the ledger no longer has the index key at all and the spec may be
what hid it: a *remove* (the ledger reaps index tombstones at the basement), or an *add* whose
expiry has passed (the ledger reaps expired entries too). An older add of the same index entry may
still sit in a journal file not compacted yet, and replaying it without this spec would bring the
index entry back. An absent key's add without an expiry was hidden by a later remove, which is
kept, so that add may go.

Under ``retain`` the ledger rebuilt by replaying the compacted journal in SQN order equals the live
ledger: every current object and tombstone entry survives, every current index entry survives
with the entry that set it, and every removal survives as long as an older add might. (A body
left to the ledger is only ever at or below the persisted SQN, which a replay never goes below:
the SSTs holding those values are part of every copy and backup of the database.)

Under ``recovr`` index history is lost with replaced values (Leveled's
caveat): a rebuilt ledger may miss index entries, and hot backups of such stores should not be
relied on for indexes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from inkpen.actors.journal.changes import INDEX_REMOVE, value_in_ledger
from inkpen.formats.journal import JournalEntry, JournalReader, Kind
from inkpen.formats.keys import (
    ACTIVE,
    TOMBSTONE,
    LedgerValue,
    Tag,
    decode_key,
    index_key,
    reverse_key,
)
from inkpen.objectstore.parallel import run_bounded

if TYPE_CHECKING:
    from inkpen.options import Options

Lookup = Callable[[bytes], LedgerValue | None]
Strategy = Literal["retain", "recovr"]


def entry_weight(entry: JournalEntry) -> int:
    """Bytes an entry occupies, roughly, for scoring."""
    value = entry.value
    return len(entry.ledger_key) + (len(value) if value is not None else 0) + 32


def file_chunks(entries: Iterable[JournalEntry], target_bytes: int) -> Iterator[list[JournalEntry]]:
    """Entries (SQN order) cut into the runs that become one journal file each: a run ends once
    it weighs ``target_bytes`` (:func:`entry_weight`). The writer's rolls and compactions and the
    compactor's compactions all cut files here."""
    chunk: list[JournalEntry] = []
    size = 0
    for entry in entries:
        chunk.append(entry)
        size += entry_weight(entry)
        if size >= target_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _index_needed(entry: JournalEntry, lookup: Lookup, now_ms: int) -> bool:
    """Whether one of the entry's index specs must survive (see the module docstring)."""
    if not entry.index_specs:
        return False
    decoded = decode_key(entry.ledger_key)
    expired = entry.expiry_ms is not None and entry.expiry_ms <= now_ms
    for op, field, term in entry.index_specs:
        found = lookup(index_key(decoded.bucket, field, term, decoded.key))
        if found is None:
            if op == INDEX_REMOVE or expired:
                return True
        elif found.sqn == entry.sqn:
            return True
        twin = lookup(reverse_key(decoded.bucket, decoded.key, field, term))
        if twin is not None and twin.sqn == entry.sqn:
            return True
    return False


def judge(
    entry: JournalEntry,
    lookup: Lookup,
    *,
    max_sqn: int,
    now_ms: int,
    strategy: Strategy,
    trim_through: int = 0,
) -> JournalEntry | None:
    """The entry to write in its place (itself, a reduced form) or None to drop it.

    ``trim_through``: the ledger has persisted every entry up to this SQN, so a current put up
    to it whose ledger entry holds its value may drop its body (:func:`without_body`)."""
    if entry.sqn > max_sqn:
        return entry
    kind = entry.kind
    if kind == Kind.KEY_CHANGES:
        return entry if strategy == "retain" and _index_needed(entry, lookup, now_ms) else None
    found = lookup(entry.ledger_key)
    if found is not None and found.sqn == entry.sqn:
        if kind == Kind.TOMBSTONE or found.status == TOMBSTONE:
            return entry
        expiry = found.expiry_ms
        if found.status == ACTIVE and (expiry is None or expiry > now_ms):
            if kind == Kind.OBJECT and entry.sqn <= trim_through and len(found) > 6:
                return without_body(entry)
            return entry
        return entry._replace(kind=Kind.TOMBSTONE, value=None)
    if kind == Kind.TOMBSTONE and (found is None or found.sqn < entry.sqn):
        return entry
    if found is None and entry.expiry_ms is not None and entry.expiry_ms <= now_ms:
        # Absent because it expired and was reaped: it must keep shadowing older puts. (An
        # absent put without an expiry was deleted by a later tombstone, which is kept.)
        return entry._replace(kind=Kind.TOMBSTONE, value=None)
    if strategy == "retain" and _index_needed(entry, lookup, now_ms):
        return entry._replace(kind=Kind.KEY_CHANGES, value=None)
    return None


def without_body(entry: JournalEntry) -> JournalEntry:
    """A put as the journal keeps it once its ledger entry holds the value: a VALUE_IN_LEDGER
    record with the same SQN, key, metadata and index specs, and no body."""
    return entry._replace(kind=Kind.VALUE_IN_LEDGER, value=None)


@dataclass(frozen=True, slots=True)
class LedgerBodies:
    """Which puts a roll writes without their body (:func:`without_body`): those whose ledger
    entry holds the value (``inline_limit``: the ``inline_value_bytes`` the writer made its
    ledger entries with) and that the ledger has persisted (SQN at most ``through``: the
    manifest's persisted SQN, or a live feed cursor's floor if lower). ``after``: the ledger's
    persisted SQN when the writer opened; entries at or below it were made into ledger entries
    by an earlier writer, under options this one does not know, so they keep their bodies."""

    after: int
    through: int
    inline_limit: int

    def covers(self, entry: JournalEntry) -> bool:
        return self.after < entry.sqn <= self.through and value_in_ledger(entry, self.inline_limit)

    def waits(self, entry: JournalEntry) -> bool:
        """Whether the ledger holds ``entry``'s value but has not persisted it yet: its body
        may leave the journal later (a re-roll of the file it is written to)."""
        return entry.sqn > max(self.after, self.through) and value_in_ledger(
            entry, self.inline_limit
        )

    def apply(
        self, entries: Iterable[JournalEntry], left_out: list[int], waiting: list[int]
    ) -> Iterator[JournalEntry]:
        """``entries`` with the bodies this covers left out; ``left_out[0]`` is raised to the
        highest SQN left without its body, and the SQNs of bodies that :meth:`waits` are
        appended to ``waiting``."""
        for entry in entries:
            if self.covers(entry):
                left_out[0] = max(left_out[0], entry.sqn)
                yield without_body(entry)
            else:
                if self.waits(entry):
                    waiting.append(entry.sqn)
                yield entry


def retained_weight(
    entry: JournalEntry,
    lookup: Lookup,
    *,
    max_sqn: int,
    now_ms: int,
    strategy: Strategy,
    trim_through: int = 0,
) -> tuple[int, int]:
    """(bytes kept, bytes in all) for one sampled entry: the inputs of a file's score."""
    kept = judge(
        entry,
        lookup,
        max_sqn=max_sqn,
        now_ms=now_ms,
        strategy=strategy,
        trim_through=trim_through,
    )
    total = entry_weight(entry)
    return (0 if kept is None else entry_weight(kept)), total


def run_target(length: int, *, single: float, max_run: float, max_length: int) -> float:
    """Leveled's target score for a run: rising from ``single`` (one file) to ``max_run``."""
    if max_length <= 1:
        return single
    return single + (max_run - single) / (max_length - 1) * (length - 1)


def best_run(
    scores: list[float], *, single: float, max_run: float, max_length: int
) -> tuple[int, int] | None:
    """The contiguous run of files (start, length) most worth compacting, or None.

    A file's score is the percentage of its bytes that would be kept. A run's score is its
    target minus the mean of its files' scores; the best positive run wins, ties to the longer.
    """
    best: tuple[float, int, int] | None = None
    for length in range(1, min(max_length, len(scores)) + 1):
        target = run_target(length, single=single, max_run=max_run, max_length=max_length)
        for start in range(0, len(scores) - length + 1):
            window = scores[start : start + length]
            score = target - sum(window) / length
            if score > 0 and (best is None or (score, length) > (best[0], best[2])):
                best = (score, start, length)
    return None if best is None else (best[1], best[2])


class Judgement:
    """One journal compaction's rules applied to files: score them by sampling, choose the run
    to rewrite (:func:`best_run`), then judge every entry of that run. Used by the writer's
    clerk and by the compactor, against their own view of the ledger (``lookup``)."""

    def __init__(
        self,
        lookup: Lookup,
        options: Options,
        *,
        max_sqn: int,
        now_ms: int,
        trim_through: int = 0,
    ) -> None:
        self.lookup = lookup
        self.options = options
        self.max_sqn = max_sqn
        self.now_ms = now_ms
        self.trim_through = min(trim_through, max_sqn)
        """Current puts up to this SQN whose ledger entry holds the value drop their body: the
        ledger's persisted SQN, never above ``max_sqn`` (a live feed cursor's floor)."""
        self.counts = {"kept": 0, "reduced": 0, "dropped": 0}

    def strategy(self, entry: JournalEntry) -> Strategy:
        tag = "h" if entry.ledger_key[:1] == bytes([Tag.HEAD]) else "o"
        return self.options.strategy_for(tag)

    def score(self, reader: JournalReader, rng: random.Random) -> float:
        """The percentage of a sample of ``reader``'s entries (by weight) worth keeping."""
        kept = total = 0
        for entry in reader.sample(rng, self.options.compaction_sample_size):
            k, t = retained_weight(
                entry,
                self.lookup,
                max_sqn=self.max_sqn,
                now_ms=self.now_ms,
                strategy=self.strategy(entry),
                trim_through=self.trim_through,
            )
            kept += k
            total += t
        return 100.0 * kept / total if total else 100.0

    def scores(
        self, readers: Sequence[JournalReader], rng: random.Random, *, limit: int
    ) -> list[float]:
        """:meth:`score` of each of ``readers``, up to ``limit`` files sampled at once (each
        with a random generator of its own, seeded from ``rng``): a file's sample reads its
        blocks one after another, the files need not wait for each other."""
        seeded = [(reader, rng.getrandbits(64)) for reader in readers]
        return run_bounded(
            lambda pair: self.score(pair[0], random.Random(pair[1])), seeded, limit=limit
        )

    def choose(self, scores: Sequence[float]) -> tuple[int, int] | None:
        """(start, length) of the run of files to rewrite, or None."""
        options = self.options
        return best_run(
            list(scores),
            single=options.single_file_compaction_pct,
            max_run=options.max_run_compaction_pct,
            max_length=options.max_run_length,
        )

    def survivors(self, readers: Iterable[JournalReader]) -> Iterator[JournalEntry]:
        """The entries of ``readers`` (in SQN order) that survive, some reduced; counts them."""
        counts = self.counts
        for reader in readers:
            for entry in reader.iter_entries():
                kept_entry = judge(
                    entry,
                    self.lookup,
                    max_sqn=self.max_sqn,
                    now_ms=self.now_ms,
                    strategy=self.strategy(entry),
                    trim_through=self.trim_through,
                )
                if kept_entry is None:
                    counts["dropped"] += 1
                    continue
                counts["kept" if kept_entry is entry else "reduced"] += 1
                yield kept_entry
