"""Merge operators: counters and appends folded by the writer, checked against a model dict.

Values must read back folded everywhere: get, get_many, head, the objects folds, after a reopen,
after L0 flushes, ledger merges and journal compaction, through a snapshot, a checkpoint Reader
and a hot backup, and in the change feed. A database written with an operator refuses a writer
without it; an unknown operator, a bad operand, a bad option and an operator that fails or
answers something else than bytes are ``UsageError`` and change nothing.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import inkpen
from inkpen.manifest.clones import create_clone
from inkpen.manifest.model import Manifest, decode, encode
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.cli import ok
from support.engine import TINY

COUNTERS = "counters"
LOGS = "logs"
KEYS = [f"k{i}" for i in range(6)]


def add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    """A counter: the operands are decimal integers added to the value (absent: 0)."""
    total = int(existing or b"0")
    for operand in operands:
        total += int(operand)
    return str(total).encode()


def append(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    """An append: the operands are joined to the end of the value."""
    return (existing or b"") + b"".join(operands)


OPERATORS: dict[str, inkpen.MergeOperator] = {"add": add, "append": append}


class Model:
    """What every key must read as, written through ``book`` one change at a time."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.values: dict[tuple[str, str], bytes] = {}

    def step(self, book: inkpen.Bookie) -> None:
        rng = self.rng
        bucket = rng.choice((COUNTERS, LOGS))
        key = rng.choice(KEYS)
        roll = rng.random()
        if roll < 0.1:
            book.delete(bucket, key)
            self.values.pop((bucket, key), None)
        elif roll < 0.2:
            value = str(rng.randrange(1000)).encode() if bucket == COUNTERS else b"P"
            book.put(bucket, key, value)
            self.values[(bucket, key)] = value
        elif roll < 0.3:
            self.batch(book, bucket, key)
        else:
            self.merge(book, bucket, key)

    def merge(self, book: inkpen.Bookie, bucket: str, key: str) -> None:
        old = self.values.get((bucket, key))
        if bucket == COUNTERS:
            operand = str(self.rng.randrange(-5, 50)).encode()
            book.merge(bucket, key, operand, operator="add")
            self.values[(bucket, key)] = add(b"", old, [operand])
        else:
            operand = self.rng.randbytes(self.rng.choice((1, 8, 700)))
            book.merge(bucket, key, operand, operator="append")
            self.values[(bucket, key)] = append(b"", old, [operand])

    def batch(self, book: inkpen.Bookie, bucket: str, key: str) -> None:
        """A put then merges of one key in one batch: each merge folds onto the one before."""
        batch = inkpen.Batch()
        if bucket == COUNTERS:
            batch.put(bucket, key, b"7").merge(bucket, key, b"3", operator="add")
            batch.merge(bucket, key, b"-1", operator="add")
            self.values[(bucket, key)] = b"9"
        else:
            batch.merge(bucket, key, b"x", operator="append")
            batch.merge(bucket, key, b"y", operator="append")
            self.values[(bucket, key)] = self.values.get((bucket, key), b"") + b"xy"
        book.write(batch)

    def check(self, reader: Any, what: str) -> None:
        """Every key of both buckets reads as the model says through ``reader``'s API."""
        for bucket in (COUNTERS, LOGS):
            wanted = [self.values.get((bucket, key)) for key in KEYS]
            got = [reader.get(bucket, key) for key in KEYS]
            assert got == wanted, f"get, {what}"
            assert reader.get_many(bucket, KEYS) == wanted, f"get_many, {what}"
            for key, value in zip(KEYS, wanted, strict=True):
                head = reader.head(bucket, key)
                assert (head is None) == (value is None), f"head of {key}, {what}"
                if head is not None and value is not None:
                    assert head.size == len(value), f"head size of {key}, {what}"
            folded = {k.decode(): v for _, k, v in reader.objects(bucket)}
            model = {k: v for (b, k), v in self.values.items() if b == bucket}
            assert folded == model, f"objects fold, {what}"
            by_sqn = {k.decode(): v for _, k, v in reader.objects(bucket, order="sqn")}
            assert by_sqn == model, f"objects fold by SQN, {what}"


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_counters_and_appends_against_a_model(
    kind: str, make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    url = make_store_url(kind)
    model = Model(seed=11)
    options = {**TINY, "merge_operators": OPERATORS}
    with inkpen.open(url, **options) as book:
        for _ in range(120):
            model.step(book)
        model.check(book, "while writing")
        with book.snapshot() as snap:
            frozen = dict(model.values)
            for _ in range(40):
                model.step(book)
            now = dict(model.values)
            model.values = frozen
            model.check(snap, "through a snapshot taken before more merges")
            model.values = now
        checkpoint = book.checkpoint(600)
        at_checkpoint = dict(model.values)
        for _ in range(40):
            model.step(book)
        book.flush()
        book.compact_ledger()
        model.check(book, "after flush and ledger merges")
        report = book.compact_journal()
        assert report is not None
        model.check(book, "after journal compaction")
        backup = book.hot_backup()
        backup(make_store_url(kind))
        latest = dict(model.values)
        with inkpen.open_reader(url, checkpoint=checkpoint) as reader:
            model.values = at_checkpoint
            model.check(reader, "through a checkpoint Reader")
            model.values = latest
    with inkpen.open_reader(url) as reader:  # a Reader needs no operator: values are folded
        model.check(reader, "through a Reader of the latest state")
    with inkpen.open(url, **options) as book:
        model.check(book, "after reopening")
        for _ in range(30):
            model.step(book)
        model.check(book, "after merging again")


def test_a_hot_backup_holds_folded_values(make_store_url: Callable[[str], str]) -> None:
    url, dest = make_store_url("local"), make_store_url("local")
    model = Model(seed=5)
    with inkpen.open(url, **TINY, merge_operators=OPERATORS) as book:
        for _ in range(60):
            model.step(book)
        book.hot_backup()(dest)
    with inkpen.open(dest, merge_operators=OPERATORS) as copy:
        model.check(copy, "in a hot backup")
    with pytest.raises(inkpen.UsageError, match="'add'"):
        inkpen.open(dest)  # the copy records the operators it was written with


@pytest.mark.s3
def test_counters_on_seaweedfs(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("s3")
    model = Model(seed=3)
    with inkpen.open(url, **TINY, merge_operators=OPERATORS) as book:
        for _ in range(40):
            model.step(book)
        book.flush()
        book.compact_ledger()
        book.compact_journal()
        model.check(book, "on S3 after merges and compaction")
    with pytest.raises(inkpen.UsageError, match="merge_operators"):
        inkpen.open(url)
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        model.check(book, "on S3 after reopening")


def test_merges_from_many_threads_each_apply_once() -> None:
    url = "memory://merge-threads"
    threads, per_thread = 8, 40
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        start = threading.Barrier(threads)
        failures: list[BaseException] = []

        def work(n: int) -> None:
            start.wait()
            try:
                for i in range(per_thread):
                    book.merge(COUNTERS, "hits", b"1", operator="add")
                    book.merge(LOGS, "trail", f"<{n}.{i}>".encode(), operator="append")
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert failures == []
        assert book.get(COUNTERS, "hits") == str(threads * per_thread).encode()
        trail = book.get(LOGS, "trail")
        assert trail is not None
        pieces = trail.decode().strip("<>").split("><")
        assert sorted(pieces) == sorted(
            f"{n}.{i}" for n in range(threads) for i in range(per_thread)
        )
        for n in range(threads):  # each thread's operands in the order it wrote them
            mine = [p for p in pieces if p.startswith(f"{n}.")]
            assert mine == [f"{n}.{i}" for i in range(per_thread)]


def test_puts_and_deletes_replace_operands_and_conditions_still_hold() -> None:
    with inkpen.open("memory://merge-replace", merge_operators=OPERATORS) as book:
        book.merge(COUNTERS, "c", b"5", operator="add")
        assert book.get(COUNTERS, "c") == b"5"  # an absent key starts from None
        book.put(COUNTERS, "c", b"100")
        book.merge(COUNTERS, "c", b"1", operator="add")
        assert book.get(COUNTERS, "c") == b"101"
        book.delete(COUNTERS, "c")
        book.merge(COUNTERS, "c", b"1", operator="add")
        assert book.get(COUNTERS, "c") == b"1"  # a deleted key starts from None again
        head = book.head(COUNTERS, "c")
        assert head is not None
        with pytest.raises(inkpen.ConflictError):
            book.put(COUNTERS, "c", b"9", if_sqn=head.sqn - 1)
        book.merge(COUNTERS, "c", b"1", operator="add")
        with pytest.raises(inkpen.ConflictError):
            book.put(COUNTERS, "c", b"9", if_sqn=head.sqn)  # the merge moved the key's SQN
        moved = book.head(COUNTERS, "c")
        assert moved is not None and moved.sqn > head.sqn
        book.put(COUNTERS, "c", b"9", if_sqn=moved.sqn)
        assert book.get(COUNTERS, "c") == b"9"
        book.put(COUNTERS, "t", b"1", ttl=1000, indexes=[("add", "f_bin", "x")])
        book.merge(COUNTERS, "t", b"1", operator="add")
        assert book.get(COUNTERS, "t") == b"2"
        assert list(book.index_query(COUNTERS, "f_bin", "x", "x")) == [b"t"]  # entries kept
        changes = [c for c in book.changes(0) if c.key == b"c"]
        assert [(c.kind, c.value) for c in changes] == [
            ("put", b"5"),
            ("put", b"100"),
            ("put", b"101"),
            ("delete", None),
            ("put", b"1"),
            ("put", b"2"),
            ("put", b"9"),
        ]  # the feed shows each merge as the put of its folded value


def test_a_merge_onto_an_expired_key_starts_from_none() -> None:
    clock = [1000.0]
    with inkpen.open(
        "memory://merge-expired", merge_operators=OPERATORS, clock=lambda: clock[0]
    ) as book:
        book.put(COUNTERS, "e", b"40", ttl=10)
        book.merge(COUNTERS, "e", b"2", operator="add")
        assert book.get(COUNTERS, "e") == b"42"
        book.put(COUNTERS, "e", b"40", ttl=10)
        clock[0] += 20
        book.merge(COUNTERS, "e", b"2", operator="add")
        assert book.get(COUNTERS, "e") == b"2"


def test_async_merge() -> None:
    async def main() -> None:
        async with inkpen.aio.open("memory://merge-aio", merge_operators=OPERATORS) as book:
            await asyncio.gather(
                *(book.merge(COUNTERS, "n", b"2", operator="add") for _ in range(50))
            )
            assert await book.get(COUNTERS, "n") == b"100"
            batch = inkpen.Batch().merge(LOGS, "l", b"a", operator="append")
            await book.write(batch.merge(LOGS, "l", b"b", operator="append"))
            assert await book.get(LOGS, "l") == b"ab"
            with pytest.raises(inkpen.UsageError, match="'nope'"):
                await book.merge(COUNTERS, "n", b"1", operator="nope")

    asyncio.run(main())


def _manifest_state(url: str) -> tuple[int, tuple[str, ...]]:
    store = open_store(url)
    try:
        latest = ManifestStore(store).open_database(create_if_missing=False)
        return latest.id, latest.manifest.merge_operators
    finally:
        store.close()


def test_a_database_written_with_an_operator_refuses_a_writer_without_it(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("local")
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        book.put(COUNTERS, "c", b"1")
        assert _manifest_state(url)[1] == ()  # nothing recorded before a merge
        book.merge(COUNTERS, "c", b"1", operator="add")
        assert _manifest_state(url)[1] == ("add",)
        book.merge(COUNTERS, "c", b"1", operator="add")
    before = _manifest_state(url)
    with pytest.raises(inkpen.UsageError) as refused:
        inkpen.open(url)
    assert "'add'" in str(refused.value) and "merge_operators" in str(refused.value)
    with pytest.raises(inkpen.UsageError, match="'add'"):
        inkpen.open(url, merge_operators={"append": append})
    assert _manifest_state(url) == before  # refused before anything was claimed or written
    with inkpen.open_reader(url) as reader:
        assert reader.get(COUNTERS, "c") == b"3"
    with inkpen.open(url, merge_operators={"add": add}) as book:
        assert book.get(COUNTERS, "c") == b"3"
        batch = inkpen.Batch().merge(LOGS, "l", b"a", operator="append")
        with pytest.raises(inkpen.UsageError, match="'append'"):
            book.write(batch)  # not given to this writer: refused before anything is written
        assert book.get(LOGS, "l") is None
    assert _manifest_state(url)[1] == ("add",)


def failing(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    raise RuntimeError("operand refused")


def not_bytes(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return 42  # type: ignore[return-value]


def test_bad_merges_are_refused_and_change_nothing() -> None:
    operators = {**OPERATORS, "failing": failing, "not_bytes": not_bytes}
    with inkpen.open("memory://merge-bad", merge_operators=operators, max_value_bytes=16) as book:
        book.put(COUNTERS, "c", b"1")
        head = book.head(COUNTERS, "c")
        bad: list[Callable[[], object]] = [
            lambda: book.merge(COUNTERS, "c", b"1", operator="unknown"),
            lambda: book.merge(COUNTERS, "c", b"1", operator=None),  # type: ignore[arg-type]
            lambda: book.merge(COUNTERS, "c", "1", operator="add"),  # type: ignore[arg-type]
            lambda: book.merge(COUNTERS, "c", 1, operator="add"),  # type: ignore[arg-type]
            lambda: book.merge(COUNTERS, "c", None, operator="add"),  # type: ignore[arg-type]
            lambda: book.merge(COUNTERS, "", b"1", operator="add"),
            lambda: book.merge(COUNTERS, "c", b"x" * 17, operator="append"),
            lambda: book.merge(COUNTERS, "c", b"1", operator="failing"),
            lambda: book.merge(COUNTERS, "c", b"1", operator="not_bytes"),
            lambda: book.merge(COUNTERS, "c", b"not a number", operator="add"),
            lambda: book.merge(COUNTERS, "c", b"x" * 16, operator="append"),  # answers 17 bytes
            lambda: book.write(
                inkpen.Batch()
                .put(COUNTERS, "d", b"1")
                .merge(COUNTERS, "c", b"1", operator="failing")
            ),
            lambda: inkpen.Batch().merge(COUNTERS, "c", "1", operator="add"),  # type: ignore[arg-type]
            lambda: inkpen.Batch().merge(COUNTERS, "c", b"1", operator=3),  # type: ignore[arg-type]
        ]
        for call in bad:
            with pytest.raises(inkpen.UsageError):
                call()
        assert book.head(COUNTERS, "c") == head
        assert book.get(COUNTERS, "d") is None  # the batch with a failing merge: none of it
        with pytest.raises(inkpen.UsageError, match="operand refused"):
            book.merge(COUNTERS, "c", b"1", operator="failing")
        with pytest.raises(inkpen.UsageError, match="answered int"):
            book.merge(COUNTERS, "c", b"1", operator="not_bytes")
        book.merge(COUNTERS, "c", b"1", operator="add")  # the writer goes on
        assert book.get(COUNTERS, "c") == b"2"


def test_an_operator_may_answer_bytes_like_values_which_are_stored_as_bytes() -> None:
    def into_bytearray(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytearray:
        folded = bytearray(existing or b"")
        for operand in operands:
            folded += operand
        return folded

    def into_memoryview(
        key: bytes, existing: bytes | None, operands: Sequence[bytes]
    ) -> memoryview:
        return memoryview((existing or b"") + b"".join(operands))

    def into_str(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> str:
        return "text"

    operators: dict[str, inkpen.MergeOperator] = {
        "bytearray": into_bytearray,
        "memoryview": into_memoryview,
        "str": into_str,  # type: ignore[dict-item]
    }
    with inkpen.open("memory://merge-bytes-like", merge_operators=operators) as book:
        book.merge(LOGS, "a", b"ab", operator="bytearray")
        book.merge(LOGS, "a", b"c", operator="memoryview")
        book.merge(LOGS, "a", b"d", operator="bytearray")
        value = book.get(LOGS, "a")
        assert value == b"abcd" and type(value) is bytes
        assert [v for _, _, v in book.objects(LOGS)] == [b"abcd"]
        with pytest.raises(inkpen.UsageError, match="answered str"):
            book.merge(LOGS, "a", b"e", operator="str")
        assert book.get(LOGS, "a") == b"abcd"


def test_an_operator_per_bucket_is_a_name_per_bucket() -> None:
    """Operators are not given the bucket: the caller picks the operator for the bucket."""

    def capped(cap: int, key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
        return str(min(cap, int(add(key, existing, operands)))).encode()

    operators = {"add_likes": functools.partial(capped, 10), "add_views": add}
    with inkpen.open("memory://merge-per-bucket", merge_operators=operators) as book:
        for _ in range(4):
            book.merge("likes", "post", b"4", operator="add_likes")
            book.merge("views", "post", b"4", operator="add_views")
        assert book.get_many("likes", ["post"]) + book.get_many("views", ["post"]) == [
            b"10",
            b"16",
        ]


def test_a_failing_merge_rejects_only_its_own_write() -> None:
    operators = {**OPERATORS, "failing": failing}
    with inkpen.open("memory://merge-group", merge_operators=operators) as book:
        errors: list[BaseException] = []
        start = threading.Barrier(6)

        def good(n: int) -> None:
            start.wait()
            for _ in range(20):
                book.merge(COUNTERS, f"g{n}", b"1", operator="add")

        def bad() -> None:
            start.wait()
            for _ in range(20):
                try:
                    book.merge(COUNTERS, "g0", b"1", operator="failing")
                except inkpen.UsageError as exc:
                    errors.append(exc)

        workers = [threading.Thread(target=good, args=(n,)) for n in range(5)]
        workers.append(threading.Thread(target=bad))
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert len(errors) == 20
        assert [book.get(COUNTERS, f"g{n}") for n in range(5)] == [b"20"] * 5


def test_merge_is_refused_in_a_head_only_store() -> None:
    with (
        inkpen.open(
            "memory://merge-head-only", head_only="with_lookup", merge_operators=OPERATORS
        ) as book,
        pytest.raises(inkpen.UsageError, match="head-only"),
    ):
        book.merge(COUNTERS, "c", b"1", operator="add")


@pytest.mark.parametrize(
    "operators",
    [
        [("add", add)],
        {"": add},
        {"add": "not a function"},
        {3: add},
        {"a\x00b": add},
        {"x" * 201: add},
        None,
    ],
)
def test_bad_merge_operator_options_are_refused(operators: Any) -> None:
    with pytest.raises(inkpen.UsageError, match="merge_operators"):
        inkpen.open("memory://merge-options", merge_operators=operators)


def test_copies_restores_and_clones_record_the_operators(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("local")
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        book.merge(LOGS, "l", b"ab", operator="append")
        book.merge(LOGS, "l", b"c", operator="append")
    copied, restored, cloned = (make_store_url("local") for _ in range(3))
    inkpen.backup(url, copied)
    inkpen.restore(copied, restored)
    create_clone(url, cloned)
    for target in (copied, restored, cloned):
        assert _manifest_state(target)[1] == ("append",)
        with inkpen.open_reader(target) as reader:
            assert reader.get(LOGS, "l") == b"abc"
        with pytest.raises(inkpen.UsageError, match="'append'"):
            inkpen.open(target)
        with inkpen.open(target, merge_operators=OPERATORS) as book:
            book.merge(LOGS, "l", b"d", operator="append")
            assert book.get(LOGS, "l") == b"abcd"


def test_manifests_without_operators_read_as_none_and_keep_their_document() -> None:
    plain = Manifest()
    assert "merge_operators" not in plain.to_document()  # what a store without merges wrote
    assert Manifest.from_document(plain.to_document()).merge_operators == ()
    named = Manifest(merge_operators=("add", "append"))
    assert decode(encode(named), "m").merge_operators == ("add", "append")
    with pytest.raises(inkpen.UsageError, match="merge_operators"):
        Manifest(merge_operators=("",))


def test_the_command_line_writes_to_a_database_with_operators(
    make_store_url: Callable[[str], str],
) -> None:
    url, restored = make_store_url("local"), make_store_url("local")
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        book.merge(COUNTERS, "c", b"4", operator="add")
        book.merge(COUNTERS, "c", b"5", operator="add")
    # The command line merges nothing: its writers stand in for the recorded operators.
    ok("put", url, COUNTERS, "p", "1")
    ok("restore", url, restored)
    with inkpen.open_reader(restored) as reader:
        assert (reader.get(COUNTERS, "c"), reader.get(COUNTERS, "p")) == (b"9", b"1")
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        book.merge(COUNTERS, "p", b"1", operator="add")
        assert book.get(COUNTERS, "p") == b"2"
        assert book.get(COUNTERS, "c") == b"9"
