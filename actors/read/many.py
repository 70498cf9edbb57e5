"""Multi-get: the values of many keys from one set of views, their reads batched.

:func:`read_values` answers exactly what a loop of GETs (:func:`~.path.read_value`) over one
consistent state would answer, in the order asked, in three steps:

1. Ledger. Every distinct key is looked up in key order: the Bookie's cache and the Penciller's
   memory first, then each ledger file in the order a GET visits them (L0 newest first, then
   each level). In one file, the keys still unresolved that its key range and bloom filter
   admit are grouped by data block: each block is read (if not cached) and decoded once for all
   its keys, and the blocks not in the cache are read concurrently.
   A live key whose small value the ledger keeps (option ``inline_value_bytes``) is answered
   here and goes no further.
2. Placement. Each other live key's SQN is placed in the journal view: an unrolled segment answers
   from memory; in a journal file the block holding the SQN is located from the block index
   (the record, from a version 1 file's hash region; no read), and a block the journal cache
   holds is answered from there.
3. Reads. The other blocks of each journal file, in offset order, are joined into ranged reads
   (records at most :data:`MANY_GAP` apart, at most :data:`MANY_RUN` bytes a read; a record
   above :data:`MANY_LARGE` is read alone, as a GET reads it), and the reads run concurrently.
   Each record is checked (lengths, CRC, key, kind) as a GET checks it and offered to the
   journal cache as a GET's record-sized read would be.

Reads run in the calling thread while they are fast (a local directory: threads would cost more
than they save); once two in a row take longer than :data:`MANY_SLOW_READ` (round trips to an
object store), the rest run concurrently on one small pool shared by the process
(:data:`MANY_READERS` threads, the calling thread taking a share too).

Memory is bounded: records are placed and read :data:`MANY_WINDOW` at a time, and a group holds
one read's bytes at a time, so at most :data:`MANY_READERS` reads of at most :data:`MANY_RUN`
bytes (or one large value each) are in flight; beyond that a call holds its answer.

Vanished files. A read that finds a journal file gone (a compaction replaced it after the views
were taken) places its records again in fresh journal views: an SQN's entry never changes, so
the answer is the one the first views would have given. A key whose SQN no journal view holds
any longer (overwritten, and the old entry compacted away), or a ledger file gone, starts the
whole call again from fresh views (one consistent state for every key); after
:data:`~.path.READ_ATTEMPTS` tries it raises what a GET raises.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from inkpen.actors.kernel.views import CacheView, JournalView, LedgerView, Level
from inkpen.actors.read.path import READ_ATTEMPTS, ViewSource, is_live, place_records, values_of
from inkpen.errors import CorruptionError, NotFoundError
from inkpen.formats.bloom import bloom_hash
from inkpen.formats.journal import JournalReader, Kind
from inkpen.formats.keys import LedgerValue
from inkpen.formats.sst import SstReader

MANY_WINDOW = 4096
"""Records placed and read together; bounds the memory a very large call holds in flight."""
MANY_GAP = 8 * 1024
"""The largest run of unwanted journal bytes one read reads through to join two records."""
MANY_RUN = 1024 * 1024
"""The largest read that joins several records."""
MANY_LARGE = 64 * 1024
"""Records above this size are read alone, through the journal cache as a GET reads them."""
MANY_READERS = 8
"""Threads of the shared read pool, and the most groups one call spreads its reads over."""
MANY_SLOW_READ = 0.001
"""Seconds: two reads in a row slower than this (round trips, not local reads) spread the rest."""

_OBJECT = Kind.OBJECT
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    """The process's read pool, made on first use (and again in a forked child, whose copy of
    the parent's pool has no threads)."""
    global _pool
    found = _pool
    pid = os.getpid()
    if found is None or found[0] != pid:
        with _pool_lock:
            found = _pool
            if found is None or found[0] != pid:
                found = (pid, ThreadPoolExecutor(MANY_READERS, thread_name_prefix="inkpen-read"))
                _pool = found
    return found[1]


def _run_group(tasks: Sequence[Callable[[], None]]) -> None:
    for task in tasks:
        task()


def run_concurrently(tasks: Sequence[Callable[[], None]]) -> None:
    """Run ``tasks`` (each does its own I/O) and return when all have finished; re-raise the
    first failure.

    They run one after another in the calling thread while reads are fast (a local directory
    or a cache: threads would cost more than they save); once two in a row have each taken
    longer than :data:`MANY_SLOW_READ` (round trips to an object store; one slow read alone may
    be a busy machine), the rest are spread over at most :data:`MANY_READERS` groups, one run
    by the calling thread and the others on the shared pool."""
    count = len(tasks)
    slow = 0
    i = 0
    while i < count:
        started = time.perf_counter()
        tasks[i]()
        i += 1
        slow = slow + 1 if time.perf_counter() - started > MANY_SLOW_READ else 0
        if slow >= 2 and count - i > 1:
            _spread(tasks[i:])
            return


def _spread(tasks: Sequence[Callable[[], None]]) -> None:
    groups = [tasks[i::MANY_READERS] for i in range(min(MANY_READERS, len(tasks)))]
    futures: list[Future[None]] = []
    pool = _shared_pool()
    for group in groups[1:]:
        try:
            futures.append(pool.submit(_run_group, group))
        except RuntimeError:  # the interpreter is shutting down: no new threads
            _run_group(group)
    failure: BaseException | None = None
    try:
        _run_group(groups[0])
    except BaseException as exc:
        failure = exc
    for future in futures:
        try:
            future.result()
        except BaseException as exc:
            if failure is None:
                failure = exc
    if failure is not None:
        raise failure


# -- step 1: the ledger ---------------------------------------------------------------------


def ledger_values(
    cache: CacheView, ledger: LedgerView, keys: list[bytes]
) -> list[LedgerValue | None]:
    """The newest ledger value (possibly a tombstone) of each of ``keys`` (sorted, distinct),
    as :func:`~.path.lookup` answers it key by key."""
    values: list[LedgerValue | None] = [None] * len(keys)
    pending: list[int] = []
    mem = ledger.mem
    for at, key in enumerate(keys):
        value = cache.get(key)
        if value is None:
            for table in mem:
                value = table.entries.get(key)
                if value is not None:
                    break
        if value is None:
            pending.append(at)
        else:
            values[at] = value
    if not pending:
        return values
    hashes: dict[int, int] = {}
    for handle in ledger.l0_files:
        pending = _search(keys, hashes, pending, values, Level.of((handle,)))
        if not pending:
            return values
    for level in ledger.levels:
        if level.files:
            pending = _search(keys, hashes, pending, values, level)
            if not pending:
                break
    return values


def _search(
    keys: list[bytes],
    hashes: dict[int, int],
    pending: list[int],
    values: list[LedgerValue | None],
    level: Level,
) -> list[int]:
    """Look the ``pending`` keys up in the files of ``level`` (an L0 file alone, or a level below
    L0), one task per data block;
    answer the keys still unresolved. A block the cache holds is searched at once for all its
    keys (no bloom probe); of a block it does not hold, only the keys the bloom filter admits
    are looked for, and those blocks are read concurrently. ``hashes`` keeps each key's bloom
    hash once computed."""
    groups: dict[tuple[int, int], tuple[SstReader, int, list[int]]] = {}
    first_keys, files = level.first_keys, level.files
    for at in pending:
        key = keys[at]
        i = bisect_right(first_keys, key) - 1  # Level.find written out: once per key
        if i < 0:
            continue
        reader = files[i].reader
        block = reader.block_of(key)
        if block is not None:
            groups.setdefault((id(reader), block), (reader, block, []))[2].append(at)
    if not groups:
        return pending
    uncached: list[Callable[[], None]] = []
    for reader, block, ats in groups.values():
        found = reader.get_in_block(block, [keys[at] for at in ats], cached_only=True)
        if found is not None:
            for at, value in zip(ats, found, strict=True):
                values[at] = value
            continue
        admitted = []
        for at in ats:
            key_hash = hashes.get(at)
            if key_hash is None:
                key_hash = hashes[at] = bloom_hash(keys[at])
            if reader.may_contain_hash(key_hash):
                admitted.append(at)
        if admitted:
            wanted = [keys[at] for at in admitted]
            uncached.append(partial(_search_block, reader, block, admitted, wanted, values))
    run_concurrently(uncached)
    return [at for at in pending if values[at] is None]


def _search_block(
    reader: SstReader,
    block: int,
    ats: list[int],
    wanted: list[bytes],
    values: list[LedgerValue | None],
) -> None:
    found = reader.get_in_block(block, wanted)
    assert found is not None
    for at, value in zip(ats, found, strict=True):
        values[at] = value


# -- steps 2 and 3: the journal --------------------------------------------------------------

Row = tuple[int, bytes]
"""A value wanted from the journal: its SQN and its ledger key."""
Record = tuple[int, int, int, bytes]
"""A located record: offset, length, its row's place in the window, its record key."""


class _Window:
    """The bodies of one window of rows from one journal view, and what vanished under it."""

    __slots__ = ("bodies", "gone", "vanished")

    def __init__(self, count: int) -> None:
        self.bodies: list[bytes | None] = [None] * count
        self.gone: set[int] = set()
        """Rows whose journal file was gone when read."""
        self.vanished: NotFoundError | None = None


def journal_bodies(journal: object, rows: list[Row]) -> _Window:
    """The object bodies of ``rows`` (sorted by SQN) from one journal lookup: a journal view, a
    snapshot's pair of views (the newer first, then the registered one for what the newer does
    not hold, as :func:`~.path.values_of` asks them), or anything else key by key."""
    if isinstance(journal, JournalView):
        return _view_bodies(journal, rows)
    current = getattr(journal, "current", None)
    registered = getattr(journal, "registered", None)
    if isinstance(current, JournalView) and isinstance(registered, JournalView):
        window = _view_bodies(current, rows)
        missing = [at for at, body in enumerate(window.bodies) if body is None]
        missing = [at for at in missing if at not in window.gone]
        if missing:
            older = _view_bodies(registered, [rows[at] for at in missing])
            for at, body in zip(missing, older.bodies, strict=True):
                window.bodies[at] = body
            window.gone.update(missing[at] for at in older.gone)
            window.vanished = older.vanished or window.vanished
        return window
    value_of = values_of(journal)  # type: ignore[arg-type]
    window = _Window(len(rows))
    for at, (sqn, key) in enumerate(rows):
        try:
            window.bodies[at] = value_of(sqn, _OBJECT, key)
        except NotFoundError as exc:
            window.gone.add(at)
            window.vanished = exc
    return window


def _view_bodies(journal: JournalView, rows: list[Row]) -> _Window:
    window = _Window(len(rows))
    bodies = window.bodies
    files = journal.files
    placed = place_records(journal, [(key, sqn) for sqn, key in rows], bodies)
    by_file: dict[int, list[Record]] = {}
    for index, records in placed.items():
        reader = files[index].reader
        for offset, length, at, record_key in records:
            record = reader.cached_record(offset, length)
            if record is not None:
                body = reader.body_of(record, record_key, offset)
                if body is not None:
                    bodies[at] = body
                    continue
            by_file.setdefault(index, []).append((offset, length, at, record_key))
    tasks: list[Callable[[], None]] = []
    for index, records in by_file.items():
        records.sort()
        reader = files[index].reader
        for run in _runs(records):
            tasks.append(partial(_read_run, reader, run, rows, window))
    run_concurrently(tasks)
    return window


def _runs(records: list[Record]) -> list[list[Record]]:
    """``records`` (sorted by offset) cut into reads: neighbours at most :data:`MANY_GAP` apart
    join, up to :data:`MANY_RUN` bytes a read; a record above :data:`MANY_LARGE` stands alone."""
    runs = []
    i = 0
    count = len(records)
    while i < count:
        offset, length = records[i][0], records[i][1]
        end = offset + length
        j = i + 1
        if length <= MANY_LARGE:
            while j < count:
                at, size = records[j][0], records[j][1]
                reach = max(end, at + size)
                if size > MANY_LARGE or at - end > MANY_GAP or reach - offset > MANY_RUN:
                    break
                end = reach
                j += 1
        runs.append(records[i:j])
        i = j
    return runs


def _read_run(reader: JournalReader, run: list[Record], rows: list[Row], window: _Window) -> None:
    """Read one run's records and set their rows' bodies; a file gone marks its rows gone."""
    bodies = window.bodies
    try:
        first_offset, first_length, first_at, _ = run[0]
        if first_length > MANY_LARGE:  # alone, through the cache, exactly as a GET reads it
            sqn, key = rows[first_at]
            bodies[first_at] = reader.value(sqn, _OBJECT, key)
            return
        end = max(offset + length for offset, length, _, _ in run)
        data = reader.read_records(first_offset, end)
        for offset, length, at, record_key in run:
            rel = offset - first_offset
            record = data if rel == 0 and length == len(data) else data[rel : rel + length]
            body = reader.body_of(record, record_key, offset)
            if body is None:  # another key that hashes alike: the slower probe finds the right one
                sqn, key = rows[at]
                body = reader.value(sqn, _OBJECT, key)
            else:
                reader.keep_record(offset, record)
            bodies[at] = body
    except NotFoundError as exc:
        window.gone.update(at for _, _, at, _ in run)
        window.vanished = exc


def _read_rows(
    source: ViewSource, journal: object, rows: list[Row], found: dict[bytes, bytes | None]
) -> Row | None:
    """Fill ``found`` with the bodies of ``rows`` (sorted by SQN), window by window; rows whose
    file vanished are placed again in fresh journal views. Answers a row no view holds (the
    caller starts again from fresh views), else None."""
    for start in range(0, len(rows), MANY_WINDOW):
        wanted = rows[start : start + MANY_WINDOW]
        view = journal
        for _ in range(READ_ATTEMPTS):
            window = journal_bodies(view, wanted)
            for at, body in enumerate(window.bodies):
                if body is not None:
                    found[wanted[at][1]] = body
                elif at not in window.gone:
                    return wanted[at]
            if not window.gone:
                break
            wanted = [wanted[at] for at in sorted(window.gone)]
            view = source.views()[2]
        else:
            assert window.vanished is not None
            raise window.vanished  # files kept vanishing: a missing object, never corruption
    return None


def read_values(source: ViewSource, keys: list[bytes], now_ms: int) -> list[bytes | None]:
    """GET of many keys from one set of views (one consistent state), in the order of ``keys``
    (repeats answered alike), None where a key is absent, deleted or expired."""
    distinct = sorted(set(keys))
    missing: Row | None = None
    vanished: NotFoundError | None = None
    for _ in range(READ_ATTEMPTS):
        cache, ledger, journal = source.views()
        found: dict[bytes, bytes | None] = {}
        try:
            if isinstance(ledger, LedgerView):
                values = ledger_values(cache, ledger, distinct)
            else:
                values = [cache.get(key) or ledger.get(key) for key in distinct]
            rows: list[Row] = []
            for key, value in zip(distinct, values, strict=True):
                if value is None or not is_live(value, now_ms):
                    found[key] = None
                elif len(value) > 6:
                    found[key] = value[6]  # a small value, kept in the ledger
                else:
                    rows.append((value[0], key))
            rows.sort()
            absent = _read_rows(source, journal, rows, found)
        except NotFoundError as exc:
            vanished = exc
            continue
        if absent is None:
            return [found[key] for key in keys]
        missing = absent
    if missing is None and vanished is not None:
        raise vanished  # files kept vanishing: a missing object, never corruption
    assert missing is not None
    raise CorruptionError(
        "journal",
        f"the ledger names SQN {missing[0]} for key {missing[1]!r} but no journal object holds it",
    )


__all__ = ["ledger_values", "read_values", "run_concurrently"]
