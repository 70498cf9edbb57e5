"""Hot backup: copy the journal and the ledger of a live Bookie to another root, incrementally.

Leveled backs up the journal alone, because its ledger can be rebuilt from it. inkpen's journal
leaves out the bodies of small values once the ledger has persisted them (their ledger entries
hold them), so a backup takes the ledger's files too: the persisted ledger and the journal
together are the database. ``backup = book.hot_backup()`` rolls the active journal (writes every
unrolled segment into a journal file), takes a snapshot whose clones keep every journal file and
SST of that moment from being deleted, and returns ``backup``; ``backup(dest)`` then:

1. marks an empty destination as an unfinished backup (a manifest with ``initialized`` false),
   so that a backup failing part-way can be taken again into the same root;
2. copies every SST and journal file of the snapshot that the destination does not have yet,
   under the same name (a hard link on a local directory when both roots share a filesystem, a
   server-side copy on S3, a read and a write otherwise; names are never reused, so a file
   there of the same size is the same file);
3. writes the segments the snapshot holds in memory (written after the roll) as one more file;
4. writes the destination's manifest: exactly those files, the snapshot's ledger levels and its
   persisted SQN (opening the backup replays only the journal above it), and a bumped writer
   epoch, so a Bookie open on the destination is fenced;
5. lets GC remove what the destination no longer needs: files the snapshot does not have, old
   manifests (checkpoints on the destination are honoured).

Every copy lands before the manifest names it and nothing is deleted before the manifest stops
naming it, so a backup interrupted at any moment still opens as the previous backup or the new
one. Repeating a backup into the same destination copies only the files that are new (a ledger
merge since the last backup makes new SSTs, which are copied; the journal files are mostly the
same).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from inkpen.actors.kernel.views import JournalView, LedgerView, segment_entries
from inkpen.errors import AlreadyExistsError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import scan_segments
from inkpen.manifest.gc import collect_as_writer
from inkpen.manifest.model import (
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
    VersionedManifest,
)
from inkpen.manifest.paths import is_journal_file_key, is_sst_key
from inkpen.manifest.store import ManifestStore, RootState
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.url import check_distinct_locations

log = get_logger("inkpen.backup")


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What one backup run did."""

    destination: str
    manifest_id: int
    files: int
    files_copied: int
    bytes_copied: int
    files_kept: int
    files_removed: int
    seconds: float


class HotBackup:
    """A snapshot (journal and persisted ledger) waiting to be copied: call it with a
    destination (once)."""

    def __init__(
        self,
        journal: JournalView,
        ledger: LedgerView,
        resolver: StoreResolver,
        writer_epoch: int,
        release: Callable[[], object],
        merge_operators: tuple[str, ...] = (),
        head_only: str | None = None,
    ) -> None:
        self._journal = journal
        self._ledger = ledger
        self._head_only = head_only
        """The source's mode, which the backup keeps (a head-only store's values live in its
        ledger alone: its journal is trimmed)."""
        self._merge_operators = merge_operators
        """The source's merge operators, which the backup records too."""
        self._resolver = resolver
        self._epoch = writer_epoch
        self._release: Callable[[], object] | None = release

    def __call__(self, destination: str | ObjectStore) -> BackupReport:
        if self._release is None:
            raise UsageError("this backup was already taken; call book.hot_backup() again")
        if not isinstance(destination, str | ObjectStore):
            raise UsageError(
                "backup destination must be a store URL or an ObjectStore, got "
                f"{type(destination).__name__}"
            )
        check_distinct_locations(self._resolver.own_store, destination, what="back up")
        store, owns = (
            (open_store(destination), True)
            if isinstance(destination, str)
            else (destination, False)
        )
        try:
            return self._run(store)
        finally:
            self.close()
            if owns:
                store.close()

    def close(self) -> None:
        """Release the snapshot without (further) copying. Idempotent."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> HotBackup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, dest: ObjectStore) -> BackupReport:
        started = time.monotonic()
        manifests = ManifestStore(dest)
        state = manifests.check_root_state()
        if state is RootState.FOREIGN:
            raise UsageError(
                f"{dest.url} holds objects that are not an inkpen database; back up into an "
                "empty root or an earlier backup"
            )
        if state is RootState.EMPTY:
            # Mark the root as an unfinished backup before copying anything, so a backup that
            # fails part-way can simply be taken again into the same root.
            with contextlib.suppress(AlreadyExistsError):
                manifests.create(Manifest(initialized=False))
        ledger = self._ledger
        levels = tuple(
            tuple(dataclasses.replace(h.descriptor, root=None) for h in level)
            for level in ledger.files.files
        )
        sources: list[SstDescriptor | JournalFileDescriptor] = [
            h.descriptor for h in ledger.handles()
        ]
        sources += [h.descriptor for h in self._journal.files]
        from inkpen.manifest.copies import copy_files  # the copy path: loaded when first used

        copied, kept, copied_bytes = copy_files(self._resolver, dest, sources)
        descriptors = [dataclasses.replace(h.descriptor, root=None) for h in self._journal.files]
        entries = list(segment_entries(self._journal.segments))
        if entries:
            written = TableStore(dest).write_journal(entries, writer_epoch=self._epoch)
            copied += 1
            copied_bytes += written.size
            descriptors.append(written)
        descriptors.sort(key=lambda d: d.min_sqn)
        ledger_state = LedgerState(levels=levels, persisted_sqn=ledger.persisted_sqn)
        versioned = self._write_manifest(manifests, dest, tuple(descriptors), ledger_state)
        deleted = collect_as_writer(manifests, versioned.manifest.writer_epoch)
        removed = sum(1 for key in deleted if is_journal_file_key(key) or is_sst_key(key))
        result = BackupReport(
            destination=dest.url,
            manifest_id=versioned.id,
            files=len(descriptors) + len(sources) - len(self._journal.files),
            files_copied=copied,
            bytes_copied=copied_bytes,
            files_kept=kept,
            files_removed=removed,
            seconds=round(time.monotonic() - started, 3),
        )
        log.info("backup.done", **dataclasses.asdict(result))
        return result

    def _write_manifest(
        self,
        manifests: ManifestStore,
        dest: ObjectStore,
        files: tuple[JournalFileDescriptor, ...],
        ledger: LedgerState,
    ) -> VersionedManifest:
        def change(current: VersionedManifest) -> Manifest:
            old = current.manifest
            # Every segment there is superseded by the backup: roll past the highest.
            last = scan_segments(dest, old.journal.last_rolled_segment).last
            return dataclasses.replace(
                old.without_checkpoints_of_kind("writer"),
                writer_epoch=old.writer_epoch + 1,
                journal=JournalState(files=files, last_rolled_segment=last, next_segment=last + 1),
                ledger=ledger,
                initialized=True,
                head_only=self._head_only,
                merge_operators=tuple(sorted({*old.merge_operators, *self._merge_operators})),
            )

        return manifests.update(change)
