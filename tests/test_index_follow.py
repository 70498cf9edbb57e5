"""Index entries follow their object, on every store.

A delete removes every index entry of its object without naming them, a put that does not name
an earlier entry keeps it, and a key deleted (or expired) and then put again without its old
terms answers no index query with them: not from the live ledger, not after the entries moved to
SSTs, not after a crash and replay, a journal compaction or a hot backup rebuilt from the journal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest

import inkpen
from inkpen.actors.journal.changes import INDEX_REMOVE, ChangeMaker
from inkpen.actors.journal.intake import WriteIntake
from inkpen.actors.kernel.views import ViewBoard
from inkpen.actors.write.conditions import ConditionChecker
from inkpen.formats.keys import (
    LedgerKey,
    Tag,
    decode_key,
    index_key,
    object_key,
    prefix_end,
    reverse_key,
    reverse_parts,
    reverse_prefix,
)
from support.engine import TINY, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def book(store_url: str, clock: FakeClock) -> Iterator[inkpen.Bookie]:
    with inkpen.open(store_url, clock=clock, **TINY) as opened:
        yield opened


def terms(source: inkpen.Bookie | inkpen.Reader, bucket: str = "u") -> list[tuple[bytes, bytes]]:
    """Every (term, key) of the bucket's two fields, as index queries answer them."""
    found = []
    for field in ("city_bin", "age_int"):
        found += [
            (field.encode() + b"=" + term, key)
            for term, key in source.index_query(bucket, field, "", "\xff", return_terms=True)
        ]
    return sorted(found)


def e(field: str, term: str, key: str) -> tuple[bytes, bytes]:
    return (f"{field}={term}".encode(), key.encode())


OSLO = ("add", "city_bin", "Oslo")
ROME = ("add", "city_bin", "Rome")
AGE = ("add", "age_int", "30")


# -- keys -----------------------------------------------------------------------------------


def test_reverse_keys_sort_apart_and_decode() -> None:
    key = reverse_key(b"u", b"al\x00ice", b"city_bin", b"Os\x00lo")
    assert key[0] == Tag.REVERSE
    assert decode_key(key) == LedgerKey(Tag.REVERSE, b"u", b"al\x00ice", b"city_bin", b"Os\x00lo")
    assert reverse_parts(key) == (b"city_bin", b"Os\x00lo")
    prefix = reverse_prefix(b"u", b"al\x00ice")
    assert prefix <= key < prefix_end(prefix)
    # another object's entries, even one whose key extends this one's, lie outside the range
    assert not prefix <= reverse_key(b"u", b"al\x00ice2", b"f", b"t") < prefix_end(prefix)
    # no object, head or index key falls among reverse keys
    for other in (object_key(b"u", b"alice"), index_key(b"u", b"city_bin", b"Oslo", b"alice")):
        assert other < reverse_prefix(b"", b"")
    with pytest.raises(ValueError):
        object_key(b"u", b"k", tag=Tag.REVERSE)
    with pytest.raises(ValueError):
        reverse_parts(object_key(b"u", b"k"))


# -- the API --------------------------------------------------------------------------------


@pytest.mark.parametrize("in_files", [False, True], ids=["cached", "in_files"])
def test_delete_without_terms_drops_every_entry_and_a_reput_brings_none_back(
    store_url: str, clock: FakeClock, in_files: bool
) -> None:
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        book.put("u", "alice", b"a", indexes=[OSLO, AGE])
        book.put("u", "alice", b"a2", indexes=[ROME])  # keeps Oslo and 30
        book.put("u", "bob", b"b", indexes=[OSLO])
        assert terms(book) == [
            e("age_int", "30", "alice"),
            e("city_bin", "Oslo", "alice"),
            e("city_bin", "Oslo", "bob"),
            e("city_bin", "Rome", "alice"),
        ]
        if in_files:  # the delete must find the entries in SSTs
            book.flush()
            book.compact_ledger()
        book.delete("u", "alice")  # names no index entry
        assert terms(book) == [e("city_bin", "Oslo", "bob")]
        book.put("u", "alice", b"a3")  # put again without the old terms
        assert book.get("u", "alice") == b"a3"
        assert terms(book) == [e("city_bin", "Oslo", "bob")]
        book.put("u", "alice", b"a4", indexes=[AGE])  # a term named again is back
        assert terms(book) == [e("age_int", "30", "alice"), e("city_bin", "Oslo", "bob")]
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        assert terms(book) == [e("age_int", "30", "alice"), e("city_bin", "Oslo", "bob")]


def test_a_put_that_does_not_name_a_term_keeps_it(book: inkpen.Bookie) -> None:
    book.put("u", "alice", b"a", indexes=[OSLO])
    book.put("u", "alice", b"a2", indexes=[AGE])
    book.put("u", "alice", b"a3")
    assert terms(book) == [e("age_int", "30", "alice"), e("city_bin", "Oslo", "alice")]
    book.put("u", "alice", b"a4", indexes=[("remove", "city_bin", "Oslo")])
    assert terms(book) == [e("age_int", "30", "alice")]


def test_batch_delete_drops_entries_of_the_ledger_and_of_the_same_batch(
    book: inkpen.Bookie,
) -> None:
    book.put("u", "alice", b"a", indexes=[OSLO])
    book.put("u", "bob", b"b", indexes=[OSLO])
    batch = inkpen.Batch()
    batch.put("u", "alice", b"a2", indexes=[AGE])  # added earlier in the same batch
    batch.delete("u", "alice")
    batch.put("u", "alice", b"a3")
    batch.delete("u", "bob")
    batch.put("u", "bob", b"b2", indexes=[ROME])
    book.write(batch)
    assert book.get("u", "alice") == b"a3"
    assert terms(book) == [e("city_bin", "Rome", "bob")]


def test_conditional_delete_drops_entries_only_when_it_lands(book: inkpen.Bookie) -> None:
    book.put("u", "alice", b"a", indexes=[OSLO, AGE])
    head = book.head("u", "alice")
    assert head is not None
    sqn = head.sqn
    with pytest.raises(inkpen.ConflictError):
        book.delete("u", "alice", if_sqn=sqn + 100)
    assert terms(book) == [e("age_int", "30", "alice"), e("city_bin", "Oslo", "alice")]
    batch = inkpen.Batch()
    batch.delete("u", "alice", if_sqn=sqn)
    book.write(batch)
    book.put("u", "alice", b"again", if_sqn=0)
    assert terms(book) == []


def test_a_delete_with_an_add_spec_is_a_usage_error_and_writes_nothing(
    book: inkpen.Bookie,
) -> None:
    book.put("u", "alice", b"a", indexes=[OSLO])
    before = book.stats()["sqn"]
    with pytest.raises(inkpen.UsageError, match='never "add"'):
        book.delete("u", "alice", indexes=[AGE])
    batch = inkpen.Batch().put("u", "bob", b"b").delete("u", "alice", indexes=[AGE])
    with pytest.raises(inkpen.UsageError):
        book.write(batch)
    assert book.stats()["sqn"] == before
    assert book.get("u", "alice") == b"a" and book.get("u", "bob") is None
    book.delete("u", "alice", indexes=[("remove", "city_bin", "Oslo")])  # removes are fine
    assert terms(book) == []


# -- expiry ---------------------------------------------------------------------------------


def test_entries_of_an_expired_object_do_not_come_back_with_a_reput(
    book: inkpen.Bookie, clock: FakeClock
) -> None:
    book.put("u", "alice", b"a", indexes=[OSLO])  # no ttl
    book.put("u", "alice", b"a2", ttl=5)  # the object now expires: so does Oslo
    book.put("u", "bob", b"b", indexes=[OSLO], ttl=5)  # the entry expires with its own put
    assert terms(book) == [e("city_bin", "Oslo", "alice"), e("city_bin", "Oslo", "bob")]
    clock.advance(6)
    assert terms(book) == []
    book.put("u", "alice", b"a3")
    book.put("u", "bob", b"b3")
    assert terms(book) == []


def test_a_ttl_put_shortens_entries_that_would_outlive_it_and_no_others(
    book: inkpen.Bookie, clock: FakeClock
) -> None:
    book.put("u", "alice", b"a", indexes=[AGE], ttl=2)  # 30 expires at +2
    book.put("u", "alice", b"a1", indexes=[OSLO])  # Oslo never expires; 30 keeps +2
    book.put("u", "alice", b"a2", ttl=10)  # Oslo would outlive it: now +10; 30 stays at +2
    book.put("u", "alice", b"a3")  # no ttl: the object lives on, the entries keep their expiry
    clock.advance(3)
    assert terms(book) == [e("city_bin", "Oslo", "alice")]
    clock.advance(8)
    assert book.get("u", "alice") == b"a3"
    assert terms(book) == []


# -- the writer's view of recent segments ----------------------------------------------------


def test_the_checker_sees_entries_of_earlier_units_of_the_segment_and_not_rejected_ones() -> None:
    """Units of one intake batch (one segment): a delete's removals include the entries an
    earlier unit added, but not those of a unit rejected by its condition."""
    make = ChangeMaker(inkpen.Options())
    intake = WriteIntake(1024 * 1024)
    opened: list[object] = []
    intake.connect(opened.append, opened.append)
    batch, _ = intake.submit(make.put("u", "k", b"a", [OSLO], None))
    intake.submit(make.put("u", "k", b"b", [AGE], None, if_sqn=7))  # rejected: k is at SQN 1
    intake.submit(make.delete("u", "k", [("remove", "city_bin", "Paris")]))
    assert batch.expands and batch.conditional
    accepted = ConditionChecker(ViewBoard()).check(batch, 1, 0)
    assert [c.value for c in accepted] == [b"a", None]
    assert accepted[1].index_specs == (
        (INDEX_REMOVE, b"city_bin", b"Paris"),
        (INDEX_REMOVE, b"city_bin", b"Oslo"),
    )


def test_a_delete_sees_segments_written_but_not_yet_cached(
    store_url: str, clock: FakeClock
) -> None:
    """Many writers at once: puts with terms and deletes of the same keys land in segments the
    Bookie has not cached yet; no deleted key keeps an entry."""
    import threading

    with inkpen.open(store_url, clock=clock, **TINY) as book:

        def work(worker: int) -> None:
            for round_ in range(15):
                key = f"k{worker}-{round_ % 3}"
                book.put("u", key, b"v", indexes=[("add", "city_bin", f"t{round_}")])
                book.put("u", key, b"w", indexes=[AGE])
                book.delete("u", key)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for worker in range(6):
            for i in range(3):
                book.put("u", f"k{worker}-{i}", b"again")
        assert terms(book) == []


# -- replay, compaction, backup ----------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, threading
    import inkpen
    book = inkpen.open(sys.argv[1], ledger_cache_entries=4, roll_segments=1000)
    book.put("u", "alice", b"a", indexes=[("add", "city_bin", "Oslo"), ("add", "age_int", "30")])
    book.put("u", "bob", b"b", indexes=[("add", "city_bin", "Oslo")])
    book.flush()  # alice's entries are in an SST; the delete reads them there
    book.put("u", "alice", b"a2", indexes=[("add", "city_bin", "Rome")])
    book.delete("u", "alice")
    print("acknowledged", flush=True)
    threading.Event().wait()  # until killed
    """
)


@pytest.fixture
def shared_url(durable_store_url: str) -> str:
    """A store another process can open too."""
    return durable_store_url


def test_a_killed_writer_replays_the_removals_of_its_deletes(shared_url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, shared_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "acknowledged\n", child.stderr.read() if child.stderr else line
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=60)
    with inkpen.open(shared_url) as book:
        assert book.get("u", "alice") is None
        book.put("u", "alice", b"back")
        assert terms(book) == [e("city_bin", "Oslo", "bob")]
    with inkpen.open_reader(shared_url) as reader:
        assert terms(reader) == [e("city_bin", "Oslo", "bob")]


def test_journal_compaction_and_a_backup_rebuilt_from_the_journal_keep_removals(
    store_url: str, make_store_url: Callable[[str], str], store_kind: str, clock: FakeClock
) -> None:
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        for i in range(20):
            book.put("u", f"k{i}", b"v" * 100, indexes=[OSLO, ("add", "age_int", f"{i}")])
        for i in range(20):
            book.put("u", f"k{i}", b"w" * 100)  # replaced values: compaction has work
        for i in range(0, 20, 2):
            book.delete("u", f"k{i}")
        book.flush()
        book.compact_ledger()
        book.compact_journal()
        expected = sorted(
            [e("city_bin", "Oslo", f"k{i}") for i in range(1, 20, 2)]
            + [e("age_int", f"{i}", f"k{i}") for i in range(1, 20, 2)]
        )
        assert terms(book) == expected
        backup = make_store_url(store_kind)
        book.hot_backup()(backup)
    with inkpen.open(backup, clock=clock, **TINY) as restored:
        for i in range(20):
            restored.put("u", f"k{i}", b"again")
        assert terms(restored) == expected
