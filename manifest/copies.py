"""Copying a database, as one checkpoint pins it, into another root, without opening a writer.

This serves ``inkpen restore`` and ``inkpen backup --no-fence``. Unlike ``Bookie.hot_backup`` it
needs no Bookie, so it never bumps the source's writer epoch: a writer running elsewhere goes on.

1. **Pin.** Take a reader checkpoint on the source's latest state (refreshed while the copy runs,
   deleted after), or read at an existing live checkpoint (then nothing is written to the source).
   The checkpoint keeps every file of the pinned manifest from the writer's deletes and from GC,
   and covers every write acknowledged before it, including unrolled journal segments.
2. **Copy files.** Every SST and journal file the pinned manifest names, from whichever root holds
   it (a clone's inherited files too), under the same name: a hard link on one local filesystem,
   a server-side copy on S3, bytes otherwise, many at once (:func:`copy_files`). A file the
   destination already has (same name and size, seen in one listing; names are never reused) is
   kept, so repeating a copy into one destination is incremental and an interrupted copy
   resumes.
3. **Roll segments.** The pinned manifest's unrolled segments that the reader rule accepts are
   written as one more journal file, so the copy holds no segments and its own writers' segment
   ids never meet the source's.
4. **Commit.** The destination's manifest names exactly those files, with the source's ledger
   levels and persisted SQN (a copy opens without replaying what the ledger already holds). An
   empty destination gets manifest 1; an earlier copy gets a new version with its writer epoch
   bumped (fencing any writer open on it) and its writer checkpoints dropped.
5. **Collect.** GC runs on the destination with no minimum age, removing what the new manifest
   no longer names (files of an earlier copy, leftovers of an interrupted one).

Every file lands before a manifest names it, and nothing is deleted before the manifest stops
naming it, so a copy interrupted at any moment leaves the destination as it was (or holding only
unnamed files that the next copy reuses or collects).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace

from inkpen.errors import CorruptionError, NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.parallel import concurrency, run_bounded
from inkpen.objectstore.url import check_distinct_locations

from .checkpoints import CheckpointLease
from .clones import StoreResolver
from .fencing import scan_segments
from .gc import collect_as_writer
from .model import (
    KIND_WRITER,
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
    VersionedManifest,
)
from .paths import (
    JOURNAL_FILES_PREFIX,
    LEDGER_PREFIX,
    is_journal_file_key,
    is_sst_key,
    segment_key,
)
from .store import ManifestStore, RootState
from .table_store import TableStore

log = get_logger("inkpen.manifest")

COPY_BYTES = 256 * 1024 * 1024
"""Bytes of files a copy has in flight at most (one file alone may be larger)."""
DEFAULT_LEASE = 600.0

FileDescriptor = SstDescriptor | JournalFileDescriptor
CopyObserver = Callable[[str, int], None]
"""Told ``(object key, bytes)`` as each file is copied or found already there."""


@dataclass(frozen=True, slots=True)
class Pinned:
    """The source state a copy reads: a checkpoint and the manifest it pins."""

    checkpoint_id: str
    manifest_id: int
    manifest: Manifest


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What one copy did."""

    source: str
    destination: str
    checkpoint: str
    """The source checkpoint the copy was read at."""
    source_manifest_id: int
    manifest_id: int
    """The destination's manifest naming the copy."""
    files: int
    files_copied: int
    files_kept: int
    bytes_copied: int
    segments_rolled: int
    files_removed: int
    seconds: float


def planned_bytes(manifest: Manifest) -> int:
    """Bytes of every file a copy of ``manifest`` goes through (for progress totals)."""
    return sum(s.size for s in manifest.ledger.ssts()) + sum(f.size for f in manifest.journal.files)


@contextlib.contextmanager
def pin(source: ManifestStore, checkpoint: str | None, lifetime: float) -> Iterator[Pinned]:
    """Hold the source state still: at ``checkpoint``, or under a reader checkpoint of our own."""
    if checkpoint is not None:
        latest = source.open_database(create_if_missing=False)
        found = latest.manifest.checkpoint(checkpoint)
        if found is None or not found.is_live(time.time()):
            raise NotFoundError(
                f"no live checkpoint {checkpoint} in {source.url}; "
                f"`inkpen checkpoint list {source.url}` shows the live ones"
            )
        yield Pinned(found.id, found.manifest_id, source.read(found.manifest_id))
        return
    source.open_database(create_if_missing=False)
    lease = CheckpointLease.establish(source, lifetime=lifetime, metadata={"purpose": "copy"})
    try:
        yield Pinned(lease.checkpoint.id, lease.manifest_id, lease.manifest)
    finally:
        lease.close()


def destination_state(target: ManifestStore, *, fresh: bool) -> RootState:
    """Check that ``target`` may receive a copy; answers what it holds now.

    ``fresh`` (a restore) accepts only an empty root or the files of an interrupted copy; otherwise
    an earlier copy (a live database) is accepted too and replaced.
    """
    state = target.check_root_state()
    url = target.url
    if state is RootState.DATABASE:
        if fresh:
            raise UsageError(
                f"{url} already holds an inkpen database; restore into an empty location, or "
                f"destroy that database first (inkpen destroy {url} --yes)"
            )
        target.open_database(create_if_missing=False)
    elif state is RootState.FOREIGN:
        for info in target.store.list(""):
            if not (is_sst_key(info.key) or is_journal_file_key(info.key)):
                raise UsageError(
                    f"{url} holds objects that are not an inkpen database (such as {info.key}); "
                    "copy into an empty location"
                )
    return state


def copy_files(
    resolver: StoreResolver,
    dest: ObjectStore,
    files: Sequence[FileDescriptor],
    observe: CopyObserver | None = None,
) -> tuple[int, int, int]:
    """Copy each file the destination lacks; answers (copied, kept, bytes copied).

    What the destination holds is read from one listing of its files (a file there of the same
    name and size is kept); the others are copied up to the destination's
    :func:`~inkpen.objectstore.parallel.concurrency` at once, and at most :data:`COPY_BYTES`
    of them (by size) at once, since a copy between kinds of store holds its file's bytes."""
    tables = TableStore(dest)
    present = stored_files(dest)
    kept = [d for d in files if present.get(d.name) == d.size]
    todo = [d for d in files if present.get(d.name) != d.size]
    if observe is not None:
        for descriptor in kept:
            observe(descriptor.name, descriptor.size)

    def one(descriptor: FileDescriptor) -> None:
        source = resolver.store_for(descriptor.root)
        try:
            tables.copy_file(descriptor, source)
        except NotFoundError:
            raise CorruptionError(
                f"{source.url}/{descriptor.name}", "file named by the pinned manifest is missing"
            ) from None

    def done(descriptor: FileDescriptor, _: None) -> None:
        if observe is not None:
            observe(descriptor.name, descriptor.size)

    run_bounded(
        one,
        todo,
        limit=concurrency(dest),
        weigh=lambda d: d.size,
        max_bytes=COPY_BYTES,
        done=done,
    )
    return len(todo), len(kept), sum(d.size for d in todo)


def stored_files(store: ObjectStore) -> dict[str, int]:
    """The SSTs and journal files ``store`` holds, by name, with their sizes (two listings, at
    once)."""
    found = run_bounded(
        lambda prefix: [(i.key, i.size) for i in store.list(prefix)],
        [LEDGER_PREFIX, JOURNAL_FILES_PREFIX],
        limit=2,
    )
    return {
        key: size
        for listing in found
        for key, size in listing
        if is_sst_key(key) or is_journal_file_key(key)
    }


def roll_segments(
    source: ObjectStore, dest: ObjectStore, journal: JournalState
) -> tuple[JournalFileDescriptor | None, int]:
    """Write the accepted unrolled segments of ``journal`` into ``dest`` as one journal file.

    Answers the new file's descriptor (None when the segments hold no entries) and how many
    segments were read.
    """
    ids = journal.unrolled_segments()
    segments = TableStore(source).read_segments(ids, missing_error=_missing_from_pin)
    if not segments:
        return None, len(ids)
    entries = [entry for segment in segments for entry in segment.entries]
    epoch = max(segment.writer_epoch for segment in segments)
    return TableStore(dest).write_journal(entries, writer_epoch=epoch), len(ids)


def _missing_from_pin(url: str, missing: Sequence[int]) -> CorruptionError:
    return CorruptionError(
        f"{url}/{segment_key(missing[0])}", "segment covered by the pinned manifest is missing"
    )


def commit(
    target: ManifestStore,
    state: RootState,
    files: tuple[JournalFileDescriptor, ...],
    ledger: LedgerState,
    head_only: str | None = None,
    merge_operators: tuple[str, ...] = (),
) -> VersionedManifest:
    """Write the destination manifest naming the copied files (see the module docstring); a
    head-only source gives a head-only copy, and the copy records the source's merge
    operators."""
    journal = JournalState(files=tuple(sorted(files, key=lambda f: f.min_sqn)))
    if state is not RootState.DATABASE:
        return target.create(
            Manifest(
                journal=journal,
                ledger=ledger,
                head_only=head_only,
                merge_operators=merge_operators,
            )
        )
    store = target.store

    def change(current: VersionedManifest) -> Manifest:
        old = current.manifest
        # Every segment there is superseded by the copy, a gap or not: roll past the highest.
        last = scan_segments(store, old.journal.last_rolled_segment).last
        return replace(
            old.without_checkpoints_of_kind(KIND_WRITER),
            writer_epoch=old.writer_epoch + 1,
            journal=replace(journal, last_rolled_segment=last, next_segment=last + 1),
            ledger=ledger,
            initialized=True,
            head_only=head_only,
            merge_operators=merge_operators,
        )

    return target.update(change)


def copy_database(
    source: ObjectStore,
    dest: ObjectStore,
    *,
    checkpoint: str | None = None,
    fresh: bool = False,
    lifetime: float = DEFAULT_LEASE,
    observe: CopyObserver | None = None,
    on_pinned: Callable[[Pinned], None] | None = None,
) -> CopyReport:
    """Copy the database at ``source`` into ``dest`` (see the module docstring).

    ``checkpoint``: copy that live checkpoint's state instead of pinning the latest. ``fresh``:
    refuse a destination that already holds a database. ``lifetime``: of the checkpoint the copy
    holds (refreshed at half-life while it runs). ``on_pinned`` is told what will be copied
    before any copying starts.
    """
    check_distinct_locations(source, dest, what="copy")
    started = time.monotonic()
    src = ManifestStore(source)
    target = ManifestStore(dest)
    state = destination_state(target, fresh=fresh)
    with pin(src, checkpoint, lifetime) as pinned:
        if on_pinned is not None:
            on_pinned(pinned)
        manifest = pinned.manifest
        resolver = StoreResolver(source)
        try:
            copied, kept, copied_bytes = copy_files(
                resolver, dest, [*manifest.ledger.ssts(), *manifest.journal.files], observe
            )
            tail, segments = roll_segments(source, dest, manifest.journal)
        finally:
            resolver.close()
    rootless = tuple(f.with_root(None) for f in manifest.journal.files)
    files = rootless + ((tail,) if tail is not None else ())
    if tail is not None:
        copied += 1
        copied_bytes += tail.size
    levels = tuple(tuple(s.with_root(None) for s in level) for level in manifest.ledger.levels)
    ledger = LedgerState(levels=levels, persisted_sqn=manifest.ledger.persisted_sqn)
    written = commit(target, state, files, ledger, manifest.head_only, manifest.merge_operators)
    collected = collect_as_writer(target, written.manifest.writer_epoch)
    report = CopyReport(
        source=source.url,
        destination=dest.url,
        checkpoint=pinned.checkpoint_id,
        source_manifest_id=pinned.manifest_id,
        manifest_id=written.id,
        files=len(files) + manifest.sst_count(),
        files_copied=copied,
        files_kept=kept,
        bytes_copied=copied_bytes,
        segments_rolled=segments,
        files_removed=sum(1 for key in collected if is_sst_key(key) or is_journal_file_key(key)),
        seconds=round(time.monotonic() - started, 3),
    )
    log.info("copy.done", **asdict(report))
    return report
