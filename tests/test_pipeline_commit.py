"""The bulk-load protocol without Spark: task files, SQN bases, the one-CAS commit, fencing.

These drive the very functions Spark's tasks and driver call (``write_partition`` per task,
``commit_load`` on the driver) on every store kind, so the protocol's edges (retried attempts,
a live writer, files GC took, bad rows) are tested where they can be reached deterministically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest

import inkpen
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import Manifest
from inkpen.manifest.paths import JOURNAL_FILES_PREFIX, LEDGER_PREFIX
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.pipeline import LoadedPartition, commit_load, write_partition
from inkpen.pipeline.options import LoadOptions
from inkpen.pipeline.schema import LoadColumns
from inkpen.pipeline.target import LoadTarget, prepare_load
from support.engine import RacingWriters

COLUMNS = LoadColumns(bucket="bucket", key="key", value="value", indexes="indexes", ttl="ttl")
INDEX_TYPE = pa.list_(
    pa.struct([("op", pa.string()), ("field", pa.string()), ("term", pa.string())])
)

Row = tuple[str, str, bytes] | tuple[str, str, bytes, list[dict[str, str]] | None, float | None]


def batch(rows: Sequence[Row]) -> pa.RecordBatch:
    full = [(*row, None, None) if len(row) == 3 else row for row in rows]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in full], pa.string()),
            pa.array([r[1] for r in full], pa.string()),
            pa.array([r[2] for r in full], pa.binary()),
            pa.array([r[3] for r in full], INDEX_TYPE),
            pa.array([r[4] for r in full], pa.float64()),
        ],
        names=["bucket", "key", "value", "indexes", "ttl"],
    )


def target(url: str, *, file_bytes: int = 64 * 1024) -> LoadTarget:
    return prepare_load(LoadOptions(url, sst_bytes=file_bytes, journal_bytes=file_bytes), COLUMNS)


def load(
    url: str, partitions: Sequence[Sequence[Row]], *, file_bytes: int = 64 * 1024
) -> inkpen.pipeline.LoadReport | None:
    aim = target(url, file_bytes=file_bytes)
    parts = [
        write_partition(aim, [batch(rows)], partition_id=i, attempt=0)
        for i, rows in enumerate(partitions)
    ]
    return commit_load(url, parts)


def everything(url: str) -> dict[tuple[bytes, bytes], bytes]:
    with inkpen.open_reader(url) as reader:
        return {(b, k): v for b, k, v in reader.objects()}


def latest(url: str) -> Manifest:
    store = open_store(url)
    try:
        found = ManifestStore(store).latest()
        assert found is not None
        return found.manifest
    finally:
        store.close()


def stored_files(url: str) -> set[str]:
    store = open_store(url)
    try:
        return {
            info.key
            for prefix in (LEDGER_PREFIX, JOURNAL_FILES_PREFIX)
            for info in store.list(prefix)
        }
    finally:
        store.close()


def test_within_a_task_the_last_row_wins_and_across_tasks_the_higher_partition(
    store_url: str,
) -> None:
    aim = target(store_url)
    rows_0 = [("b", "k1", b"p0-first"), ("b", "k2", b"p0"), ("b", "k1", b"p0-last")]
    rows_1 = [("b", "k2", b"p1"), ("b", "k3", b"p1")]
    # Partition 1 finishes first and its message comes first: the commit orders by partition.
    second = write_partition(aim, [batch(rows_1)], partition_id=1, attempt=0)
    first = write_partition(aim, [batch(rows_0)], partition_id=0, attempt=0)
    report = commit_load(store_url, [second, first])
    assert report is not None
    assert (report.rows, report.first_sqn, report.last_sqn) == (5, 1, 5)
    assert everything(store_url) == {
        (b"b", b"k1"): b"p0-last",
        (b"b", b"k2"): b"p1",
        (b"b", b"k3"): b"p1",
    }
    with inkpen.open_reader(store_url) as reader:
        heads = {key: reader.head("b", key) for key in ("k1", "k2", "k3")}
    assert all(head is not None for head in heads.values())
    assert heads["k1"].sqn < heads["k2"].sqn < heads["k3"].sqn  # type: ignore[union-attr]


def test_a_load_is_one_version_with_files_in_ledger_order(store_url: str) -> None:
    partitions = [
        [("bulk", f"key-{n:05d}", f"{part}:{n}".encode() * 8) for n in range(part, 1500, 3)]
        for part in range(3)
    ]
    report = load(store_url, partitions, file_bytes=4096)
    assert report is not None
    assert report.journal_files > 3 and report.ssts > 3  # every task rolled its files
    manifest = latest(store_url)
    assert manifest.ledger.persisted_sqn == report.last_sqn == 1500
    l0 = manifest.ledger.levels[0]
    assert [sst.sqn_base for sst in l0] == sorted((sst.sqn_base for sst in l0), reverse=True)
    assert all(f.in_ledger and f.sqn_base in (0, 500, 1000) for f in manifest.journal.files)
    assert not any(cp.kind == "writer" for cp in manifest.checkpoints)
    expected = {
        (b"bulk", f"key-{n:05d}".encode()): f"{n % 3}:{n}".encode() * 8 for n in range(1500)
    }
    assert everything(store_url) == expected


def test_a_retried_attempt_is_loaded_once_and_gc_removes_the_other(store_url: str) -> None:
    aim = target(store_url)
    rows = [("b", f"k{n}", b"v%d" % n) for n in range(50)]
    failed = write_partition(aim, [batch(rows)], partition_id=0, attempt=0)
    retried = write_partition(aim, [batch(rows)], partition_id=0, attempt=1)
    assert set(failed.files).isdisjoint(retried.files)
    report = commit_load(store_url, [retried])
    assert report is not None and report.rows == 50
    assert len(everything(store_url)) == 50
    gc = run_gc(store_url, options=GcOptions(min_age=0.0, offline=True))
    data_files = {
        name for name in gc.deleted if name.startswith((LEDGER_PREFIX, JOURNAL_FILES_PREFIX))
    }
    assert data_files == set(failed.files)
    assert stored_files(store_url) == set(retried.files)
    assert len(everything(store_url)) == 50


def test_a_later_load_wins_over_an_earlier_one(store_url: str) -> None:
    first = load(store_url, [[("b", "shared", b"old"), ("b", "only-old", b"old")]])
    second = load(store_url, [[("b", "shared", b"new")]])
    assert first is not None and second is not None
    assert second.first_sqn == first.last_sqn + 1
    assert everything(store_url) == {(b"b", b"shared"): b"new", (b"b", b"only-old"): b"old"}


def test_the_load_fences_a_live_writer_and_keeps_its_acknowledged_writes(
    store_url: str,
) -> None:
    book = inkpen.open(store_url, ledger_cache_entries=100_000, l0_cache_entries=1_000_000)
    for n in range(20):
        book.put("app", f"persisted-{n}", b"in an SST")
    book.flush()  # these twenty reach an L0 file; what follows stays in journal and memory
    book.delete("app", "persisted-0")
    for n in range(20):
        book.put("app", f"recent-{n}", b"journal only", indexes=[("add", "tag_bin", f"t{n}")])
    book.put("shared", "k", b"from the writer")
    book.put("app", "expiring", b"gone soon", ttl=3600)

    report = load(
        store_url,
        [
            [
                (
                    "shared",
                    "k",
                    b"from the load",
                    [{"op": "add", "field": "tag_bin", "term": "l"}],
                    None,
                )
            ]
        ],
    )
    assert report is not None and report.tail_entries >= 43
    with pytest.raises(inkpen.FencedError):
        book.put("app", "after-the-load", b"refused")
    book.abandon()

    with inkpen.open(store_url) as again:
        assert again.get("app", "persisted-0") is None
        assert all(again.get("app", f"persisted-{n}") == b"in an SST" for n in range(1, 20))
        assert all(again.get("app", f"recent-{n}") == b"journal only" for n in range(20))
        assert again.get("app", "expiring") == b"gone soon"
        assert again.get("app", "after-the-load") is None
        assert again.get("shared", "k") == b"from the load"
        assert list(again.index_query("app", "tag_bin", "t5", "t6")) == [b"recent-5", b"recent-6"]
        assert list(again.index_query("shared", "tag_bin", "l", "l")) == [b"k"]
        again.put("app", "after-reopen", b"written")  # the next writer numbers above the load
        assert again.head("app", "after-reopen").sqn > report.last_sqn  # type: ignore[union-attr]
        again.compact_ledger()  # merges keep the newest SQN per key, as reads do
        assert again.get("shared", "k") == b"from the load"
        assert again.get("app", "persisted-0") is None
    with inkpen.open(store_url) as third:
        assert third.get("app", "after-reopen") == b"written"
        assert third.get("app", "recent-7") == b"journal only"


def test_writes_racing_a_load_commit_are_kept_or_refused(store_url: str) -> None:
    book = inkpen.open(store_url)
    writers = RacingWriters(book, 3, limit=100_000)
    writers.start()
    report = load(store_url, [[("bulk", f"k{n}", b"loaded") for n in range(200)]])
    writers.join()
    book.abandon()
    assert report is not None and len(writers.refused) == 3
    found = everything(store_url)
    acknowledged = writers.acknowledged
    assert {k.decode() for (b, k) in found if b == b"race"} == set(acknowledged)
    assert all(found[(b"race", key.encode())] == key.encode() for key in acknowledged)
    assert sum(1 for (b, _) in found if b == b"bulk") == 200


def test_the_commit_refuses_files_gc_has_taken(store_url: str) -> None:
    aim = target(store_url)
    part = write_partition(aim, [batch([("b", "k", b"v")])], partition_id=0, attempt=0)
    store = open_store(store_url)
    try:
        store.delete(part.ssts[0].name)
        before = ManifestStore(store).latest()
    finally:
        store.close()
    with pytest.raises(inkpen.UsageError, match="min_age"):
        commit_load(store_url, [part])
    store = open_store(store_url)
    try:
        after = ManifestStore(store).latest()
    finally:
        store.close()
    assert before == after  # not even the writer epoch moved


def bad_rows() -> list[tuple[list[Row], str]]:
    return [
        ([("b", "k", b"v"), ("b", "", b"v")], r"row 1 of partition 7.*key must not be empty"),
        (
            [("b", "k", b"v", [{"op": "drop", "field": "f", "term": "t"}], None)],
            "operation 'drop' must be",
        ),
        ([("b", "k", b"v", None, -5.0)], "ttl must be a positive number"),
    ]


@pytest.mark.parametrize("case", range(3), ids=["empty-key", "bad-index-op", "negative-ttl"])
def test_a_bad_row_fails_its_task_naming_it_and_writes_nothing(store_url: str, case: int) -> None:
    rows, message = bad_rows()[case]
    with pytest.raises(inkpen.UsageError, match=message):
        write_partition(target(store_url), [batch(rows)], partition_id=7, attempt=0)
    assert stored_files(store_url) == set()


def test_a_null_key_is_refused_by_name(store_url: str) -> None:
    nulls = pa.RecordBatch.from_arrays(
        [pa.array(["b"]), pa.array([None], pa.string()), pa.array([b"v"])],
        names=["bucket", "key", "value"],
    )
    columns = LoadColumns(bucket="bucket", key="key", value="value")
    aim = prepare_load(LoadOptions(store_url), columns)
    with pytest.raises(inkpen.UsageError, match=r"row 0 of partition 0.*key is null"):
        write_partition(aim, [nulls], partition_id=0, attempt=0)


def test_a_load_without_rows_changes_nothing(store_url: str) -> None:
    aim = target(store_url)
    empty = write_partition(aim, [], partition_id=0, attempt=0)
    before = latest(store_url)
    assert commit_load(store_url, [empty]) is None
    assert latest(store_url) == before


def test_a_failed_task_cannot_be_committed(store_url: str) -> None:
    aim = target(store_url)
    done = write_partition(aim, [batch([("b", "k", b"v")])], partition_id=0, attempt=0)
    parts: list[LoadedPartition | None] = [done, None]
    with pytest.raises(inkpen.InkpenError, match="failed task"):
        commit_load(store_url, parts)


def test_a_restored_backup_rebuilds_the_loaded_ledger_from_the_journal(
    store_url: str, make_store_url: Callable[[str], str], store_kind: str
) -> None:
    rows: list[Any] = [
        ("b", f"k{n}", b"v%d" % n, [{"op": "add", "field": "f_bin", "term": f"t{n % 5}"}], None)
        for n in range(60)
    ]
    rows.append(("b", "k3", b"replaced", [{"op": "remove", "field": "f_bin", "term": "t3"}], None))
    load(store_url, [rows[:30], rows[30:]])
    destination = make_store_url(store_kind)
    with inkpen.open(store_url) as book:
        backup = book.hot_backup()
        backup(destination)
        expected_index = list(book.index_query("b", "f_bin", "t3", "t3"))
    assert b"k3" not in expected_index and len(expected_index) == 11
    assert everything(destination) == everything(store_url)
    with inkpen.open(destination) as restored:
        assert list(restored.index_query("b", "f_bin", "t3", "t3")) == expected_index


def test_a_load_id_already_committed_commits_nothing_again(store_url: str) -> None:
    aim = target(store_url)

    def attempt(value: bytes) -> list[LoadedPartition | None]:
        rows: list[Row] = [("b", f"k{i}", value) for i in range(20)]
        return [write_partition(aim, [batch(rows)], partition_id=0, attempt=0)]

    first = commit_load(store_url, attempt(b"first"), load_id="daily-1")
    assert first is not None and first.rows == 20
    record = latest(store_url).load("daily-1")
    assert record is not None and (record.rows, record.first_sqn, record.last_sqn) == (20, 1, 20)
    before = latest(store_url)
    assert commit_load(store_url, attempt(b"again"), load_id="daily-1") is None
    assert latest(store_url) == before  # no claim, no fence, no change
    assert set(everything(store_url).values()) == {b"first"}
    assert commit_load(store_url, attempt(b"second"), load_id="daily-2") is not None
    assert set(everything(store_url).values()) == {b"second"}
    assert [r.load_id for r in latest(store_url).loads] == ["daily-1", "daily-2"]


def test_a_manifest_keeps_the_most_recent_load_ids() -> None:
    from inkpen.manifest.model import MAX_LOAD_RECORDS, LoadRecord, decode, encode

    manifest = Manifest()
    for i in range(MAX_LOAD_RECORDS + 5):
        manifest = manifest.with_load(LoadRecord(f"load-{i}", 1.0 + i, 1, i + 1, i + 1))
    kept = [r.load_id for r in manifest.loads]
    assert kept == [f"load-{i}" for i in range(5, MAX_LOAD_RECORDS + 5)]
    assert manifest.load("load-4") is None and manifest.load("load-5") is not None
    assert decode(encode(manifest), "m").loads == manifest.loads
    with pytest.raises(inkpen.UsageError, match="load_id must be a non-empty str"):
        LoadRecord("", 1.0, 1, 1, 1)
