"""The merge operator names a database records: only a merge that lands records its name, and a
name can be retired (``inkpen.forget_merge_operator``, ``inkpen merge-operators --forget``),
except while a writer holds the database. Backups and restores carry the recorded names only.
On a local directory and on SeaweedFS (``durable_kind``), checked against the manifest itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence

import pytest

import inkpen
import inkpen.aio
from support.cli import error_line, fails, latest_manifest, ok

MakeUrl = Callable[[str], str]


def add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return str(int(existing or b"0") + sum(int(op) for op in operands)).encode()


def boom(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    raise RuntimeError("boom")


def two_arguments(key: bytes, existing: bytes | None) -> bytes:
    return b"never called with three"


OPERATORS: dict[str, Callable[..., bytes]] = {
    "add": add,
    "counter": boom,
    "arity": two_arguments,
}


def recorded(url: str) -> tuple[str, ...]:
    """The names the latest manifest records, read as the manifest layer reads them."""
    return latest_manifest(url)[1].merge_operators


def test_a_refused_merge_records_no_name(durable_kind: str, make_store_url: MakeUrl) -> None:
    url = make_store_url(durable_kind)
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        book.put("b", "k", b"1")
        for name in ("counter", "arity"):
            with pytest.raises(inkpen.UsageError, match=repr(name)):
                book.merge("b", "k", b"1", operator=name)
            with pytest.raises(inkpen.UsageError, match=repr(name)):
                book.write(inkpen.Batch().put("b", "x", b"1").merge("b", "k", b"1", operator=name))
        assert recorded(url) == ()
        assert book.get_many("b", ["k", "x"]) == [b"1", None]
        book.merge("b", "k", b"2", operator="add")  # one that lands: recorded as it returns
        assert recorded(url) == ("add",)
    assert inkpen.recorded_merge_operators(url) == ("add",)
    with pytest.raises(inkpen.UsageError, match="'add'"):
        inkpen.open(url)
    inkpen.forget_merge_operator(url, "add")
    with inkpen.open(url) as book:  # the refused names never stuck: a plain open works
        assert book.get("b", "k") == b"3"

    async def refused_from_the_loop() -> None:
        async with inkpen.aio.open(url, merge_operators=OPERATORS) as book:
            with pytest.raises(inkpen.UsageError, match="'counter'"):
                await book.merge("b", "k", b"1", operator="counter")
            with pytest.raises(inkpen.UsageError, match="'counter'"):
                await book.write(inkpen.Batch().merge("b", "k", b"1", operator="counter"))
            assert recorded(url) == ()
            await book.write(inkpen.Batch().merge("b", "k", b"4", operator="add"))
            assert recorded(url) == ("add",)

    asyncio.run(refused_from_the_loop())
    with inkpen.open_reader(url) as reader:
        assert reader.get("b", "k") == b"7"


def test_forgetting_a_name_lets_a_plain_open_succeed(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url = make_store_url(durable_kind)
    with inkpen.open(url, merge_operators={"add": add, "also": add}) as book:
        for _ in range(3):
            book.merge("counters", "c", b"5", operator="add")
        book.merge("counters", "d", b"1", operator="also")
    assert recorded(url) == ("add", "also")
    with pytest.raises(inkpen.UsageError, match="merge_operators"):
        inkpen.open(url)
    inkpen.forget_merge_operator(url, "add")
    assert recorded(url) == ("also",)
    with pytest.raises(inkpen.UsageError, match="'also'"):
        inkpen.open(url)
    ok("merge-operators", url, "--forget", "also")
    assert recorded(url) == ()
    with inkpen.open(url) as book:  # values were folded when written: nothing needs add
        assert book.get_many("counters", ["c", "d"]) == [b"15", b"1"]
        book.put("counters", "e", b"0")
    with inkpen.open(url, merge_operators={"add": add}) as book:  # merging again records it
        book.merge("counters", "c", b"1", operator="add")
    assert recorded(url) == ("add",)
    with inkpen.open_reader(url) as reader:
        assert reader.get("counters", "c") == b"16"


def test_forgetting_an_unknown_name_is_a_clear_error(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url = make_store_url(durable_kind)
    with inkpen.open(url, merge_operators={"add": add}) as book:
        book.merge("b", "k", b"1", operator="add")
    before = latest_manifest(url)
    with pytest.raises(inkpen.UsageError) as refused:
        inkpen.forget_merge_operator(url, "counter")
    assert "no merge operator 'counter'" in str(refused.value)
    assert "recorded: 'add'" in str(refused.value)
    for bad in ("", None, 3, "a\x00b"):
        with pytest.raises(inkpen.UsageError, match="merge operator name"):
            inkpen.forget_merge_operator(url, bad)  # type: ignore[arg-type]
    assert latest_manifest(url) == before  # nothing written
    ran = fails(2, "merge-operators", url, "--forget", "counter")
    assert "no merge operator 'counter'" in error_line(ran)
    assert latest_manifest(url) == before
    empty = make_store_url(durable_kind)
    with pytest.raises(inkpen.NotFoundError, match="no inkpen database"):
        inkpen.forget_merge_operator(empty, "add")
    fails(1, "merge-operators", empty)


def test_forgetting_is_refused_while_a_writer_holds_the_database(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url = make_store_url(durable_kind)
    book = inkpen.open(url, merge_operators={"add": add})
    try:
        book.merge("b", "k", b"1", operator="add")
        before = latest_manifest(url)
        with pytest.raises(inkpen.UsageError, match="a writer holds the database"):
            inkpen.forget_merge_operator(url, "add")
        ran = fails(2, "merge-operators", url, "--forget", "add")
        assert "a writer holds the database" in error_line(ran)
        assert latest_manifest(url) == before
        assert ok("merge-operators", url).lines == ["add"]  # listing reads only
        book.merge("b", "k", b"1", operator="add")  # the writer goes on, unfenced
    finally:
        book.abandon()  # as a crash: the writer's mark stays in the manifest
    with pytest.raises(inkpen.UsageError, match="crashed"):
        inkpen.forget_merge_operator(url, "add")  # a crashed writer looks like an open one
    with inkpen.open(url, merge_operators={"add": add}) as book:
        assert book.get("b", "k") == b"2"
    inkpen.forget_merge_operator(url, "add")  # closed cleanly: nothing holds it
    assert recorded(url) == ()


def test_backup_and_restore_carry_only_landed_names(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url = make_store_url(durable_kind)
    hot, copied, restored = (make_store_url(durable_kind) for _ in range(3))
    with inkpen.open(url, merge_operators=OPERATORS) as book:
        book.merge("b", "k", b"2", operator="add")
        with pytest.raises(inkpen.UsageError):
            book.merge("b", "k", b"1", operator="counter")
        book.hot_backup()(hot)
    inkpen.backup(url, copied)
    inkpen.restore(copied, restored)
    for target in (hot, copied, restored):
        assert recorded(target) == ("add",), target
        with pytest.raises(inkpen.UsageError, match="'add'"):
            inkpen.open(target)
        with inkpen.open(target, merge_operators={"add": add}) as book:
            assert book.get("b", "k") == b"2"
    inkpen.forget_merge_operator(url, "add")  # a copy taken afterwards records none
    inkpen.backup(url, copied)  # brings the earlier backup up to date
    assert recorded(copied) == ()


def test_the_command_lists_the_recorded_names(durable_kind: str, make_store_url: MakeUrl) -> None:
    url = make_store_url(durable_kind)
    with inkpen.open(url) as book:
        book.put("b", "k", b"1")
    assert ok("merge-operators", url).lines == ["no merge operators recorded"]
    with inkpen.open(url, merge_operators={"add": add, "sum": add}) as book:
        book.merge("b", "k", b"1", operator="sum")
        book.merge("b", "k", b"1", operator="add")
    assert ok("merge-operators", url).lines == ["add", "sum"]
    assert json.loads(ok("merge-operators", url, "--json").out) == ["add", "sum"]
    forgot = ok("merge-operators", url, "--forget", "sum", "--json")
    assert json.loads(forgot.out) == ["add"]
    assert ok("merge-operators", url, "--forget", "add").lines == ["forgot merge operator add"]
    assert ok("merge-operators", url).lines == ["no merge operators recorded"]


def test_a_data_set_records_and_forgets_names_per_shard(make_store_url: MakeUrl) -> None:
    url = make_store_url("local")
    inkpen.shards.create(url, shards=3)
    with inkpen.shards.open(url, merge_operators={"add": add, "sum": add}) as book:
        keys = [f"k{i}" for i in range(12)]
        for key in keys:
            book.merge("b", key, b"1", operator="add")
        home = inkpen.shards.shard_of("b", "k0", 3)
        book.merge("b", "k0", b"1", operator="sum")  # recorded by k0's shard alone
    assert inkpen.recorded_merge_operators(url) == ("add", "sum")
    listed = json.loads(ok("merge-operators", url, "--json").out)
    assert [row["shard"] for row in listed] == [0, 1, 2]
    assert [row["names"] for row in listed] == [
        ["add", "sum"] if i == home else ["add"] for i in range(3)
    ]
    assert ok("merge-operators", url, "--shard", str(home)).lines == ["add", "sum"]
    with pytest.raises(inkpen.UsageError, match="no shard of the data set"):
        inkpen.forget_merge_operator(url, "nope")
    assert ok("merge-operators", url, "--forget", "sum").lines[0] == "forgot merge operator sum"
    inkpen.forget_merge_operator(url, "add")
    assert inkpen.recorded_merge_operators(url) == ()
    with inkpen.shards.open(url) as book:  # no operator needed any more, values kept
        assert book.get_many("b", keys) == [b"2"] + [b"1"] * 11


def test_forgetting_in_a_data_set_is_refused_while_a_writer_holds_a_shard(
    make_store_url: MakeUrl,
) -> None:
    url = make_store_url("local")
    inkpen.shards.create(url, shards=2)
    with inkpen.shards.open(url, merge_operators={"add": add}) as book:
        book.merge("b", "k", b"1", operator="add")
        book.merge("b", "other-key", b"1", operator="add")
        book.merge("b", "third", b"1", operator="add")
        with pytest.raises(inkpen.UsageError, match="a writer holds shard"):
            inkpen.forget_merge_operator(url, "add")
        fails(2, "merge-operators", url, "--forget", "add")
    assert inkpen.recorded_merge_operators(url) == ("add",)
