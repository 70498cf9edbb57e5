"""The table store: the one place that writes and opens a database's SST and journal files and
its journal segments.

(SlateDB's ``TableStore``.) Every SST (``ledger/<file-id>.sst``) and journal file
(``journal/compacted/<file-id>.jnl``) is stored and opened through a :class:`TableStore` over the
database's object store: the writer's file clerks, read-only views of a manifest (Readers, Spark
tasks), the bulk load, hot backups and copies of a database. So is every journal segment
(``journal/<id>.jnl``) the writer's Inker writes, and every one read back. It is plain I/O over an
:class:`~inkpen.objectstore.ObjectStore`, with no actors.

**Writing.** A new file gets a fresh name (:func:`new_name`: a ``<file-id>`` never reused) in this
database's own store and is created with create-if-absent, so no write replaces another's file.
``on_write`` (the writer's in-flight set) is told the name before the put: the writer's own GC
leaves the file alone until a manifest names it. The answer is the file's manifest descriptor,
made from what was written (:func:`descriptor_for`, :func:`journal_descriptor_for`); nothing
names the file until the caller commits a manifest holding that descriptor.

**Writing journal segments** (:meth:`TableStore.write_segment`, the writer's segment writes,
several at once from the Inker's writing pool). A segment (``journal/<id>.jnl``) takes its slot
with create-if-absent, stamped with its writer's epoch and its durable floor
(:func:`~inkpen.manifest.fencing.write_segment`: a lost answer is settled by reading the slot
back, and whatever other segment is found there is judged by the reader rule,
:class:`~inkpen.manifest.fencing.EpochRule`: a newer epoch fences the writer; an older one is
stepped over only where the writer says a fenced writer's write may land). An outcome that
stays unknown is retried with the same bytes into the same slot, a few rounds with a growing
pause; a slot holding exactly those bytes is an earlier round that landed. What is still unknown
after that is an indefinite :class:`~inkpen.errors.StoreError`: the writer keeps the bytes and
settles the segment later with the same call (``retried``). Fences are the claim's
(:func:`~inkpen.manifest.fencing.claim_writer`).

**Opening.** A file is read from the root that holds it: the descriptor's ``root`` (None for this
database's own files; a clone's inherited files live in its parent's store, found through the
:class:`~inkpen.manifest.clones.StoreResolver`). SST readers read straight from the store and
keep blocks in the block cache (as stored for point lookups, decoded for scans and merges);
journal readers read aligned chunks through the journal cache shared by every journal file
(:mod:`inkpen.manifest.fetch`). With a disk cache (option ``cache_dir``) both read through it
(:mod:`inkpen.manifest.disk_cache`; the table stores of copies, backups and ``inkpen verify``
have none: they read the store itself). Both apply the descriptor's ``sqn_base`` (bulk-loaded
files store local SQNs).

**Reading unrolled segments** (:meth:`TableStore.read_segments`). The journal segments a manifest
has not rolled yet (``journal/<id>.jnl`` in its own store) are read back, up to the store's
:func:`~inkpen.objectstore.parallel.concurrency` at once, decoded, and kept only if the reader
rule accepts them (:func:`~inkpen.manifest.fencing.accepted_segments` over the epochs in their
headers: no segment an older epoch wrote after a newer one) and they hold entries (a writer's
fence holds none). A segment absent from the store is damage, an error
naming it (:func:`~inkpen.manifest.fencing.missing_segments_error` unless the caller names
another), or is passed over when the caller allows missing segments. Which ids to read is the
caller's: a writer's claim, a pinned manifest's window, a copy's checkpoint.

**Deleting.** Only this database's own files, and only when the owner of the file says so (a file
clerk after delete_pending, or GC).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from inkpen.errors import InkpenError, NotFoundError, StoreError, UsageError
from inkpen.formats.cache import LruCache
from inkpen.formats.journal import JournalEntry, JournalReader, build_journal, decode_journal
from inkpen.formats.sst import SstInfo, SstReader
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore
from inkpen.objectstore.local import LocalStore
from inkpen.objectstore.parallel import concurrency, run_bounded
from inkpen.options import Options

from .clones import StoreResolver
from .disk_cache import CachedObject, DiskCache, disk_cache_for
from .fencing import (
    OlderSlot,
    SegmentBytes,
    SegmentRef,
    accepted_segments,
    missing_segments_error,
    write_segment,
)
from .fetch import ChunkedFetch, DirectFetch
from .model import JournalFileDescriptor, SstDescriptor
from .paths import (
    JOURNAL_FILES_PREFIX,
    LEDGER_PREFIX,
    is_journal_file_key,
    is_sst_key,
    journal_file_key,
    new_file_id,
    segment_key,
    sst_key,
)

log = get_logger("inkpen.manifest")

FileKind = Literal["sst", "journal"]
SEGMENT_WRITE_ATTEMPTS = 6
"""Rounds of a segment write whose outcome stays unknown before it is left unknown."""
SEGMENT_RETRY_FIRST = 0.05
SEGMENT_RETRY_MAX = 1.0
"""Seconds between those rounds: doubling from :data:`SEGMENT_RETRY_FIRST` up to this."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One unrolled journal segment read back: its id, its writer's epoch, its stored size and its
    entries (SQN order; :meth:`TableStore.read_segments` answers only segments with entries)."""

    id: int
    writer_epoch: int
    size: int
    entries: tuple[JournalEntry, ...]


def new_name(kind: FileKind) -> str:
    """A fresh object key for a new SST or journal file."""
    return sst_key(new_file_id()) if kind == "sst" else journal_file_key(new_file_id())


def descriptor_for(name: str, info: SstInfo) -> SstDescriptor:
    """The manifest descriptor of an SST this process wrote."""
    return SstDescriptor(
        name=name,
        first_key=info.first_key,
        last_key=info.last_key,
        min_sqn=info.min_sqn,
        max_sqn=info.max_sqn,
        size=info.size,
        entry_count=info.entry_count,
        tombstone_count=info.tombstone_count,
    )


def journal_descriptor_for(
    name: str, entries: Sequence[JournalEntry], size: int
) -> JournalFileDescriptor:
    """The manifest descriptor of a journal file this process wrote: ``entries`` (SQN order, at
    least one) encoded in ``size`` bytes."""
    return JournalFileDescriptor(
        name=name,
        min_sqn=entries[0].sqn,
        max_sqn=entries[-1].sqn,
        size=size,
        entry_count=len(entries),
    )


class TableStore:
    """Writes, opens and deletes the SST and journal files of the database at ``store``.

    ``resolver`` finds the stores of files a clone inherited (its own store must be ``store``);
    without one only this database's own files can be opened. ``block_cache`` keeps SST blocks
    (as stored, or decoded by scans), ``journal_cache`` journal chunks of ``journal_chunk_bytes``
    (default: the option's default); without a cache a reader reads the store directly.
    ``journal_index_cache`` keeps the journal files' SQN block indexes (and pages of version 1
    files' hash tables); without one each journal reader holds its whole index region.
    ``disk_cache`` (option ``cache_dir``) keeps on local disk the parts of files the readers
    read (:mod:`inkpen.manifest.disk_cache`). ``on_write`` is told each new file's name just
    before it is stored.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        resolver: StoreResolver | None = None,
        block_cache: LruCache | None = None,
        journal_cache: LruCache | None = None,
        journal_chunk_bytes: int | None = None,
        journal_index_cache: LruCache | None = None,
        disk_cache: DiskCache | None = None,
        on_write: Callable[[str], object] | None = None,
    ) -> None:
        self.store = store
        self.disk_cache = disk_cache
        self._resolver = resolver
        self.block_cache = block_cache
        self.journal_cache = journal_cache
        self.journal_index_cache = journal_index_cache
        self._chunk = (
            Options().journal_chunk_bytes if journal_chunk_bytes is None else journal_chunk_bytes
        )
        self._on_write = on_write
        self._halted: InkpenError | None = None
        self._writing = 0
        self._writes = threading.Condition()

    @classmethod
    def for_options(
        cls,
        resolver: StoreResolver,
        options: Options,
        *,
        on_write: Callable[[str], object] | None = None,
    ) -> TableStore:
        """A table store over ``resolver``'s own store with the caches ``options`` size (and the
        disk cache it names)."""
        return cls(
            resolver.own_store,
            resolver=resolver,
            block_cache=LruCache(options.block_cache_bytes) if options.block_cache_bytes else None,
            journal_cache=(
                LruCache(options.journal_cache_bytes) if options.journal_cache_bytes else None
            ),
            journal_chunk_bytes=options.journal_chunk_bytes,
            journal_index_cache=LruCache(options.journal_index_cache_bytes),
            disk_cache=disk_cache_for(options),
            on_write=on_write,
        )

    def store_for(self, root: str | None) -> ObjectStore:
        """The store holding the files of ``root`` (None: this database's own)."""
        if self._resolver is not None:
            return self._resolver.store_for(root)
        if root is None or root == self.store.url:
            return self.store
        raise InkpenError(
            f"a file of {root} was to be read through the table store of {self.store.url}, "
            "which was given no StoreResolver for a clone's parents; this is a bug"
        )

    # -- writing ------------------------------------------------------------------------------

    def put(self, name: str, data: bytes) -> None:
        """Store a new file's bytes as ``name``, create-if-absent; ``on_write`` is told first."""
        with self._writes:
            if self._halted is not None:
                raise self._halted
            self._writing += 1
        try:
            if self._on_write is not None:
                self._on_write(name)
            self.store.put_if_absent(name, data)
        finally:
            with self._writes:
                self._writing -= 1
                self._writes.notify_all()

    def halt(self, error: InkpenError, *, timeout: float) -> bool:
        """Refuse every later file write with ``error`` and wait (up to ``timeout`` seconds) for
        the writes under way to end: after this, nothing new appears through this table store
        (an abandoned writer leaves the store as a crash would). Answers whether they ended."""
        with self._writes:
            if self._halted is None:
                self._halted = error
            return self._writes.wait_for(lambda: self._writing == 0, timeout)

    def write_sst(self, data: bytes, info: SstInfo, *, name: str | None = None) -> SstDescriptor:
        """Store an SST built as ``data`` (described by ``info``) under ``name`` (a fresh one by
        default); answers its manifest descriptor."""
        name = new_name("sst") if name is None else name
        self.put(name, data)
        return descriptor_for(name, info)

    def write_journal(
        self,
        entries: Sequence[JournalEntry],
        *,
        writer_epoch: int,
        data: bytes | None = None,
        name: str | None = None,
    ) -> JournalFileDescriptor:
        """Store ``entries`` (strictly increasing SQNs, at least one) as one journal file stamped
        with ``writer_epoch``, under ``name`` (a fresh one by default); answers its descriptor.

        ``data``: the entries already encoded with that epoch (a writer encodes in its compute
        pool); otherwise they are encoded here.
        """
        if not entries:
            raise ValueError("a journal file holds at least one entry")
        if data is None:
            data = build_journal(entries, writer_epoch=writer_epoch)
        name = new_name("journal") if name is None else name
        self.put(name, data)
        return journal_descriptor_for(name, entries, len(data))

    def link_segment(
        self,
        segment_id: int,
        *,
        min_sqn: int,
        max_sqn: int,
        size: int,
        entry_count: int,
        name: str | None = None,
    ) -> JournalFileDescriptor:
        """Store journal segment ``segment_id`` (``size`` bytes holding ``entry_count`` entries,
        SQNs ``min_sqn`` to ``max_sqn``) as a journal file under ``name`` without sending its
        bytes again: a hard link on a local directory, a server-side copy on S3. A segment and
        a journal file share one format, so the file is exactly the segment's bytes (stamped
        with the epoch that wrote the segment). ``on_write`` is told the name first, as for
        :meth:`put`; answers the new file's descriptor.
        """
        name = new_name("journal") if name is None else name
        if self._on_write is not None:
            self._on_write(name)
        self.store.copy(segment_key(segment_id), name)
        return JournalFileDescriptor(
            name=name, min_sqn=min_sqn, max_sqn=max_sqn, size=size, entry_count=entry_count
        )

    def write_segment(
        self,
        segment_id: int,
        data: SegmentBytes,
        *,
        writer_epoch: int,
        attempts: int = SEGMENT_WRITE_ATTEMPTS,
        retried: bool = False,
        durable_floor: int | None = None,
        step_over_older: bool = False,
    ) -> int:
        """Write journal segment ``segment_id``, ``data`` encoded with ``writer_epoch``, into its
        slot of this database's own store: the writer's segment write (see the module docstring).
        ``data`` may be the pieces the segment joins into (a local directory writes them with one
        gathering write, never joining them in memory). ``durable_floor`` is recorded with it
        (the id through which every segment was durable when the writer issued this one).
        Answers the slot it landed in: ``segment_id``, or with ``step_over_older`` a later one
        (a slot holding an older epoch's segment is stepped over, the same bytes written into
        the next; ``journal.slot_stepped_over`` is logged).

        Each round is :func:`~inkpen.manifest.fencing.write_segment` (create-if-absent; a lost
        answer is settled by reading the slot back, the epoch found there judged by the reader
        rule). A round whose outcome stays unknown is tried again with the same bytes into the
        same slot, up to ``attempts`` rounds with a pause growing from
        :data:`SEGMENT_RETRY_FIRST` to :data:`SEGMENT_RETRY_MAX` between them; from the second
        round on (from the first when ``retried``: this very write was made before and its
        outcome is unknown), a slot holding exactly ``data`` is an earlier round that landed.
        Returns once the segment is there. Raises:

        - :class:`FencedError` when the slot holds a newer writer's segment;
        - :class:`~inkpen.manifest.fencing.OlderSlot` (without ``step_over_older``) when it
          holds an older epoch's segment, and :class:`InkpenError` (not a :class:`StoreError`)
          when it holds other bytes of ``writer_epoch``: a loss or a bug, nothing more should
          be written;
        - a definite :class:`StoreError` when the store refused the first round: that round
          wrote nothing (so a write not ``retried`` is not there; a ``retried`` one is still of
          unknown outcome);
        - an indefinite :class:`StoreError` when the outcome is still unknown: the segment may
          have landed; the same call with the same bytes and ``retried`` settles it later.

        Anything else the store lets through (a bug of a store, say an ``OSError`` it did not
        map) is logged (``journal.segment_write_raised``) and raised as an indefinite
        :class:`StoreError`, since the write may have gone through. Segment writes are not
        refused by :meth:`halt` (the writer stops its own, through its write intake).
        """
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            raise UsageError(f"attempts must be an int >= 1, got {attempts!r}")
        slot = segment_id
        while True:
            try:
                self._write_segment(slot, data, writer_epoch, attempts, retried, durable_floor)
                return slot
            except OlderSlot as taken:
                if not step_over_older:
                    raise
                log.info(
                    "journal.slot_stepped_over",
                    segment=slot,
                    found_epoch=taken.epoch,
                    epoch=writer_epoch,
                )
                slot += 1
                retried = False  # nothing of ours can be in the next slot yet
            except InkpenError:
                raise
            except Exception as caught:
                log.error("journal.segment_write_raised", segment=slot, error=repr(caught))
                raise StoreError(
                    f"writing journal segment {slot} raised {caught!r}",
                    definite=False,
                    key=segment_key(slot),
                ) from caught

    def _write_segment(
        self,
        segment_id: int,
        data: SegmentBytes,
        epoch: int,
        attempts: int,
        retried: bool,
        durable_floor: int | None,
    ) -> None:
        """The rounds of :meth:`write_segment` into one slot.

        An error answered means this call definitely wrote nothing (that error says why): only a
        definite failure of the very first round says so. After any round whose outcome was
        unknown, a later definite error (a refused create, a read of the slot failing) says
        nothing about this write, so giving up raises an indefinite :class:`StoreError`.
        """
        delay = SEGMENT_RETRY_FIRST
        last: StoreError | None = None
        for attempt in range(attempts):
            try:
                write_segment(
                    self.store,
                    segment_id,
                    data,
                    writer_epoch=epoch,
                    retried=retried or attempt > 0,
                    durable_floor=durable_floor,
                )
                return
            except StoreError as exc:
                if exc.definite and attempt == 0:
                    raise
                last = exc
            if attempt + 1 < attempts:
                time.sleep(delay)
                delay = min(SEGMENT_RETRY_MAX, delay * 2)
        raise StoreError(
            f"the outcome of writing journal segment {segment_id} stayed unknown after "
            f"{attempts} attempts ({last})",
            definite=False,
            key=segment_key(segment_id),
        )

    def copy_file(
        self, descriptor: SstDescriptor | JournalFileDescriptor, source: ObjectStore
    ) -> None:
        """Store the file ``descriptor`` names, read from ``source`` (the store that holds it:
        another database's, a copy's or a backup's source), under the same name in this
        database's own store: a hard link on one local filesystem, a server-side copy on S3, a
        read and a write otherwise. Names are never reused, so the copy is that file.
        ``on_write`` is told the name first, as for :meth:`put`. Raises
        :class:`~inkpen.errors.NotFoundError` when ``source`` lacks the file."""
        name = descriptor.name
        if self._on_write is not None:
            self._on_write(name)
        self.store.copy(name, name, source=source)

    # -- reading ------------------------------------------------------------------------------

    def names(self, kind: FileKind) -> set[str]:
        """The names of every ``kind`` file this database's own store holds, whether a manifest
        names it or not (one listing)."""
        prefix, ours = (
            (LEDGER_PREFIX, is_sst_key)
            if kind == "sst"
            else (JOURNAL_FILES_PREFIX, is_journal_file_key)
        )
        return {info.key for info in self.store.list(prefix) if ours(info.key)}

    def exists(self, name: str) -> bool:
        """Whether this database's own store holds file ``name`` (a commit checks that every
        file it names is still there)."""
        try:
            self.store.head(name)
        except NotFoundError:
            return False
        return True

    def open_sst(self, descriptor: SstDescriptor) -> SstReader:
        """A reader of the SST ``descriptor`` names, from the store that holds it."""
        name = descriptor.name
        store = self.store_for(descriptor.root)
        return SstReader.open(
            name,
            descriptor.size,
            DirectFetch(store, name, self._on_disk(store, name, descriptor.size)),
            cache=self.block_cache,
            sqn_base=descriptor.sqn_base,
        )

    def _on_disk(self, store: ObjectStore, name: str, size: int) -> CachedObject | None:
        """File ``name`` of ``store`` through the disk cache, if there is one (SST and journal
        files only: immutable, see :mod:`inkpen.manifest.disk_cache`)."""
        disk = self.disk_cache
        return None if disk is None else disk.object(store, name, size)

    def open_journal(self, descriptor: JournalFileDescriptor) -> JournalReader:
        """A reader of the journal file ``descriptor`` names, from the store that holds it,
        through the journal cache when there is one."""
        name = descriptor.name
        store = self.store_for(descriptor.root)
        cache = self.journal_cache
        disk = self._on_disk(store, name, descriptor.size)
        fetch = (
            ChunkedFetch(store, name, descriptor.size, cache, self._chunk, disk)
            if cache is not None
            else DirectFetch(store, name, disk)
        )
        return JournalReader.open(
            name,
            descriptor.size,
            fetch,
            sqn_base=descriptor.sqn_base,
            index_cache=self.journal_index_cache,
        )

    def read(self, descriptor: SstDescriptor | JournalFileDescriptor) -> bytes:
        """The whole stored file ``descriptor`` names (a merge's input)."""
        return self.read_object(descriptor.name, root=descriptor.root)

    def read_range(self, name: str, start: int, end: int, *, root: str | None = None) -> bytes:
        """Bytes ``[start, end)`` of the stored file ``name`` of ``root`` (None: this database's
        own), clipped at its end (a merge reads its inputs a run at a time). Raises
        :class:`~inkpen.errors.NotFoundError` when absent."""
        return self.store_for(root).get_range(name, start, end)

    def local_path(self, name: str, *, root: str | None = None) -> str | None:
        """The file that holds ``name`` of ``root`` when its store is a local directory with
        nothing wrapped around it (which a process on this machine may read directly, as a
        merge's worker does), else None: read it through the store."""
        store = self.store_for(root)
        return store.path_of(name) if isinstance(store, LocalStore) else None

    def read_object(self, name: str, *, root: str | None = None) -> bytes:
        """The whole stored SST, journal file or segment ``name`` of ``root`` (None: this
        database's own), as stored, whatever a manifest says of it (``inkpen verify`` checks
        each object from one read). Raises :class:`~inkpen.errors.NotFoundError` when absent."""
        return self.store_for(root).get(name)

    @staticmethod
    def sst_in_memory(name: str, data: bytes, *, sqn_base: int = 0) -> SstReader:
        """A reader of SST ``name`` held whole in ``data`` (as :meth:`read_object` answers it);
        no cache, no store read."""
        return SstReader.open(
            name, len(data), lambda start, end: data[start:end], sqn_base=sqn_base
        )

    @staticmethod
    def journal_in_memory(name: str, data: bytes, *, sqn_base: int = 0) -> JournalReader:
        """A reader of journal file or segment ``name`` held whole in ``data`` (as
        :meth:`read_object` answers it); no cache, no store read."""
        return JournalReader.open(
            name, len(data), lambda start, end: data[start:end], sqn_base=sqn_base
        )

    def read_segment(self, segment_id: int) -> Segment | None:
        """One segment slot as stored, checked and decoded (its entries may be none: a fence);
        None when the slot is empty. No rule is applied: callers apply
        :class:`~inkpen.manifest.fencing.EpochRule` in id order."""
        key = segment_key(segment_id)
        try:
            data = self.store.get(key)
        except NotFoundError:
            return None
        header, entries = decode_journal(data, key)
        return Segment(segment_id, header.writer_epoch, len(data), tuple(entries))

    def read_segments(
        self,
        ids: Iterable[int],
        *,
        allow_missing: bool = False,
        missing_error: Callable[[str, Sequence[int]], Exception] = missing_segments_error,
    ) -> list[Segment]:
        """The segments ``ids`` (increasing) that the reader rule accepts and that hold entries,
        in id order (see the module docstring). One absent from the store raises
        ``missing_error(url, [id])``, or is passed over when ``allow_missing``."""
        store = self.store

        def read(segment_id: int) -> Segment | None:
            found = self.read_segment(segment_id)
            if found is None and not allow_missing:
                raise missing_error(store.url, [segment_id])
            return found

        wanted = list(ids)
        if not wanted:
            return []
        read_all = run_bounded(read, wanted, limit=concurrency(store))
        found = [s for s in read_all if s is not None]
        refs = (SegmentRef(s.id, s.size, s.writer_epoch) for s in found)
        accepted = {ref.id for ref in accepted_segments(refs)}
        return [s for s in found if s.id in accepted and s.entries]

    # -- deleting -----------------------------------------------------------------------------

    def delete(self, name: str) -> None:
        """Delete one of this database's own files."""
        self.store.delete(name)
