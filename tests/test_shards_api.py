"""The ShardedBookie's whole API against a model (a dict per shard): merge, one-shard
transactions, snapshots, data-set checkpoints and open_reader, hot backups, metrics and stats,
per-shard feeds, tails and feed cursors, maintenance, tictac trees, head-only data sets; on a
local directory and on SeaweedFS where the store matters, on memory where it does not."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import pytest

import inkpen
from inkpen import Bookie, shards
from inkpen.anti_entropy import compare_stores
from inkpen.errors import ConflictError, NotFoundError, UsageError
from inkpen.manifest.checkpoints import list_checkpoints
from inkpen.manifest.model import Checkpoint
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store

MakeUrl = Callable[[str], str]
Key = tuple[bytes, bytes]
SHARDS = 3


def _add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return str(int(existing or b"0") + sum(int(o) for o in operands)).encode()


OPERATORS = {"add": _add}


class Model:
    """What a data set should hold: one dict per shard, (bucket, key) -> value."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.shards: list[dict[tuple[bytes, bytes], bytes]] = [{} for _ in range(count)]

    def _of(self, bucket: str, key: str) -> tuple[dict[tuple[bytes, bytes], bytes], Key]:
        held = self.shards[shards.shard_of(bucket, key, self.count)]
        return held, (bucket.encode(), key.encode())

    def put(self, bucket: str, key: str, value: bytes) -> None:
        held, where = self._of(bucket, key)
        held[where] = value

    def delete(self, bucket: str, key: str) -> None:
        held, where = self._of(bucket, key)
        held.pop(where, None)

    def get(self, bucket: str, key: str) -> bytes | None:
        held, where = self._of(bucket, key)
        return held.get(where)

    def merged(self) -> list[tuple[bytes, bytes, bytes]]:
        return sorted((b, k, v) for held in self.shards for (b, k), v in held.items())


def key_in(shard: int, count: int = SHARDS, bucket: str = "b", prefix: str = "k") -> str:
    """The first key ``prefix<i>`` of ``bucket`` that routes to ``shard``."""
    return next(
        k for i in range(10_000) if shards.shard_of(bucket, (k := f"{prefix}{i}"), count) == shard
    )


def _fill(book: shards.ShardedBookie, model: Model, keys: int = 24, bucket: str = "b") -> None:
    for i in range(keys):
        value = f"value-{i}".encode()
        book.put(bucket, f"k{i:03d}", value)
        model.put(bucket, f"k{i:03d}", value)


def _held(url: str, shard: int) -> dict[tuple[bytes, bytes], bytes]:
    with inkpen.open_reader(shards.shard_url(url, shard)) as reader:
        return {(b, k): v for b, k, v in reader.objects()}


def _check(url: str, model: Model) -> None:
    """Every shard holds exactly its part of the model."""
    for index in range(model.count):
        assert _held(url, index) == model.shards[index], f"shard {index}"


@pytest.fixture
def data_set(durable_store_url: str) -> Iterator[tuple[str, shards.ShardedBookie, Model]]:
    shards.create(durable_store_url, shards=SHARDS)
    model = Model(SHARDS)
    with shards.open(durable_store_url, merge_operators=OPERATORS) as book:
        yield durable_store_url, book, model


# -- writes -----------------------------------------------------------------------------------


def test_merge_is_routed_to_the_shard_of_its_key(
    data_set: tuple[str, shards.ShardedBookie, Model],
) -> None:
    url, book, model = data_set
    counters = [f"c{i}" for i in range(9)]
    for round_ in range(3):
        for n, key in enumerate(counters):
            book.merge("counters", key, str(n + round_).encode(), operator="add")
            total = int(model.get("counters", key) or b"0") + n + round_
            model.put("counters", key, str(total).encode())
    assert book.get_many("counters", counters) == [model.get("counters", k) for k in counters]
    with pytest.raises(UsageError, match="merge operator 'nope' is not known"):
        book.merge("counters", "c0", b"1", operator="nope")
    batch = inkpen.Batch().merge("counters", "c0", b"100", operator="add")
    book.write(batch)  # a batch's merge is routed and checked as a merge
    model.put("counters", "c0", str(int(model.get("counters", "c0") or b"0") + 100).encode())
    book.flush()
    _check(url, model)


def test_a_transaction_lives_in_the_shard_of_its_first_key(
    data_set: tuple[str, shards.ShardedBookie, Model],
) -> None:
    url, book, model = data_set
    _fill(book, model)
    written = [f"k{i:03d}" for i in range(24)]
    first, same = [k for k in written if shards.shard_of("b", k, SHARDS) == 1][:2]
    other = next(k for k in written if shards.shard_of("b", k, SHARDS) == 2)
    with book.transaction() as txn:
        assert txn.shard is None and txn.state == "open"
        with pytest.raises(UsageError, match="no snapshot yet"):
            txn.snapshot_sqn  # noqa: B018
        value = txn.get("b", first)
        assert value == model.get("b", first) and txn.shard == 1
        assert txn.snapshot_sqn > 0
        txn.put("b", first, b"txn-" + (value or b""))
        txn.delete("b", same)
        with pytest.raises(
            UsageError, match=r"routes to shard 2, but this transaction is in shard 1"
        ) as refused:
            txn.put("b", other, b"x")
        assert first in str(refused.value)  # both shards named, and the key that chose
        with pytest.raises(UsageError, match="routes to shard 2"):
            txn.get_many("b", [first, other])
        assert txn.get_many("b", [first, same]) == [b"txn-" + (value or b""), None]
        assert book.get("b", first) == value  # nothing visible before the commit
    model.put("b", first, b"txn-" + (value or b""))
    model.delete("b", same)
    assert txn.state == "committed"
    with pytest.raises(UsageError, match="committed"):
        txn.put("b", first, b"late")
    # Conflicts are the shard's own: a write to the key after the snapshot fails the commit.
    racing = book.transaction()
    racing.get("b", first)
    racing.put("b", first, b"lost")
    book.put("b", first, b"won")
    model.put("b", first, b"won")
    with pytest.raises(ConflictError):
        racing.commit()
    # A transaction that touched no key commits nothing; one rolled back writes nothing.
    with book.transaction("serializable") as empty:
        pass
    assert empty.state == "committed"
    with pytest.raises(RuntimeError), book.transaction() as abandoned:
        abandoned.put("b", other, b"never")
        raise RuntimeError("rolled back")
    assert abandoned.state == "rolled back"
    with pytest.raises(UsageError, match="isolation"):
        book.transaction("chaos")
    book.flush()
    _check(url, model)


def test_a_transaction_routed_to_a_shard_not_written_here_is_refused(
    make_store_url: MakeUrl,
) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=SHARDS)
    with shards.open(url, shards=[0]) as book:
        txn = book.transaction()
        with pytest.raises(UsageError, match="routes to shard 2, which this handle does not"):
            txn.put("b", key_in(2), b"x")
        assert txn.shard is None and book.opened_shards == frozenset()  # nothing opened
        txn.put("b", key_in(0), b"mine")
        txn.commit()
        assert book.get("b", key_in(0)) == b"mine"


def test_a_snapshot_is_one_view_per_shard_taken_together(
    data_set: tuple[str, shards.ShardedBookie, Model],
) -> None:
    _url, book, model = data_set
    _fill(book, model)
    before = model.merged()
    with book.snapshot() as snap:
        for i in range(24):
            book.put("b", f"k{i:03d}", b"after")
        book.put("b", "new", b"after")
        assert list(snap.objects()) == before
        assert list(snap.keys("b")) == [k for _b, k, _v in before]
        assert snap.get("b", "k000") == model.get("b", "k000") and snap.get("b", "new") is None
        assert snap.get_many("b", ["k001", "new"]) == [model.get("b", "k001"), None]
        for index in range(SHARDS):
            keys = [c.key for c in snap.changes(shard=index)]
            assert sorted(keys) == sorted(k for (_b, k) in model.shards[index])
    with pytest.raises(UsageError, match="snapshot is closed"):
        snap.get("b", "k000")
    with book.snapshot(ledger_only=True) as heads_only:
        assert list(heads_only.keys("b"))[:2] == [b"k000", b"k001"]
        with pytest.raises(UsageError, match="ledger_only"):
            heads_only.get("b", "k000")
        with pytest.raises(UsageError, match="ledger_only"):
            heads_only.objects()


def test_a_snapshot_of_shards_written_elsewhere_reads_them_at_a_checkpoint(
    make_store_url: MakeUrl,
) -> None:
    url = make_store_url("local")
    shards.create(url, shards=SHARDS)
    mine, theirs = key_in(0), key_in(2)
    with shards.open(url, shards=[0, 1]) as book, shards.open(url, shards=[2]) as other:
        book.put("b", mine, b"mine")
        other.put("b", theirs, b"theirs")
        with book.snapshot() as snap:
            other.put("b", theirs, b"later")
            assert snap.get("b", theirs) == b"theirs"  # the Reader's checkpoint, as it was
            assert snap.get("b", mine) == b"mine"
        with shards.open_reader(url) as reader:
            assert reader.get_many("b", [mine, theirs]) == [b"mine", b"later"]


# -- checkpoints ------------------------------------------------------------------------------


def test_a_data_set_checkpoint_is_one_per_shard_listed_read_and_deleted_together(
    data_set: tuple[str, shards.ShardedBookie, Model],
    make_store_url: MakeUrl,
    durable_kind: str,
) -> None:
    url, book, model = data_set
    _fill(book, model)
    pinned = Model(SHARDS)
    pinned.shards = [dict(held) for held in model.shards]
    checkpoint = book.checkpoint(600, name="nightly")
    book.put("b", "k000", b"after the checkpoint")
    book.delete("b", "k001")
    model.put("b", "k000", b"after the checkpoint")
    model.delete("b", "k001")
    (listed,) = book.checkpoints()
    assert (listed.id, listed.name, listed.complete) == (checkpoint, "nightly", True)
    assert [index for index, _cp in listed.checkpoints] == list(range(SHARDS))
    assert all(cp.id == checkpoint for _i, cp in listed.checkpoints)
    assert shards.list_checkpoints(url) == (listed,)
    for index in range(SHARDS):  # each shard read at its part of it
        with inkpen.open_reader(shards.shard_url(url, index), checkpoint=checkpoint) as reader:
            assert {(b, k): v for b, k, v in reader.objects()} == pinned.shards[index]
    for given in (checkpoint, "nightly"):
        with shards.open_reader(url, checkpoint=given) as reader:
            assert list(reader.objects()) == pinned.merged()
    copy = make_store_url(durable_kind)
    report = inkpen.backup(url, copy, checkpoint="nightly")
    assert isinstance(report, inkpen.DataSetCopyReport) and report.checkpoint == checkpoint
    _check(copy, pinned)
    book.delete_checkpoint("nightly")
    assert book.checkpoints() == ()
    with pytest.raises(NotFoundError, match="no data-set checkpoint"):
        shards.open_reader(url, checkpoint=checkpoint)
    with pytest.raises(UsageError, match="lifetime"):
        book.checkpoint(-1)


# -- hot backups ------------------------------------------------------------------------------


def test_a_hot_backup_copies_every_shard_into_a_data_set(
    data_set: tuple[str, shards.ShardedBookie, Model], make_store_url: MakeUrl, durable_kind: str
) -> None:
    url, book, model = data_set
    _fill(book, model)
    dest = make_store_url(durable_kind)
    backup = book.hot_backup()
    book.put("b", "later", b"after the backup was prepared")
    report = backup(dest)
    assert len(report.shards) == SHARDS and report.files == sum(r.files for r in report.shards)
    assert shards.read_descriptor(dest) == shards.read_descriptor(url)
    with shards.open(dest) as copy:
        assert list(copy.objects()) == model.merged()
    with pytest.raises(UsageError, match="already taken"):
        backup(dest)
    model.put("b", "later", b"after the backup was prepared")
    again = book.hot_backup()
    second = again(dest)  # into the same place: only new files are copied
    assert second.files_kept > 0
    with shards.open(dest) as copy:
        assert list(copy.objects()) == model.merged()


def test_a_hot_backup_of_shards_written_elsewhere_copies_them_at_a_checkpoint(
    make_store_url: MakeUrl,
) -> None:
    url, dest = make_store_url("local"), make_store_url("local")
    shards.create(url, shards=SHARDS)
    model = Model(SHARDS)
    with shards.open(url) as writer:
        _fill(writer, model)
    with shards.open(url, shards=[0]) as book:
        with book.hot_backup() as backup:
            held = {index: [cp.kind for cp in _checkpoints(url, index)] for index in (1, 2)}
            assert all("hot-backup" in kinds for kinds in held.values())  # pinned meanwhile
            backup(dest)
        assert all(
            "hot-backup" not in [cp.kind for cp in _checkpoints(url, i)] for i in (1, 2)
        )  # and let go
    _check(dest, model)
    # A backup closed without being taken lets its checkpoints go too.
    with shards.open(url, shards=[0]) as book:
        book.hot_backup().close()
        assert all("hot-backup" not in [cp.kind for cp in _checkpoints(url, i)] for i in (1, 2))


def _checkpoints(url: str, index: int) -> tuple[Checkpoint, ...]:
    with open_store(shards.shard_url(url, index)) as store:
        return list_checkpoints(ManifestStore(store))


# -- metrics, stats, maintenance -----------------------------------------------------------------


def test_metrics_are_the_sum_of_the_opened_shards_and_per_shard(make_store_url: MakeUrl) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=SHARDS)
    model = Model(SHARDS)
    with shards.open(url) as book:
        assert book.metrics().puts == 0 and book.opened_shards == frozenset()
        _fill(book, model, keys=30)
        for i in range(10):
            book.get("b", f"k{i:03d}")
        per_shard = [book.metrics(shard=i) for i in range(SHARDS)]
        assert [m.puts for m in per_shard] == [len(held) for held in model.shards]
        total = book.metrics()
        assert total.puts == 30 and total.gets == 10
        assert total.last_sqn == sum(m.last_sqn for m in per_shard) == 30
        assert total.put_seconds.count == 30
        assert total.put_seconds.counts == tuple(
            sum(col) for col in zip(*(m.put_seconds.counts for m in per_shard), strict=True)
        )
        assert total.store_requests["put"] == sum(m.store_requests["put"] for m in per_shard)
        stats = book.stats()
        assert sorted(stats) == list(range(SHARDS))
        assert [stats[i]["sqn"] for i in range(SHARDS)] == [len(held) for held in model.shards]
        with pytest.raises(UsageError, match="a shard number of this data set"):
            book.metrics(shard=SHARDS)


def test_maintenance_runs_on_every_shard_written_here(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    shards.create(url, shards=SHARDS)
    model = Model(SHARDS)
    with shards.open(url) as writer:
        _fill(writer, model)
    with shards.open(url, shards=[0, 2]) as book:
        book.flush()
        book.compact_ledger()
        assert sorted(book.compact_journal()) == [0, 2]
        assert sorted(book.run_gc(min_age=0.0, dry_run=True)) == [0, 2]
        assert sorted(book.stats()) == [0, 2]
        assert book.opened_shards == frozenset({0, 2})  # shard 1 is its own writer's business
        with pytest.raises(UsageError, match="head-only"):
            book.trim_journal()
    _check(url, model)


def test_the_tictac_tree_of_a_data_set_is_a_database_s(make_store_url: MakeUrl) -> None:
    url, plain = make_store_url("memory"), make_store_url("memory")
    shards.create(url, shards=SHARDS)
    with shards.open(url) as book, inkpen.open(plain) as single:
        for i in range(40):
            book.put("b" if i % 2 else "c", f"k{i}", f"v{i}".encode())
            single.put("b" if i % 2 else "c", f"k{i}", f"v{i}".encode())
        assert book.tictac_tree() == single.tictac_tree()
        assert book.tictac_tree("b") == single.tictac_tree("b") != single.tictac_tree()
        book.put("b", "k1", b"changed")
        segments = book.tictac_tree().compare(single.tictac_tree())
        assert segments == [inkpen.TicTacTree.segment_of("b", "k1")]
        found = compare_stores(book, single)
        assert [(d.kind, d.key) for d in found.differences] == [("different", b"k1")]


def test_a_head_only_data_set_routes_mput_and_head_only_get(make_store_url: MakeUrl) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=SHARDS, head_only="with_lookup")
    with pytest.raises(UsageError, match="not head_only=None"):
        shards.create(url, shards=SHARDS)  # its mode is its own
    with shards.open(url, head_only="with_lookup") as book:
        mine = [k for k in (f"k{i}" for i in range(40)) if shards.shard_of("b", k, SHARDS) == 1]
        book.mput([("add", "b", k, "s", k.encode()) for k in mine[:3]])
        assert [book.head_only_get("b", k, "s") for k in mine[:3]] == [k.encode() for k in mine[:3]]
        with pytest.raises(UsageError, match="route to 2 shards"):
            book.mput([("add", "b", mine[0], "s", b"x"), ("add", "b", key_in(0), "s", b"y")])
        with pytest.raises(UsageError, match="head-only"):
            book.put("b", "k", b"v")
        assert sorted(book.trim_journal()) == list(range(SHARDS))
    with shards.open(url) as plain, pytest.raises(UsageError, match="mput writes head-only"):
        plain.mput([("add", "b", "k", "s", b"v")])


# -- feeds ------------------------------------------------------------------------------------


def test_changes_wait_tails_a_shard_written_here_and_wakes_on_its_commits(
    make_store_url: MakeUrl,
) -> None:
    url = make_store_url("local")
    shards.create(url, shards=SHARDS)
    with shards.open(url) as book:
        first, second = key_in(1, prefix="a"), key_in(1, prefix="z")
        book.put("b", first, b"1")
        seen: list[bytes] = []
        got_first = threading.Event()
        done = threading.Event()

        def tail() -> None:
            for change in book.changes(0, shard=1, wait=60):
                seen.append(change.key)
                got_first.set()
                if change.key == second.encode():
                    break
            done.set()

        thread = threading.Thread(target=tail)
        thread.start()
        assert got_first.wait(60)
        book.put("b", key_in(0), b"another shard: not in this feed")
        # a commit of shard 1 wakes the tail at once, even made through the shard's own Bookie
        own = book.shard(1)
        assert isinstance(own, Bookie)  # the writer of the data set writes each shard
        own.put("b", second, b"2")
        assert done.wait(60)  # well before the tail's 60 s of quiet
        thread.join()
        assert seen == [first.encode(), second.encode()]
        with pytest.raises(UsageError, match="wait"):
            book.changes(0, shard=1, wait=-1)


def test_changes_wait_follows_a_shard_written_elsewhere(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    shards.create(url, shards=2)
    theirs = key_in(1, count=2)
    with shards.open(url, shards=[0]) as book, shards.open(url, shards=[1]) as other:
        found: list[bytes] = []

        def tail() -> None:
            for change in book.changes(0, shard=1, wait=60):
                found.append(change.key)
                return

        thread = threading.Thread(target=tail)
        thread.start()
        other.put("b", theirs, b"theirs")
        book.refresh()  # the follower finds it now (else within its refresh interval)
        thread.join(60)
        assert not thread.is_alive() and found == [theirs.encode()]


def test_feed_cursors_are_per_shard(make_store_url: MakeUrl) -> None:
    url = make_store_url("memory")
    shards.create(url, shards=SHARDS)
    with shards.open(url, shards=[0, 1]) as book:
        for index in range(SHARDS):  # a manifest update: a shard written elsewhere has them too
            book.create_feed_cursor("exporter", 0, shard=index, owner="tests")
        book.put("b", key_in(1), b"v")
        moved = book.advance_feed_cursor("exporter", 1, shard=1)
        assert moved.sqn == 1
        assert [c.sqn for c in book.feed_cursors(shard=1)] == [1]
        assert [c.sqn for c in book.feed_cursors(shard=2)] == [0]
        book.delete_feed_cursor("exporter", shard=2)
        assert book.feed_cursors(shard=2) == ()
        with pytest.raises(NotFoundError):
            book.delete_feed_cursor("exporter", shard=2)
        with pytest.raises(UsageError, match="a shard number"):
            book.feed_cursors(shard=9)


def test_abandon_stops_every_shard_and_loses_nothing_acknowledged(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    shards.create(url, shards=SHARDS)
    model = Model(SHARDS)
    book = shards.open(url)
    _fill(book, model)
    book.abandon()
    assert book.closed
    with pytest.raises(UsageError, match="closed"):
        book.put("b", "k", b"v")
    with shards.open(url) as again:
        assert list(again.objects()) == model.merged()
