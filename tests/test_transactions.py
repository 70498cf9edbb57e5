"""Transactions: reads of one snapshot overlaid with the transaction's own writes, atomic commits,
the conflict rules of both isolation levels, limits, misuse, and the release of what a
transaction pins. Each behaviour is checked against a plain dict or a fresh read of the Bookie.

Most tests run on the memory store and a local directory; one runs on SeaweedFS.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import inkpen
import inkpen.aio
import inkpen.transaction
from inkpen.errors import ConflictError, UsageError
from support.engine import TINY
from support.waiting import wait_until

KINDS = ["memory", "local"]


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, make_store_url: Callable[[str], str]) -> str:
    return make_store_url(str(request.param))


@pytest.fixture
def book(url: str) -> Iterator[inkpen.Bookie]:
    with inkpen.open(url) as opened:
        yield opened


def _pinned(book: inkpen.Bookie) -> tuple[int, int]:
    """(snapshots the Bookie holds, transactions registered with the writer's record)."""
    return book.stats()["snapshots"], book._engine.commits.registered


def _released(book: inkpen.Bookie, baseline: tuple[int, int] = (0, 0)) -> None:
    """The transactions are deregistered at once; their shared snapshot (the anchor) goes once
    idle for ANCHOR_SECONDS: poll for it with a deadline."""
    assert book._engine.commits.registered == baseline[1]
    wait_until(lambda: _pinned(book) == baseline, "the transactions' snapshot to be released")


# -- reading your own writes --------------------------------------------------------------------


def test_reads_see_the_snapshot_overlaid_with_the_transactions_own_writes(
    book: inkpen.Bookie,
) -> None:
    for key in ("a", "c", "e", "g"):
        book.put("b", key, key.encode() * 2)
    book.put("other", "x", b"x")
    model = {key: key.encode() * 2 for key in ("a", "c", "e", "g")}
    with book.transaction() as txn:
        txn.put("b", "d", b"new-d")
        txn.put("b", "c", b"new-c")
        txn.delete("b", "e")
        txn.delete("b", "zz")  # absent: still hidden, still absent
        model.update({"d": b"new-d", "c": b"new-c"})
        del model["e"]
        book.put("b", "f", b"after the snapshot")  # not seen by the transaction
        assert txn.get("b", "d") == b"new-d"
        assert txn.get("b", "e") is None
        assert txn.get("b", "f") is None
        assert txn.get_many("b", ["a", "c", "e", "d", "f"]) == [
            model.get("a"),
            b"new-c",
            None,
            b"new-d",
            None,
        ]
        ordered = sorted(model)
        assert list(txn.keys("b")) == [k.encode() for k in ordered]
        assert list(txn.keys("b", reverse=True)) == [k.encode() for k in reversed(ordered)]
        assert list(txn.keys("b", "b", "d")) == [b"c", b"d"]
        assert list(txn.objects("b")) == [(b"b", k.encode(), model[k]) for k in ordered]
        assert list(txn.objects("b", reverse=True)) == [
            (b"b", k.encode(), model[k]) for k in reversed(ordered)
        ]
        everything = list(txn.objects())
        assert everything == [(b"b", k.encode(), model[k]) for k in ordered] + [
            (b"other", b"x", b"x")
        ]
        by_sqn = list(txn.objects("b", order="sqn"))
        assert by_sqn[-2:] == [(b"b", b"d", b"new-d"), (b"b", b"c", b"new-c")]
        assert sorted(by_sqn) == sorted((b"b", k.encode(), model[k]) for k in model)
        head = txn.head("b", "d")
        assert head is not None and head.sqn == 0 and head.size == 5
        assert txn.head("b", "e") is None
        snapshot_head = txn.head("b", "a")
        assert snapshot_head is not None and snapshot_head.sqn > 0
        # the Bookie sees none of it before the commit
        assert book.get("b", "d") is None and book.get("b", "e") == b"ee"
    assert {k.decode(): v for _, k, v in book.objects("b") if k != b"f"} == model
    assert book.get("b", "f") == b"after the snapshot"


def test_index_queries_see_buffered_index_changes_and_deletes(book: inkpen.Bookie) -> None:
    book.put("u", "alice", b"1", indexes=[("add", "city", "oslo")])
    book.put("u", "bob", b"2", indexes=[("add", "city", "paris")])
    book.put("u", "carol", b"3", indexes=[("add", "city", "oslo")])
    with book.transaction() as txn:
        txn.put("u", "dave", b"4", indexes=[("add", "city", "lima")])
        txn.put("u", "alice", b"1", indexes=[("remove", "city", "oslo"), ("add", "city", "rome")])
        txn.delete("u", "carol")
        got = list(txn.index_query("u", "city", "a", "z", return_terms=True))
        assert got == [(b"lima", b"dave"), (b"paris", b"bob"), (b"rome", b"alice")]
        assert list(txn.index_query("u", "city", "a", "z", reverse=True)) == [
            b"alice",
            b"bob",
            b"dave",
        ]
        assert list(txn.index_query("u", "city", "a", "z", regex="^[lp]")) == [b"dave", b"bob"]
    assert list(book.index_query("u", "city", "a", "z", return_terms=True)) == got


# -- the end of a transaction -------------------------------------------------------------------


def test_rollback_and_an_exception_discard_and_release(book: inkpen.Bookie) -> None:
    baseline = _pinned(book)
    txn = book.transaction()
    assert _pinned(book) == (baseline[0] + 1, baseline[1] + 1)  # one shared snapshot, one txn
    txn.put("b", "k", b"v")
    txn.rollback()
    assert txn.state == "rolled back"
    assert book.get("b", "k") is None
    _released(book, baseline)

    with pytest.raises(KeyError), book.transaction("serializable") as txn2:
        txn2.put("b", "k", b"v")
        raise KeyError("the application failed")
    assert txn2.state == "rolled back"
    assert book.get("b", "k") is None
    _released(book, baseline)

    with book.transaction() as txn3:
        txn3.put("b", "k", b"v")
    assert txn3.state == "committed"
    assert book.get("b", "k") == b"v"
    _released(book, baseline)


@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_a_finished_transaction_refuses_every_call(book: inkpen.Bookie, end: str) -> None:
    txn = book.transaction()
    txn.put("b", "k", b"v")
    getattr(txn, end)()
    calls: list[Callable[[], Any]] = [
        lambda: txn.get("b", "k"),
        lambda: txn.get_many("b", ["k"]),
        lambda: txn.head("b", "k"),
        lambda: list(txn.keys("b")),
        lambda: list(txn.objects("b")),
        lambda: list(txn.index_query("b", "f", "a", "z")),
        lambda: txn.put("b", "k2", b"v"),
        lambda: txn.delete("b", "k"),
        txn.commit,
        txn.rollback,
    ]
    for call in calls:
        with pytest.raises(UsageError, match="this transaction is"):
            call()
    txn.close()  # idempotent
    assert book.get("b", "k2") is None
    assert book.get("b", "k") == (b"v" if end == "commit" else None)


def test_closing_the_bookie_ends_its_transactions(url: str) -> None:
    book = inkpen.open(url)
    txn = book.transaction()
    txn.put("b", "k", b"v")
    book.close()
    assert txn.state == "closed with its Bookie"
    with pytest.raises(UsageError):
        txn.commit()
    with inkpen.open(url) as again:
        assert again.get("b", "k") is None
        assert again._engine.commits.registered == 0


def test_bad_arguments_are_refused_and_change_nothing(book: inkpen.Bookie) -> None:
    for isolation in ("", "repeatable read", 7, None):
        with pytest.raises(UsageError, match="isolation"):
            book.transaction(isolation)  # type: ignore[arg-type]
    with book.transaction() as txn:
        txn.put("b", "k", b"v")
        with pytest.raises(UsageError):
            txn.put("b", "", b"v")
        with pytest.raises(UsageError):
            txn.put("b", "k2", "text")  # type: ignore[arg-type]
        with pytest.raises(UsageError):
            txn.delete("b", "k", indexes=[("add", "f", "t")])
        with pytest.raises(UsageError):
            list(txn.keys("b", reverse="yes"))  # type: ignore[arg-type]
        assert txn.get("b", "k") == b"v"
    assert [k for k in book.keys("b")] == [b"k"]


# -- limits -------------------------------------------------------------------------------------


def test_limits_refuse_the_call_and_keep_the_transaction(
    make_store_url: Callable[[str], str],
) -> None:
    with inkpen.open(
        make_store_url("memory"), transaction_max_keys=3, transaction_max_bytes=2048
    ) as book:
        with book.transaction("serializable") as txn:
            txn.get("b", "r1")
            txn.put("b", "w1", b"v")
            list(txn.keys("b", "a", "b"))  # a range counts as one
            with pytest.raises(UsageError, match="transaction_max_keys"):
                txn.get("b", "r2")
            with pytest.raises(UsageError, match="transaction_max_keys"):
                txn.put("b", "w2", b"v")
            txn.put("b", "w1", b"again")  # a key already tracked costs nothing
            txn.get("b", "r1")
            with pytest.raises(UsageError, match="transaction_max_bytes"):
                txn.put("b", "w1", b"x" * 4096)
        assert book.get("b", "w1") == b"again"
        assert book.get("b", "w2") is None
        with book.transaction("snapshot") as loose:  # reads are not tracked under snapshot
            for i in range(10):
                loose.get("b", f"r{i}")
            loose.put("b", "a", b"1")
            loose.put("b", "b", b"1")
            loose.put("b", "c", b"1")
            with pytest.raises(UsageError, match="transaction_max_keys"):
                loose.put("b", "d", b"1")
        assert [k for k in book.keys("b")] == [b"a", b"b", b"c", b"w1"]


def test_the_limit_options_are_checked() -> None:
    for name, bad in (
        ("transaction_max_keys", 0),
        ("transaction_max_bytes", 10),
        ("transaction_max_bytes", 1 << 40),
        ("transaction_window_keys", 0),
        ("transaction_window_keys", True),
    ):
        with pytest.raises(UsageError, match=name):
            inkpen.Options.build(None, **{name: bad})


# -- conflicts ----------------------------------------------------------------------------------


def test_snapshot_isolation_refuses_a_lost_update_and_writes_nothing(book: inkpen.Bookie) -> None:
    book.put("acct", "a", b"100")
    first = book.transaction()
    second = book.transaction()
    first.put("acct", "a", str(int(first.get("acct", "a") or b"0") + 10).encode())
    second.put("acct", "a", str(int(second.get("acct", "a") or b"0") + 20).encode())
    second.put("acct", "untouched", b"x")
    first.commit()
    with pytest.raises(ConflictError) as caught:
        second.commit()
    assert (caught.value.bucket, caught.value.key) == (b"acct", b"a")
    assert "it writes" in str(caught.value)
    assert book.get("acct", "a") == b"110"
    assert book.get("acct", "untouched") is None
    assert second.state == "committed"  # finished, not written
    _released(book)


def test_a_key_only_read_conflicts_under_serializable_only(book: inkpen.Bookie) -> None:
    book.put("b", "read", b"1")
    for isolation, conflicts in (("snapshot", False), ("serializable", True)):
        txn = book.transaction(isolation)
        assert txn.get("b", "read") is not None
        assert txn.get("b", "absent") is None
        txn.put("b", f"out-{isolation}", b"x")
        book.put("b", "absent", b"now here")  # a read that found nothing is checked too
        if conflicts:
            with pytest.raises(ConflictError) as caught:
                txn.commit()
            assert caught.value.key == b"absent" and "it read" in str(caught.value)
            assert book.get("b", f"out-{isolation}") is None
        else:
            txn.commit()
            assert book.get("b", f"out-{isolation}") == b"x"
        book.delete("b", "absent")


def test_write_skew_commits_under_snapshot_and_conflicts_under_serializable(
    book: inkpen.Bookie,
) -> None:
    """Two doctors on call; each goes off call if the other is still on. Under snapshot
    isolation both commit (write skew: nobody on call); serializable refuses the second."""
    for isolation in ("snapshot", "serializable"):
        book.put("oncall", "alice", b"1")
        book.put("oncall", "bob", b"1")
        alice = book.transaction(isolation)
        bob = book.transaction(isolation)
        for txn, me in ((alice, "alice"), (bob, "bob")):
            on_call = sum(int(v or b"0") for v in txn.get_many("oncall", ["alice", "bob"]))
            if on_call >= 2:
                txn.put("oncall", me, b"0")
        alice.commit()
        if isolation == "snapshot":
            bob.commit()
            assert book.get_many("oncall", ["alice", "bob"]) == [b"0", b"0"]
        else:
            with pytest.raises(ConflictError) as caught:
                bob.commit()
            assert caught.value.key == b"alice"
            assert book.get_many("oncall", ["alice", "bob"]) == [b"0", b"1"]


def test_a_phantom_in_a_range_read_conflicts_under_serializable(book: inkpen.Bookie) -> None:
    book.put("orders", "o1", b"5")
    book.put("orders", "o5", b"5")
    cases: list[tuple[str, Callable[[], object], bool]] = [
        ("insert inside", lambda: book.put("orders", "o3", b"7"), True),
        ("delete inside", lambda: book.delete("orders", "o1"), True),
        ("insert past the end", lambda: book.put("orders", "o9", b"7"), False),
        ("another bucket", lambda: book.put("orders2", "o3", b"7"), False),
    ]
    for name, change, conflicts in cases:
        txn = book.transaction("serializable")
        total = sum(int(v) for _, _, v in txn.objects("orders", "o0", "o6"))
        txn.put("totals", name, str(total).encode())
        change()
        if conflicts:
            with pytest.raises(ConflictError, match="inside a key range it read"):
                txn.commit()
            assert book.get("totals", name) is None
        else:
            txn.commit()
            assert book.get("totals", name) == str(total).encode()
        book.put("orders", "o1", b"5")
        book.delete("orders", "o3")


def test_an_index_phantom_conflicts_under_serializable(book: inkpen.Bookie) -> None:
    book.put("u", "alice", b"1", indexes=[("add", "city", "oslo")])
    txn = book.transaction("serializable")
    assert list(txn.index_query("u", "city", "o", "p")) == [b"alice"]
    txn.put("report", "oslo", b"1")
    book.put("u", "zed", b"1", indexes=[("add", "city", "oslo")])
    with pytest.raises(ConflictError, match="index range") as caught:
        txn.commit()
    assert caught.value.key == b"zed"
    # a delete of an object in the range removes its entries: a phantom too
    txn = book.transaction("serializable")
    assert list(txn.index_query("u", "city", "o", "p")) == [b"alice", b"zed"]
    txn.put("report", "oslo", b"2")
    book.delete("u", "alice")
    with pytest.raises(ConflictError):
        txn.commit()
    assert book.get("report", "oslo") is None


def test_a_read_only_transaction_commits_whatever_changed(book: inkpen.Bookie) -> None:
    book.put("b", "k", b"1")
    txn = book.transaction("serializable")
    assert txn.get("b", "k") == b"1"
    book.put("b", "k", b"2")
    assert txn.get("b", "k") == b"1"  # still its snapshot
    txn.commit()  # it serialises at its snapshot: nothing to check
    assert txn.state == "committed"


def test_conditional_writes_inside_a_transaction(book: inkpen.Bookie) -> None:
    book.put("b", "k", b"1")
    head = book.head("b", "k")
    assert head is not None
    with pytest.raises(ConflictError, match="conditional write"), book.transaction() as txn:
        txn.put("b", "k", b"2", if_sqn=head.sqn + 100)
    assert book.get("b", "k") == b"1"
    with book.transaction() as txn:
        txn.put("b", "k", b"2", if_sqn=head.sqn)
    assert book.get("b", "k") == b"2"


def test_two_transactions_in_one_group_commit_cannot_both_write_a_key(
    make_store_url: Callable[[str], str],
) -> None:
    """Commits that share a journal segment are checked against each other too."""
    with inkpen.open(make_store_url("memory"), flush_policy="interval", flush_interval=1.0) as book:
        book.put("b", "k", b"0")
        txns = [book.transaction() for _ in range(4)]
        book.put("other", "timer", b"")  # starts the interval: the next segment waits for it
        segments = book.stats()["segments_written"]
        for i, txn in enumerate(txns):
            txn.put("b", "k", str(i).encode())
            txn.put("b", f"mine-{i}", b"x")
        outcomes: list[str] = []
        gate = threading.Barrier(len(txns))

        def commit(txn: inkpen.Transaction) -> None:
            gate.wait()
            try:
                txn.commit()
                outcomes.append("ok")
            except ConflictError:
                outcomes.append("conflict")

        threads = [threading.Thread(target=commit, args=(t,)) for t in txns]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["conflict", "conflict", "conflict", "ok"]
        assert book.stats()["segments_written"] == segments + 1  # all four in one segment
        winners = [i for i in range(4) if book.get("b", f"mine-{i}") is not None]
        assert len(winners) == 1
        assert book.get("b", "k") == str(winners[0]).encode()


def test_a_snapshot_older_than_the_record_conflicts_and_says_so(
    make_store_url: Callable[[str], str],
) -> None:
    with inkpen.open(make_store_url("memory"), transaction_window_keys=4) as book:
        txn = book.transaction()
        txn.put("b", "mine", b"1")
        for i in range(6):
            book.put("b", f"other-{i}", b"x")  # past the window: the oldest are trimmed
        with pytest.raises(ConflictError, match="older than the writer's record") as caught:
            txn.commit()
        assert caught.value.key == b"mine"
        assert book.get("b", "mine") is None
        with book.transaction() as fresh:  # a new snapshot is within the record again
            fresh.put("b", "mine", b"2")
        assert book.get("b", "mine") == b"2"


def test_the_record_empties_when_no_transaction_is_open(book: inkpen.Bookie) -> None:
    for i in range(20):
        book.put("b", f"k{i}", b"v")
    # with none open, only segments the views may not show yet are kept: at most the last one
    assert book._engine.commits.size <= 1
    txn = book.transaction()
    for i in range(20):
        book.put("b", f"k{i}", b"w")
    assert book._engine.commits.size >= 20
    txn.close()
    book.put("b", "last", b"v")
    assert book._engine.commits.size <= 2


# -- head-only stores ---------------------------------------------------------------------------


def test_head_only_stores_refuse_object_reads_and_writes_as_the_bookie_does(
    make_store_url: Callable[[str], str],
) -> None:
    with inkpen.open(make_store_url("memory"), head_only="with_lookup") as book:
        with pytest.raises(UsageError) as by_book:
            book.get("b", "k")
        with book.transaction() as txn:
            for call in (
                lambda: txn.get("b", "k"),
                lambda: txn.get_many("b", ["k"]),
                lambda: list(txn.objects("b")),
            ):
                with pytest.raises(UsageError) as by_txn:
                    call()
                assert "head-only store" in str(by_txn.value)
            with pytest.raises(UsageError) as by_txn_get:
                txn.get("b", "k")
            assert str(by_txn_get.value) == str(by_book.value)
            with pytest.raises(UsageError, match="head-only"):
                txn.put("b", "k", b"v")


# -- nesting ------------------------------------------------------------------------------------


def test_a_transaction_inside_a_with_block_of_the_same_bookie_is_refused(
    book: inkpen.Bookie, make_store_url: Callable[[str], str]
) -> None:
    with book.transaction() as outer:
        outer.put("b", "outer", b"1")
        with pytest.raises(UsageError, match="enclosing"), book.transaction():
            pass
        with pytest.raises(UsageError, match="enclosing"):
            book.transaction("serializable")  # the form without `with` too
        assert _pinned(book)[1] == 1  # the refused ones registered nothing

        began: list[str] = []

        def elsewhere() -> None:  # another thread is not inside the block
            with book.transaction() as txn:
                txn.put("b", "other-thread", b"1")
            began.append("committed")

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert began == ["committed"]
        with inkpen.open(make_store_url("memory")) as other, other.transaction() as txn:
            txn.put("b", "k", b"another Bookie's transaction")
        outer.put("b", "outer", b"2")
    assert book.get_many("b", ["outer", "other-thread"]) == [b"2", b"1"]
    with book.transaction() as after:  # after the block
        after.put("b", "after", b"1")
        after.commit()  # ended inside its block: the thread holds no open transaction
        with book.transaction() as next_one:
            next_one.put("b", "next", b"1")
    assert book.get_many("b", ["after", "next"]) == [b"1", b"1"]
    first, second = book.transaction(), book.transaction()  # explicit handles: independent
    first.rollback()
    second.rollback()
    with pytest.raises(RuntimeError), book.transaction() as failed:
        failed.put("b", "never", b"1")
        raise RuntimeError("leave the block")
    with book.transaction() as again:  # the failed block no longer holds the thread
        assert again.get("b", "never") is None
    _released(book)


def test_an_async_transaction_inside_an_async_with_block_is_refused(url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(url) as book:
            async with book.transaction() as outer:
                await outer.put("b", "outer", b"1")
                with pytest.raises(UsageError, match="enclosing"):
                    async with book.transaction():
                        pass
                with pytest.raises(UsageError, match="enclosing"):
                    await book.transaction()

                async def child() -> None:  # a task of its own is not inside the block
                    async with book.transaction() as txn:
                        await txn.put("b", "child", b"1")

                await asyncio.create_task(child())
            async with book.transaction() as after:
                await after.put("b", "after", b"1")
            assert await book.get_many("b", ["outer", "child", "after"]) == [b"1"] * 3
            assert book._entered == {}
            assert book.sync._engine.commits.registered == 0

    asyncio.run(main())


# -- retrying -----------------------------------------------------------------------------------


def test_retrying_reruns_on_conflict_with_growing_jittered_waits(book: inkpen.Bookie) -> None:
    waits: list[float] = []
    attempts: list[int] = []

    def increment() -> int:
        with book.transaction() as txn:
            count = int(txn.get("c", "n") or b"0")
            txn.put("c", "n", str(count + 1).encode())
            if len(attempts) < 3:  # someone else commits first, three times
                book.put("c", "n", str(count + 10).encode())
            attempts.append(count)
        return count + 1

    result = inkpen.retrying(increment, base_delay=0.01, max_delay=0.025, sleep=waits.append)
    assert attempts == [0, 10, 20, 30]
    assert result == 31 and book.get("c", "n") == b"31"
    assert len(waits) == 3
    assert all(0 <= w <= cap for w, cap in zip(waits, (0.01, 0.02, 0.025), strict=True))

    def always() -> None:
        raise ConflictError("lost again", bucket=b"c", key=b"n", expected=1, actual=2)

    with pytest.raises(ConflictError, match="lost again"):
        inkpen.retrying(always, attempts=3, base_delay=0)
    with pytest.raises(KeyError):  # other errors are not retried
        missing: dict[str, int] = {}
        inkpen.retrying(lambda: missing["x"], base_delay=0)
    for bad in ({"attempts": 0}, {"base_delay": -1}, {"max_delay": float("nan")}):
        with pytest.raises(UsageError):
            inkpen.retrying(lambda: None, **bad)


def test_retrying_with_its_defaults_outlasts_many_threads_over_few_accounts(
    make_store_url: Callable[[str], str],
) -> None:
    """The README's transfer from 8 threads over 2 accounts of a local directory (whose
    durable commits keep transactions open long enough to race), each run by
    ``inkpen.retrying`` with no arguments: every transfer commits (the default is a deadline,
    not a count of attempts), and the money adds up against a count of what each moved."""
    threads, transfers, accounts = 8, 25, ["a0", "a1"]
    with inkpen.open(make_store_url("local")) as book:
        book.write(inkpen.Batch().put("acct", "a0", b"1000").put("acct", "a1", b"1000"))
        start = threading.Barrier(threads)
        moved = [0] * threads
        failures: list[BaseException] = []

        def transfer(src: str, dst: str) -> None:
            with book.transaction("serializable") as txn:
                have, other = (int(v or b"0") for v in txn.get_many("acct", [src, dst]))
                txn.put("acct", src, str(have - 1).encode())
                txn.put("acct", dst, str(other + 1).encode())

        def worker(n: int) -> None:
            src, dst = accounts if n % 2 else accounts[::-1]
            start.wait()
            for _ in range(transfers):
                try:
                    inkpen.retrying(lambda: transfer(src, dst))
                except BaseException as exc:
                    failures.append(exc)
                    return
                moved[n] += 1

        workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        for worker_thread in workers:
            worker_thread.start()
        for worker_thread in workers:
            worker_thread.join()
        assert failures == []
        assert moved == [transfers] * threads
        sent = sum(moved[1::2]) - sum(moved[0::2])  # a0 -> a1 by odd threads, back by even
        assert book.get_many("acct", accounts) == [
            str(1000 - sent).encode(),
            str(1000 + sent).encode(),
        ]


class _Clock:
    """A clock that only the test moves: the injected sleep, and each attempt."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_retrying_stops_at_its_deadline_with_the_last_conflict() -> None:
    clock = _Clock()
    calls: list[int] = []

    def always() -> None:
        calls.append(len(calls))
        clock.now += 0.25  # each attempt takes a quarter of a second
        raise ConflictError(f"lost {len(calls)}", bucket=b"c", key=b"n", expected=1, actual=2)

    with pytest.raises(ConflictError) as raised:
        inkpen.retrying(always, sleep=clock.sleep, clock=clock)
    assert str(raised.value) == f"lost {len(calls)}"  # the last conflict
    assert 10.0 - 0.25 - 0.1 <= clock.now <= 10.0 + 0.25  # the default deadline: 10 s
    assert len(calls) > 10  # not the old count of 10 attempts
    assert all(0 <= w <= 0.1 for w in clock.slept)  # jittered, capped at max_delay
    assert len(clock.slept) == len(calls) - 1  # no wait after the last attempt

    clock = _Clock()
    calls.clear()
    with pytest.raises(ConflictError):
        inkpen.retrying(always, deadline=2, sleep=clock.sleep, clock=clock)
    assert 2.0 - 0.25 - 0.1 <= clock.now <= 2.0 + 0.25

    clock = _Clock()
    calls.clear()
    with pytest.raises(ConflictError):  # attempts bounds it, deadline lifted
        inkpen.retrying(always, 50, deadline=None, sleep=clock.sleep, clock=clock)
    assert len(calls) == 50 and clock.now > 10.0
    calls.clear()
    with pytest.raises(ConflictError):  # both given: whichever comes first
        inkpen.retrying(always, 3, sleep=clock.sleep, clock=clock)
    assert len(calls) == 3
    with pytest.raises(UsageError, match="retry for ever"):
        inkpen.retrying(always, deadline=None)
    for bad in ({"deadline": 0}, {"deadline": -1}, {"deadline": "10"}, {"clock": 3}):
        with pytest.raises(UsageError):
            inkpen.retrying(lambda: None, **bad)


def test_retrying_refuses_a_coroutine_function() -> None:
    async def bump() -> None:
        return None

    with pytest.raises(UsageError, match=r"inkpen\.aio\.retrying"):
        _ = inkpen.retrying(bump)  # what it would answer: never a coroutine
    with pytest.raises(UsageError, match=r"inkpen\.aio\.retrying"):
        _ = inkpen.retrying(lambda: bump())  # a plain function answering a coroutine
    with pytest.raises(UsageError, match=r"inkpen\.retrying"):
        asyncio.run(inkpen.aio.retrying(lambda: None))  # type: ignore[arg-type, return-value]


def test_async_retrying_stops_at_its_deadline() -> None:
    clock = _Clock()
    calls: list[int] = []

    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)

    async def always() -> None:
        calls.append(len(calls))
        clock.now += 0.5
        raise ConflictError(f"lost {len(calls)}", bucket=b"c", key=b"n", expected=1, actual=2)

    with pytest.raises(ConflictError) as raised:
        asyncio.run(inkpen.aio.retrying(always, sleep=sleep, clock=clock))
    assert str(raised.value) == f"lost {len(calls)}"
    assert 10.0 - 0.5 - 0.1 <= clock.now <= 10.0 + 0.5 and len(calls) > 10


# -- asyncio ------------------------------------------------------------------------------------


def test_async_transactions_commit_roll_back_and_conflict(url: str) -> None:
    async def main() -> None:
        async with inkpen.aio.open(url) as book:
            await book.put("b", "k", b"1")
            async with book.transaction("serializable") as txn:
                assert await txn.get("b", "k") == b"1"
                await txn.put("b", "k2", b"2")
                assert [k async for k in txn.keys("b")] == [b"k", b"k2"]
            assert await book.get("b", "k2") == b"2"
            with pytest.raises(RuntimeError):
                async with book.transaction() as txn:
                    await txn.put("b", "k3", b"3")
                    raise RuntimeError("stop")
            assert await book.get("b", "k3") is None
            racing = await book.transaction()
            await racing.put("b", "k", b"racing")
            await book.put("b", "k", b"first")
            with pytest.raises(ConflictError):
                await racing.commit()
            assert await book.get("b", "k") == b"first"

            async def bump() -> None:
                async with book.transaction() as txn:
                    await txn.put("b", "n", str(int(await txn.get("b", "n") or b"0") + 1).encode())

            await inkpen.aio.retrying(bump, base_delay=0)
            assert await book.get("b", "n") == b"1"
            assert book.sync._engine.commits.registered == 0

    asyncio.run(main())


# -- SeaweedFS ----------------------------------------------------------------------------------


@pytest.mark.s3
def test_transactions_on_s3(make_store_url: Callable[[str], str]) -> None:
    with inkpen.open(make_store_url("s3")) as book:
        book.put("acct", "a", b"50")
        book.put("acct", "b", b"50")
        first = book.transaction("serializable")
        second = book.transaction("serializable")
        for txn, src, dst in ((first, "a", "b"), (second, "b", "a")):
            values = txn.get_many("acct", [src, dst])
            txn.put("acct", src, str(int(values[0] or b"0") - 10).encode())
            txn.put("acct", dst, str(int(values[1] or b"0") + 10).encode())
        first.commit()
        with pytest.raises(ConflictError):
            second.commit()
        assert book.get_many("acct", ["a", "b"]) == [b"40", b"60"]
    with inkpen.open(book.url) as again:  # durable, as any batch
        assert again.get_many("acct", ["a", "b"]) == [b"40", b"60"]


# -- what a transaction pins ----------------------------------------------------------------------


@pytest.mark.parametrize("anchor_seconds", [0.0, 60.0])
def test_reads_survive_merges_compaction_and_gc_while_a_transaction_is_open(
    url: str, anchor_seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files a transaction's views name stay until it ends, whether its snapshot is its own
    (a new anchor per transaction) or shared with older ones."""
    monkeypatch.setattr(inkpen.transaction, "ANCHOR_SECONDS", anchor_seconds)
    with inkpen.open(url, **TINY) as book:
        model = {f"k{i:03d}": f"v{i}".encode() * 40 for i in range(60)}
        for key, value in model.items():
            book.put("b", key, value)
        book.flush()
        older = book.transaction()
        txn = book.transaction("serializable")
        assert book.stats()["snapshots"] == (2 if anchor_seconds == 0 else 1)
        for i in range(60):  # replace everything, and make the engine drop the old files
            book.put("b", f"k{i:03d}", b"new" * 40)
        book.flush()
        book.compact_ledger()
        book.compact_journal()
        book.run_gc(min_age=0)
        assert dict((k.decode(), v) for _, k, v in txn.objects("b")) == model
        assert txn.get_many("b", list(model)) == list(model.values())
        older.close()
        txn.close()
        assert book._engine.commits.registered == 0


def test_concurrent_transactions_share_one_snapshot(
    book: inkpen.Bookie, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inkpen.transaction, "ANCHOR_SECONDS", 3600.0)
    txns = [book.transaction() for _ in range(5)]
    assert _pinned(book) == (1, 5)
    for txn in txns:
        txn.close()
    assert _pinned(book) == (1, 0)  # idle, kept for the next transactions
    book._anchors._expire()  # what the idle timer does
    assert _pinned(book) == (0, 0)
