"""Small values leave the journal once the ledger holds them.

A value of at most ``inline_value_bytes`` lives in its ledger entry too. Once the ledger has
persisted that entry, the journal keeps the put without its body (a VALUE_IN_LEDGER record): the
roll writes it so, and journal compaction turns older records into it. Everything that read
those bodies from the journal keeps working: the change feed takes the value from the ledger,
a feed cursor keeps the bodies above it, a hot backup copies the ledger with the journal,
replay never needs them. Each test checks the store against a model dict, and counts the kinds
of records the journal holds.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable, Iterator

import pytest

import inkpen
from inkpen.actors.journal.replay import replay
from inkpen.actors.kernel.views import JournalHandle
from inkpen.errors import CorruptionError, FeedGapError, NotFoundError
from inkpen.formats.journal import JournalEntry, JournalReader, Kind, build_journal, iter_journal
from inkpen.formats.keys import object_key
from inkpen.manifest import ManifestStore
from inkpen.manifest.feed_cursors import create_feed_cursor
from inkpen.manifest.model import JournalFileDescriptor
from inkpen.objectstore import open_store
from support.engine import TINY
from support.hooks import HookedStore
from support.waiting import wait_until

LIMIT = 1024
"""The default ``inline_value_bytes``."""
NO_EARLY_ROLL = {"roll_segments": 100_000, "roll_bytes": 1 << 30}
"""Nothing rolls before close: every put's segment waits, and the close rolls it persisted."""

Model = dict[tuple[str, str], bytes]


def journal_kinds(url: str) -> collections.Counter[tuple[str, bool]]:
    """(kind name, body small enough for the ledger) of every record of every journal file and
    segment the store holds."""
    store = open_store(url)
    try:
        found: collections.Counter[tuple[str, bool]] = collections.Counter()
        for info in store.list("journal/"):
            for entry in iter_journal(store.get(info.key), info.key):
                small = entry.value is None or len(entry.value) <= LIMIT
                found[(entry.kind.name, small)] += 1
        return found
    finally:
        store.close()


def file_records(url: str, checkpoint: str | None = None) -> Iterator[tuple[str, JournalEntry]]:
    """Every record of the journal files (not segments) the latest manifest names, or the
    manifest ``checkpoint`` pins (which keeps its files while a writer runs)."""
    store = open_store(url)
    try:
        manifests = ManifestStore(store)
        latest = manifests.latest()
        assert latest is not None
        manifest = latest.manifest
        if checkpoint is not None:
            pinned = manifest.checkpoint(checkpoint)
            assert pinned is not None
            manifest = manifests.read(pinned.manifest_id)
        for descriptor in manifest.journal.files:
            data = store.get(descriptor.name)
            for entry in iter_journal(data, descriptor.name):
                yield descriptor.name, entry
    finally:
        store.close()


def value_of(i: int, rng: random.Random) -> bytes:
    """Mostly small values, every tenth one larger than the ledger keeps."""
    size = LIMIT + 1 + rng.randrange(3000) if i % 10 == 0 else rng.randrange(0, LIMIT + 1)
    return rng.randbytes(size)


def load(
    book: inkpen.Bookie,
    keys: int,
    writes: int,
    *,
    threads: int = 4,
    seed: int = 1,
    written: list[bytes] | None = None,
) -> Model:
    """``writes`` puts over ``keys`` keys from ``threads`` threads (each thread its own keys, so
    the last write of a key is known); the model of what the store must hold. ``written``, if
    given, receives every value put."""
    model: Model = {}
    lock = threading.Lock()

    def writer(t: int) -> None:
        rng = random.Random(seed * 100 + t)
        for i in range(writes // threads):
            key = f"t{t}-{rng.randrange(keys // threads):05d}"
            value = value_of(i, rng)
            book.put("b", key, value)
            with lock:
                model[("b", key)] = value
                if written is not None:
                    written.append(value)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return model


def assert_holds(book: inkpen.Bookie | inkpen.Reader, model: Model) -> None:
    for (bucket, key), value in model.items():
        assert book.get(bucket, key) == value, key
    keys = sorted(k for _, k in model)
    assert book.get_many("b", keys) == [model[("b", k)] for k in keys]
    with book.objects("b") as rows:
        assert {("b", k.decode()): v for _, k, v in rows} == model
    with book.objects("b", order="sqn") as rows:
        assert {("b", k.decode()): v for _, k, v in rows} == model


def latest_changes(changes: list[inkpen.Change]) -> Model:
    latest: Model = {}
    for change in changes:
        if change.kind == "put":
            assert change.value is not None
            latest[(change.bucket.decode(), change.key.decode())] = change.value
        else:
            latest.pop((change.bucket.decode(), change.key.decode()), None)
    return latest


def test_a_clean_close_leaves_every_small_body_to_the_ledger(store_url: str) -> None:
    written: list[bytes] = []
    with inkpen.open(store_url, **NO_EARLY_ROLL) as book:
        model = load(book, keys=400, writes=400, written=written)
    kinds = journal_kinds(store_url)
    # Every small put (a replaced one too) is a record without its body, every large one keeps
    # it, and nothing else is there.
    small = sum(1 for v in written if len(v) <= LIMIT)
    assert kinds == {("VALUE_IN_LEDGER", True): small, ("OBJECT", False): len(written) - small}
    with inkpen.open(store_url) as book:
        assert_holds(book, model)
        # A replaced value the ledger held is gone with its ledger entry: the feed skips those
        # when asked to, and gives every key's current value.
        changes = list(book.changes(gaps="skip"))
        large_replaced = sum(1 for v in written if len(v) > LIMIT) - sum(
            1 for v in model.values() if len(v) > LIMIT
        )
        assert len(changes) == len(model) + large_replaced
        assert latest_changes(changes) == model
    with inkpen.open_reader(store_url) as reader:
        assert_holds(reader, model)
        assert latest_changes(list(reader.changes(gaps="skip"))) == model


def test_rolls_under_load_leave_out_the_bodies_the_ledger_has_persisted(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        model = load(book, keys=200, writes=1200)
        # While the writer runs, what it has rolled already holds records without bodies (read
        # at a checkpoint: a re-roll may replace and delete a file meanwhile).
        pinned = book.checkpoint(lifetime=120)
        rolled = collections.Counter(e.kind.name for _, e in file_records(store_url, pinned))
        assert rolled["VALUE_IN_LEDGER"] > 0, rolled
        assert_holds(book, model)
    # A large value never leaves the journal.
    kinds = journal_kinds(store_url)
    assert ("VALUE_IN_LEDGER", False) not in kinds, kinds
    with inkpen.open(store_url, **TINY) as book:
        assert_holds(book, model)
        assert latest_changes(list(book.changes(gaps="skip"))) == model


def test_a_replaced_value_the_ledger_held_is_a_gap_in_the_feed(store_url: str) -> None:
    with inkpen.open(store_url, **NO_EARLY_ROLL) as book:
        book.put("b", "k", b"first")
        book.put("b", "other", b"o")
    with inkpen.open(store_url, **NO_EARLY_ROLL) as book:
        book.put("b", "k", b"second")  # SQN 3 replaces SQN 1, whose body the ledger held
        with pytest.raises(FeedGapError, match="SQN 1 ") as info:
            list(book.changes())
        assert info.value.sqn == 1
        skipped = list(book.changes(gaps="skip"))
        assert [(c.sqn, c.key, c.value) for c in skipped] == [
            (2, b"other", b"o"),
            (3, b"k", b"second"),
        ]
        assert [c.value for c in book.changes(1)] == [b"o", b"second"]


def test_a_feed_cursor_keeps_the_bodies_above_it(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        first = load(book, keys=40, writes=80, seed=2)
        book.put("b", "marker", b"m")
        first[("b", "marker")] = b"m"
        head = book.head("b", "marker")
        assert head is not None
        held_from = head.sqn
        book.create_feed_cursor("consumer", held_from)
        second = load(book, keys=40, writes=400, seed=3)
    # Nothing above the cursor lost its body, though the ledger has persisted all of it.
    for _, entry in file_records(store_url):
        assert entry.kind is not Kind.VALUE_IN_LEDGER or entry.sqn <= held_from, entry.sqn
    with inkpen.open(store_url, **TINY) as book:
        changes = list(book.changes(held_from))  # no gap, though keys were written again
        assert [c.sqn for c in changes] == list(range(held_from + 1, held_from + 401))
        assert latest_changes(changes) == {k: v for k, v in second.items()}
        assert_holds(book, {**first, **second})


def test_a_cursor_made_during_a_roll_makes_the_roll_keep_the_bodies(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("local")

    def another_process_makes_a_cursor() -> None:
        other = open_store(url)
        try:
            create_feed_cursor(ManifestStore(other), "late", 0)
        finally:
            other.close()

    store = HookedStore(open_store(url))
    # The roll at close decides which bodies to leave out, writes its file, then commits: the
    # cursor lands between the two, so the commit must refuse and the roll keep every body.
    store.before_create("journal/compacted/", another_process_makes_a_cursor)
    try:
        with inkpen.open(store, **NO_EARLY_ROLL) as book:
            model = load(book, keys=100, writes=100)
        assert store.fired == ["journal/compacted/"]
    finally:
        store.close()
    kinds = collections.Counter(e.kind.name for _, e in file_records(url))
    assert kinds["VALUE_IN_LEDGER"] == 0, kinds
    with inkpen.open(url) as book:
        changes = list(book.changes())  # the cursor at 0 kept every body: no gap
        assert [c.sqn for c in changes] == list(range(1, len(changes) + 1))
        assert latest_changes(changes) == model
        assert_holds(book, model)


LATE_LEDGER = {**TINY, "l0_cache_entries": 100_000, "ledger_cache_entries": 100_000}
"""The ledger persists nothing until asked: the rolls cannot wait for it and keep the bodies."""


def small_bodies_kept(url: str, upto: int) -> int:
    """Records up to SQN ``upto`` in the journal files that still hold a small body; -1 when a
    file the manifest named was replaced and deleted while this read (look again)."""
    try:
        return sum(
            1
            for _, e in file_records(url)
            if e.sqn <= upto
            and e.kind is Kind.OBJECT
            and e.value is not None
            and len(e.value) <= LIMIT
        )
    except NotFoundError:
        return -1


def test_files_rolled_before_the_ledger_persisted_are_rolled_again(store_url: str) -> None:
    with inkpen.open(store_url, **LATE_LEDGER) as book:
        model = load(book, keys=60, writes=200)
        book.put("b", "last", b"l")
        model[("b", "last")] = b"l"
        head = book.head("b", "last")
        assert head is not None
        assert small_bodies_kept(store_url, head.sqn) > 0  # rolled while nothing persisted
        book.flush()  # the ledger persists everything written so far
        book.put("b", "poke", b"p")  # the Inker looks again after a write: a re-roll is due
        model[("b", "poke")] = b"p"
        wait_until(
            lambda: small_bodies_kept(store_url, head.sqn) == 0, "the re-roll of those files"
        )
        metrics = book.metrics()
        assert metrics.journal_rerolls > 0
        assert 0 < metrics.journal_reroll_bytes_written < metrics.journal_reroll_bytes_read
        assert_holds(book, model)
        more = load(book, keys=60, writes=100, seed=4)
        model.update(more)
    # The close persisted the rest, rolled it, and rolled again what was rolled before.
    assert ("OBJECT", True) not in journal_kinds(store_url)
    with inkpen.open(store_url) as book:
        assert_holds(book, model)
        assert latest_changes(list(book.changes(gaps="skip"))) == model


def test_journal_compaction_leaves_current_small_bodies_to_the_ledger(store_url: str) -> None:
    # Rolls that cannot wait for the ledger (it persists nothing) keep bodies, and a writer
    # that stops before it could roll them again leaves them there: its successor knows nothing
    # of them. Compaction, judging each record against the ledger, leaves them out.
    book = inkpen.open(store_url, **LATE_LEDGER)
    model = load(book, keys=60, writes=300)
    book.abandon()
    before = collections.Counter(e.kind.name for _, e in file_records(store_url))
    assert before["OBJECT"] > len(model), before  # replaced and current puts with bodies
    with inkpen.open(store_url, **TINY) as book:
        book.flush()  # the replayed entries: persisted, so compaction may judge them
        reduced = 0
        for _ in range(50):  # until no run of files is worth compacting
            report = book.compact_journal()
            reduced += report.entries_reduced
            if not report.compacted:
                break
        assert reduced > 0
        assert_holds(book, model)
    after = collections.Counter((e.kind.name, e.sqn) for _, e in file_records(store_url))
    objects = sum(n for (kind, _), n in after.items() if kind == "OBJECT")
    trimmed = sum(n for (kind, _), n in after.items() if kind == "VALUE_IN_LEDGER")
    assert trimmed > 0
    assert objects < before["OBJECT"]
    with inkpen.open(store_url, **TINY) as book:
        assert_holds(book, model)
        assert latest_changes(list(book.changes(gaps="skip"))) == model


def test_a_ledger_without_values_keeps_the_journal_whole(local_url: str) -> None:
    # Written with the values in the journal alone (as before values moved into the ledger),
    # then opened with the default: nothing the ledger does not hold may leave the journal.
    with inkpen.open(local_url, inline_value_bytes=0, **NO_EARLY_ROLL) as book:
        model = load(book, keys=100, writes=100)
    with inkpen.open(local_url, **TINY) as book:
        book.compact_journal()
        assert_holds(book, model)
    kinds = journal_kinds(local_url)
    assert ("VALUE_IN_LEDGER", True) not in kinds, kinds
    with inkpen.open(local_url, inline_value_bytes=0) as book:
        assert_holds(book, model)


def test_a_later_writer_with_a_smaller_limit_still_reads_them(local_url: str) -> None:
    with inkpen.open(local_url, **NO_EARLY_ROLL) as book:
        model = load(book, keys=100, writes=100)
    with inkpen.open(local_url, inline_value_bytes=16) as book:
        assert_holds(book, model)
        more = load(book, keys=100, writes=100, seed=9)
        model.update(more)
        assert_holds(book, model)
    with inkpen.open(local_url, inline_value_bytes=16) as book:
        assert_holds(book, model)
        assert latest_changes(list(book.changes(gaps="skip"))) == model


def test_a_hot_backup_takes_the_ledger_and_opens_as_the_database(
    store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    url, dest = make_store_url(store_kind), make_store_url(store_kind)
    with inkpen.open(url, **TINY) as book:
        model = load(book, keys=80, writes=300)
        book.flush()
        first = book.hot_backup()(dest)
        assert first.files_copied == first.files > 0
        more = load(book, keys=80, writes=100, seed=5)
        model.update(more)
        second = book.hot_backup()(dest)
        assert second.files_kept > 0  # only what is new is copied
    # The source's journal lost small bodies: the backup could not be rebuilt from it alone.
    assert journal_kinds(dest)[("VALUE_IN_LEDGER", True)] > 0
    with inkpen.open(dest, **TINY) as book:
        assert_holds(book, model)
        assert latest_changes(list(book.changes(gaps="skip"))) == model
    restored = make_store_url(store_kind)
    inkpen.restore(dest, restored)
    with inkpen.open(restored) as book:
        assert_holds(book, model)


def test_replay_refuses_a_record_without_its_body_above_the_persisted_sqn() -> None:
    entries = [
        JournalEntry(1, Kind.OBJECT, object_key(b"b", b"a"), b"x", (), None, 1),
        JournalEntry(2, Kind.VALUE_IN_LEDGER, object_key(b"b", b"b"), None, (), None, 2),
    ]
    data = build_journal(entries, writer_epoch=1)
    name = "journal/compacted/x.jnl"
    reader = JournalReader.open(name, len(data), lambda s, e: data[s:e])
    descriptor = JournalFileDescriptor(name, 1, 2, 2, len(data))
    handle = JournalHandle(descriptor, reader)
    # At or above the record, the ledger holds it: nothing to replay.
    assert list(replay([handle], [], 2)) == []
    with pytest.raises(CorruptionError, match="lost entries it persisted") as info:
        list(replay([handle], [], 0))
    assert info.value.object_name == name


@pytest.fixture
def local_url(make_store_url: Callable[[str], str]) -> str:
    return make_store_url("local")
