"""The paths that read, copy or check many independent objects send their requests together:
a hot backup's and a restore's copies, a clone's segment copies, the segment reads of an open
after a crash, verify's checks, GC's reads of pinned manifests, and the read-ahead of merges and
journal rewrites.

Each case holds the first few requests of its kind at a barrier of :class:`support.overlap.
OverlapStore` that opens only when they are all in flight at once (code that sent them one at a
time would break it), and checks the result against what was written. No timing is asserted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import inkpen
from inkpen.actors.kernel.compute import READ_CHUNK
from inkpen.actors.kernel.read_ahead import ReadAheadHost, journals_ahead
from inkpen.cli.verify import pinned, plan_checks, run_checks
from inkpen.formats.journal import JournalEntry, Kind
from inkpen.formats.sst import SstInfo
from inkpen.manifest.checkpoints import create_checkpoint
from inkpen.manifest.clones import create_clone
from inkpen.manifest.copies import copy_database
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.paths import manifest_key
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import CountingStore, open_store
from support.engine import TINY
from support.overlap import OverlapStore
from support.waiting import wait_until

PARTIES = 4
"""Requests that must be in flight together (the memory store's bound, the lowest)."""
KEYS = 200


def load(url: str, **options: object) -> dict[str, bytes]:
    """A database at ``url`` with many files (TINY options), closed; answers its contents."""
    model = {f"k{i:04d}": b"v%d" % i for i in range(KEYS)}
    with inkpen.open(url, **TINY, **options) as book:
        for key, value in model.items():
            book.put("b", key, value)
    return model


def contents(store: object) -> dict[str, bytes]:
    with inkpen.open(store, **TINY) as book:  # type: ignore[arg-type]
        return {k.decode(): v for _, k, v in book.objects("b")}


def test_a_hot_backup_copies_its_files_together(
    store_url: str, store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    model = load(store_url)
    dest = OverlapStore(open_store(make_store_url(store_kind)))
    dest.expect("copy", PARTIES)
    with inkpen.open(store_url, **TINY) as book:
        report = book.hot_backup()(dest)
    assert report.files_copied >= PARTIES
    assert dest.met == ["copy"]
    assert contents(dest) == model


def test_a_restore_copies_its_files_together(
    store_url: str, store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    model = load(store_url)
    dest = OverlapStore(open_store(make_store_url(store_kind)))
    dest.expect("copy", PARTIES)
    report = copy_database(open_store(store_url), dest, fresh=True)
    assert report.files_copied >= PARTIES
    assert dest.met == ["copy"]
    assert contents(dest) == model


def _crashed(url: str, puts: int) -> dict[str, bytes]:
    """A database whose writer stopped as a crash would, with ``puts`` unrolled segments."""
    book = inkpen.open(url, **{**TINY, "roll_segments": 10_000, "roll_bytes": 1 << 30})
    model = {f"s{i:03d}": b"w%d" % i for i in range(puts)}
    for key, value in model.items():
        book.put("b", key, value)  # one at a time: a segment each
    book.abandon()
    return model


def test_a_clone_copies_the_unrolled_segments_together(
    store_url: str, store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    model = _crashed(store_url, 12)
    clone = OverlapStore(open_store(make_store_url(store_kind)))
    clone.expect("copy", PARTIES, prefix="journal/")
    create_clone(open_store(store_url), clone)
    assert clone.met == ["copy"]
    assert contents(clone) == model


def test_an_open_after_a_crash_reads_the_segments_together(store_url: str) -> None:
    model = _crashed(store_url, 12)
    store = OverlapStore(open_store(store_url))
    store.expect("head", PARTIES, prefix="journal/0")  # the claim reads each segment's epoch
    store.expect("get", PARTIES, prefix="journal/0")  # then the segments themselves
    assert contents(store) == model
    assert store.met == ["head", "get"]


def test_verify_checks_its_objects_together(store_url: str) -> None:
    load(store_url)
    store = OverlapStore(open_store(store_url))
    store.expect("get", PARTIES, prefix="ledger/")
    manifests = ManifestStore(store)
    with pinned(manifests, None, False) as pin:
        outcomes = run_checks(manifests, plan_checks(manifests, pin, list_tail=False))
    assert outcomes and all(o.status.value == "ok" for o in outcomes)
    assert store.met == ["get"]


def test_gc_reads_the_manifests_checkpoints_pin_together(store_url: str) -> None:
    load(store_url)
    ms = ManifestStore(open_store(store_url))
    pins = []
    for _ in range(PARTIES):
        pins.append(manifest_key(create_checkpoint(ms, lifetime=3600).manifest_id))
        ms.update(lambda v: v.manifest.with_journal(v.manifest.journal))  # a newer version
    store = OverlapStore(open_store(store_url))
    store.expect("get", PARTIES, prefix=tuple(pins))
    report = run_gc(store, options=GcOptions(min_age=0, offline=True))
    assert store.met == ["get"]
    assert report.failed == {}


class _Host:
    """A merge host over a store: reads ranges, records each read."""

    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        self.reads: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        with self.lock:
            self.reads.append((name, start, end))
        return self.tables.read_range(name, start, end, root=root)

    def has_read(self, run: tuple[int, int]) -> bool:
        with self.lock:
            return ("ledger/input.sst", *run) in self.reads

    def emit(self, data: bytes, info: SstInfo) -> None:
        raise AssertionError("nothing is emitted here")

    def restart(self) -> None:
        pass


def test_a_merge_input_s_next_run_is_fetched_while_one_is_merged(store_url: str) -> None:
    store = open_store(store_url)
    data = bytes(range(256)) * (3 * READ_CHUNK // 256 + 7)
    store.put("ledger/input.sst", data)
    host = _Host(TableStore(store))
    ahead = ReadAheadHost(host, {("ledger/input.sst", None): len(data)})
    runs = [(i, min(len(data), i + READ_CHUNK)) for i in range(0, len(data), READ_CHUNK)]
    for (start, end), following in zip(runs, [*runs[1:], None], strict=True):
        assert ahead.read("ledger/input.sst", None, start, end) == data[start:end]
        if following is not None:  # the following run is asked of the store in the background
            wait_until(partial(host.has_read, following), "the following run to be read ahead")
    assert host.reads == [("ledger/input.sst", *run) for run in runs]  # each run read once
    # An ask that is not the run fetched ahead is read as asked.
    assert ahead.read("ledger/input.sst", None, 5, 9) == data[5:9]


def test_journal_files_read_whole_with_the_next_ones_on_their_way(store_url: str) -> None:
    counting = CountingStore(open_store(store_url))
    tables = TableStore(counting)
    files = []
    for n in range(4):
        entries = [
            JournalEntry(10 * n + i, Kind.OBJECT, b"k%d" % (10 * n + i), b"v", (), None, 0)
            for i in range(1, 6)
        ]
        files.append(tables.write_journal(entries, writer_epoch=1))
    counting.reset()
    readers = journals_ahead(tables, files, max_bytes=1)  # one file ahead at most
    first = next(readers)
    wait_until(lambda: counting.snapshot()["gets"] == 2, "the second file to be fetched ahead")
    seen = [e.sqn for e in first.iter_entries()]
    for reader in readers:
        seen += [e.sqn for e in reader.iter_entries()]
    assert seen == [10 * n + i for n in range(4) for i in range(1, 6)]
    assert counting.snapshot()["gets"] == 4  # one request per file
