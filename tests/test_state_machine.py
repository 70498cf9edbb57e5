"""The whole public API of a Bookie agrees with a reference model, whatever the engine does inside.

A Hypothesis rule-based state machine drives one database through puts (with index specs and
TTLs), deletes (with index removals; a delete takes every index entry of its object, and a key
put again without its old terms must not answer for them), reads, index queries, every fold,
snapshots, a moving clock, L0 flushes, ledger merges, journal compaction, clean and crashed
reopens, garbage collection and a second writer taking over. Tiny file and cache sizes make a
few writes flush, merge and roll, and the key space is small, so overwrites, deletes and index
churn keep colliding in every file.
After every step the engine's counters must be sane and a rotating sample of keys must read back
exactly as :class:`support.model.Model` says; after every reopen everything is compared.

The same machine runs on the memory store, on SeaweedFS (fewer examples), and on a store that
injects seeded failures into every operation (:class:`FaultyMachine`). There an acknowledged write
must survive, a definitely failed one must never appear, and a write whose outcome is unknown is
settled once by the SQN the reopened database reports and must then read back consistently
(including the answer the failed Bookie gave before it was abandoned). Reads may fail with
``StoreError``; a fold that fails part-way must have yielded a correct prefix.
"""

from __future__ import annotations

import random
import re
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import inkpen
from inkpen.actors.kernel.throttle import NONE, STOP
from inkpen.formats.journal import EMPTY_JOURNAL_SIZE, decode_journal
from inkpen.manifest.checkpoints import delete_checkpoint as remove_checkpoint
from inkpen.manifest.fencing import scan_segments
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.paths import segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.faults import FaultPlan, FaultyStore
from inkpen.objectstore.memory import drop_space
from inkpen.objectstore.seaweed import SeaweedServer
from support.engine import TINY, FakeClock
from support.hooks import HookedStore
from support.latency_proxy import LATENCY_KIND, ProxyProcess
from support.model import IndexSpec, Journaled, Model, expected_hash
from support.profiles import machine_settings
from support.waiting import wait_until

BUCKETS = ("b0", "b1", "b\x00")
KEYS = ("k0", "k1", "k2", "k", "k\x00", "k10")
FIELDS = ("f_bin", "g_int")
TERMS = ("", "a", "a0", "a1", "b", "b\x00")
BOUNDS = ("", "a", "a0", "a1", "b", "c")
REGEXES = ("^a", "0$", "a|b", "^$", "\x00")
TERM_END = "z"
MAX_SNAPSHOTS = 3
MAX_CHECKPOINTS = 2
SAMPLE_PER_STEP = 2
OPEN_ATTEMPTS = 8
FENCED_WRITE_ATTEMPTS = 4
HELD_PUTS = 2
HELD_DEADLINE = 30.0
STORM = 0.33
OUTAGES = (0.0, 0.0, 0.5, 1.0)
"""How often reads fail during an outage: never (every lost response is settled by reading back),
half the time, always (the outcome stays unknown; the Inker retries for a few seconds first)."""
SIZES: dict[str, dict[str, Any]] = {
    "tiny": TINY,
    "roomier": {
        **TINY,
        "ledger_cache_entries": 40,
        "l0_cache_entries": 120,
        "l1_target_files": 3,
        "sst_target_bytes": 8192,
        "sst_block_bytes": 1024,
        "roll_segments": 20,
        "journal_file_target_bytes": 16384,
    },
}

buckets = st.sampled_from(BUCKETS)
keys = st.sampled_from(KEYS)
specs = st.lists(
    st.tuples(
        st.sampled_from(("add", "add", "remove")), st.sampled_from(FIELDS), st.sampled_from(TERMS)
    ),
    max_size=3,
)
removals = st.lists(
    st.tuples(st.just("remove"), st.sampled_from(FIELDS), st.sampled_from(TERMS)), max_size=2
)
ttls = st.sampled_from((None, None, None, 1, 2, 5))
sizes = st.sampled_from((0, 3, 40, 300, 3000))
changes = st.one_of(
    st.tuples(st.just("put"), buckets, keys, sizes, st.booleans(), specs, ttls),
    st.tuples(st.just("delete"), buckets, keys, removals),
)
conditions = st.sampled_from((None, None, None, "right", "wrong"))
bounds = st.sampled_from(BOUNDS)
key_bounds = st.sampled_from((None, *KEYS))


# The book is untyped here: these calls break the API's types on purpose.
BAD_CALLS: dict[str, Callable[[Any], Any]] = {
    "empty key": lambda book: book.put("b0", "", b"v"),
    "empty bucket": lambda book: book.delete("", "k0"),
    "str value": lambda book: book.put("b0", "k0", "not bytes"),
    "key too long": lambda book: book.put("b0", "k" * (64 * 1024 + 1), b"v"),
    "zero ttl": lambda book: book.put("b0", "k0", b"v", ttl=0),
    "negative ttl": lambda book: book.put("b0", "k0", b"v", ttl=-1),
    "endless ttl": lambda book: book.put("b0", "k0", b"v", ttl=float("inf")),
    "nan ttl": lambda book: book.put("b0", "k0", b"v", ttl=float("nan")),
    "huge ttl": lambda book: book.put("b0", "k0", b"v", ttl=1e300),
    "unknown index op": lambda book: book.put("b0", "k0", b"v", indexes=[("append", "f", "t")]),
    "short index spec": lambda book: book.delete("b0", "k0", indexes=[("remove", "f_bin")]),
    "add spec on a delete": lambda book: book.delete("b0", "k0", indexes=[("add", "f_bin", "t")]),
    "indexes as a string": lambda book: book.put("b0", "k0", b"v", indexes="add f t"),
    "empty index field": lambda book: book.put("b0", "k0", b"v", indexes=[("add", "", "t")]),
    "bad regex": lambda book: book.index_query("b0", "f_bin", "a", "b", regex="("),
    "bad fold order": lambda book: book.objects("b0", order="size"),
    "range without bucket": lambda book: book.heads(None, "k0", None),
    "int key": lambda book: book.get("b0", 5),
}
"""Calls the API must refuse with UsageError at once, changing nothing."""


def injected(exc: BaseException) -> bool:
    """Whether an error is what an injected store failure looks like to the caller.

    Absence and lost create races are answers, not failures: the engine must never let them
    out, so they are not excused by the faulty store.
    """
    return isinstance(exc, inkpen.StoreError) and not isinstance(
        exc, inkpen.NotFoundError | inkpen.AlreadyExistsError
    )


def make_value(n: int, size: int, compressible: bool) -> bytes:
    """A value unique to write ``n`` (``size`` 0: the empty value)."""
    if size == 0:
        return b""
    body = b"x" * size if compressible else random.Random(n).randbytes(size)
    return b"v%d:" % n + body


def sample_keys(step: int) -> list[tuple[str, str]]:
    """A rotating choice of (bucket, key) pairs: over many steps every pair gets read."""
    every = [(b, k) for b in BUCKETS for k in KEYS]
    return [every[(step * SAMPLE_PER_STEP + i) % len(every)] for i in range(SAMPLE_PER_STEP)]


class BookieMachine(RuleBasedStateMachine):
    """One database, one model; every rule is a public call whose answer the model predicts."""

    kind: ClassVar[str] = "memory"
    injects_faults: ClassVar[bool] = False
    compaction: ClassVar[str] = "internal"
    in_flight: ClassVar[dict[str, Any]] = {}
    """Options added to every size: ``segments_in_flight`` for the pipelined machines."""
    tally: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.model = Model()
        self.epoch = 0
        self.steps = 0
        self.snaps: list[tuple[inkpen.Snapshot, Model, bool]] = []
        self.checkpoints: list[tuple[str, Model]] = []
        self.written: set[bytes] = set()
        self.history: list[tuple[int, Callable[[Model], None], Journaled]] | None = []
        """Every acknowledged write, by SQN, as a change of a model (None once writes from
        several threads made the SQNs the engine's choice): what a lost segment takes away."""
        self.sizes: dict[str, Any] = {**TINY, **self.in_flight}
        self.url = self.new_url()
        self.backup_url = self.new_url()
        self._book: inkpen.Bookie | None = None
        self.follower: inkpen.Reader | None = None
        self.tally["examples"] += 1

    @property
    def book(self) -> inkpen.Bookie:
        """The database as last opened (``start`` opens it before any rule runs)."""
        assert self._book is not None
        return self._book

    @book.setter
    def book(self, book: inkpen.Bookie) -> None:
        self._book = book

    @initialize()
    def start(self) -> None:
        self.book = self.open_book()

    # -- where the database lives (overridden per store) ------------------------------------------

    def new_url(self) -> str:
        return f"memory://machine-{uuid.uuid4().hex}"

    def target(self) -> str | ObjectStore:
        return self.url

    @contextmanager
    def store_for_gc(self) -> Iterator[ObjectStore]:
        store = open_store(self.url)
        try:
            yield store
        finally:
            store.close()

    def discard(self, url: str) -> None:
        drop_space(url.removeprefix("memory://"))

    # -- hooks the faulty machine overrides -------------------------------------------------------

    def open_raw(self, **extra: Any) -> inkpen.Bookie:
        """``inkpen.open`` of the machine's database with its sizes and compaction mode."""
        return inkpen.open(
            self.target(), clock=self.clock, compaction=self.compaction, **self.sizes, **extra
        )

    def open_book(self) -> inkpen.Bookie:
        book = self.open_raw()
        self.epoch += 1
        self.tally["opens"] += 1
        stats = book.stats()
        assert stats["writer_epoch"] == self.epoch
        assert stats["sqn"] == self.model.writes, "reopening changed the highest SQN"
        return book

    def expect(self, call: Callable[[], Any], expected: Any, what: str) -> None:
        """Make one read and compare its answer with the model's."""
        got = call()
        assert got == expected, f"{what}: got {got!r}, model says {expected!r}"

    def expect_usage_error(self, call: Callable[[], Any], what: str) -> None:
        with pytest.raises(inkpen.UsageError):
            call()

    def fold(self, make: Callable[[], Iterable[Any]], expected: list[Any], what: str) -> None:
        got = list(make())
        assert got == expected, f"{what}: got {got!r}, model says {expected!r}"

    def write(
        self,
        call: Callable[[], None],
        apply: Callable[[], None],
        bucket: str,
        key: str,
        count: int = 1,
    ) -> bool:
        """Run a put, delete or batch (of ``count`` changes); True when it was acknowledged."""
        call()
        apply()
        self.tally["writes"] += 1
        return True

    def expect_conflict(self, call: Callable[[], None], what: str) -> None:
        """Run a write whose condition the model says fails: ConflictError, nothing written."""
        with pytest.raises(inkpen.ConflictError):
            call()
        self.tally["conflicts"] += 1

    def maintain(self, call: Callable[[], Any]) -> Any:
        return call()

    def close_book(self, book: inkpen.Bookie) -> None:
        book.close()

    def checked(self) -> Any:
        """A context in which the full comparison runs (the faulty machine pauses faults)."""
        return _Nothing()

    # -- helpers ----------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def check_get(self, source: Any, model: Model, bucket: str, key: str) -> None:
        self.expect(
            lambda: source.get(bucket, key),
            model.value(bucket, key, self.now_ms()),
            f"get({bucket!r}, {key!r})",
        )

    def check_head(self, source: Any, model: Model, bucket: str, key: str) -> None:
        stored = model.get(bucket, key, self.now_ms())
        expected = None
        if stored is not None:
            expected = inkpen.Head(
                stored.sqn,
                len(stored.value),
                expected_hash(stored.value),
                stored.written_ms / 1000,
                None if stored.expiry_ms is None else stored.expiry_ms / 1000,
            )
        self.expect(lambda: source.head(bucket, key), expected, f"head({bucket!r}, {key!r})")

    def heads_expected(
        self, model: Model, bucket: str | None, start: str | None, end: str | None
    ) -> list[tuple[bytes, bytes, int, int, int]]:
        out = []
        now = self.now_ms()
        for b, k, value in model.objects_in(bucket, start, end, now):
            stored = model.objects[(b, k)]
            out.append((b, k, stored.sqn, len(value), expected_hash(value)))
        return out

    def heads_got(
        self, source: Any, bucket: str | None, start: str | None, end: str | None
    ) -> Callable[[], Iterator[tuple[bytes, bytes, int, int, int]]]:
        def make() -> Iterator[tuple[bytes, bytes, int, int, int]]:
            for b, k, head in source.heads(bucket, start, end):
                yield b, k, head.sqn, head.size, head.content_hash

        return make

    def heads_got_reverse(
        self, source: Any
    ) -> Callable[[], Iterator[tuple[bytes, bytes, int, int, int]]]:
        def make() -> Iterator[tuple[bytes, bytes, int, int, int]]:
            for b, k, head in source.heads(reverse=True):
                yield b, k, head.sqn, head.size, head.content_hash

        return make

    def check_view(
        self,
        source: Any,
        frozen: Model,
        bucket: str,
        key: str,
        index_field: str,
        *,
        ledger_only: bool = False,
    ) -> None:
        """A few reads and folds of one bucket through a snapshot, a reader or a backup."""
        now = self.now_ms()
        if ledger_only:
            if frozen.get(bucket, key, now) is not None:
                self.expect_usage_error(lambda: source.get(bucket, key), "get on ledger_only")
        else:
            self.check_get(source, frozen, bucket, key)
            self.expect(
                lambda: source.get_many(bucket, [key, *KEYS]),
                [frozen.value(bucket, k, now) for k in (key, *KEYS)],
                "get_many",
            )
            self.fold(
                lambda: source.objects(bucket),
                frozen.objects_in(bucket, None, None, now),
                "objects",
            )
        self.check_head(source, frozen, bucket, key)
        self.fold(lambda: source.keys(bucket), frozen.keys(bucket, None, None, now), "keys")
        self.fold(
            lambda: source.index_query(bucket, index_field, "", TERM_END, return_terms=True),
            frozen.index_query(bucket, index_field, "", TERM_END, now, return_terms=True),
            "index_query",
        )

    def full_check(self, source: Any, model: Model, *, ledger_only: bool = False) -> None:
        """Compare every read and fold the API has with the model."""
        now = self.now_ms()
        with self.checked():
            for bucket in BUCKETS:
                for key in KEYS:
                    if not ledger_only:
                        self.check_get(source, model, bucket, key)
                    self.check_head(source, model, bucket, key)
                self.fold(partial(source.keys, bucket), model.keys(bucket, None, None, now), "keys")
                self.fold(
                    partial(source.keys, bucket, reverse=True),
                    model.keys(bucket, None, None, now)[::-1],
                    "keys(reverse=True)",
                )
                if not ledger_only:
                    self.expect(
                        partial(source.get_many, bucket, KEYS),
                        [model.value(bucket, key, now) for key in KEYS],
                        "get_many",
                    )
                for index_field in FIELDS:
                    self.fold(
                        partial(
                            source.index_query,
                            bucket,
                            index_field,
                            "",
                            TERM_END,
                            return_terms=True,
                            reverse=True,
                        ),
                        model.index_query(
                            bucket, index_field, "", TERM_END, now, return_terms=True
                        )[::-1],
                        "index_query(reverse=True)",
                    )
                    self.fold(
                        partial(
                            source.index_query, bucket, index_field, "", TERM_END, return_terms=True
                        ),
                        model.index_query(
                            bucket, index_field, "", TERM_END, now, return_terms=True
                        ),
                        "index_query",
                    )
            self.fold(
                self.heads_got(source, None, None, None),
                self.heads_expected(model, None, None, None),
                "heads",
            )
            self.fold(lambda: source.buckets(), model.buckets(now), "buckets")
            self.expect(source.is_empty, not model.buckets(now), "is_empty")
            self.fold(
                self.heads_got_reverse(source),
                self.heads_expected(model, None, None, None)[::-1],
                "heads(reverse=True)",
            )
            if not ledger_only:
                for order in ("key", "sqn"):
                    self.fold(
                        partial(source.objects, order=order),
                        model.objects_in(None, None, None, now, order=order),
                        f"objects(order={order})",
                    )
                self.fold(
                    lambda: source.objects(reverse=True),
                    model.objects_in(None, None, None, now)[::-1],
                    "objects(reverse=True)",
                )
        self.tally["full_checks"] += 1

    def reopen(self, *, crash: bool) -> None:
        self.drop_snapshots(still_open=True)
        if crash:
            self.book.abandon()
            self.tally["crashes"] += 1
        else:
            self.close_book(self.book)
        self.book = self.open_book()
        self.full_check(self.book, self.model)

    def drop_snapshots(self, *, still_open: bool) -> None:
        """Forget every snapshot; if the Bookie is still open, close them first."""
        for snap, _, _ in self.snaps:
            if still_open:
                snap.close()
        self.snaps.clear()

    # -- writes -----------------------------------------------------------------------------------

    @rule(
        bucket=buckets,
        key=keys,
        size=sizes,
        compressible=st.booleans(),
        index_specs=specs,
        ttl=ttls,
    )
    def put(
        self,
        bucket: str,
        key: str,
        size: int,
        compressible: bool,
        index_specs: list[IndexSpec],
        ttl: int | None,
    ) -> None:
        value = make_value(self.model.writes + 1, size, compressible)
        self.written.add(value)
        now = self.now_ms()
        expiry = None if ttl is None else now + ttl * 1000

        def change(model: Model) -> None:
            model.put(bucket, key, value, index_specs, now_ms=now, expiry_ms=expiry)

        acked = self.write(
            lambda: self.book.put(bucket, key, value, indexes=index_specs, ttl=ttl),
            lambda: self.remember(change),
            bucket,
            key,
        )
        if acked:
            self.check_get(self.book, self.model, bucket, key)

    @rule(bucket=buckets, key=keys, index_specs=removals)
    def delete(self, bucket: str, key: str, index_specs: list[IndexSpec]) -> None:
        def change(model: Model) -> None:
            model.delete(bucket, key, index_specs)

        acked = self.write(
            lambda: self.book.delete(bucket, key, indexes=index_specs),
            lambda: self.remember(change),
            bucket,
            key,
        )
        if acked:
            self.expect(lambda: self.book.get(bucket, key), None, "get after delete")

    def remember(self, change: Callable[[Model], None]) -> None:
        """Apply an acknowledged write to the model and note it in the history, with the index
        specs its journal entry holds (replay applies those, not the change's rules again)."""
        journaled: Journaled = []
        self.model.journaled = journaled
        try:
            change(self.model)
        finally:
            self.model.journaled = None
        if self.history is not None:
            self.history.append((self.model.writes, change, journaled))

    def apply_changes(self, changes: list[tuple[Any, ...]]) -> None:
        for change in changes:
            if change[0] == "put":
                self.put(*change[1:])
            else:
                self.delete(*change[1:])

    @rule(changes=st.lists(changes, min_size=1, max_size=40))
    def write_many(self, changes: list[tuple[Any, ...]]) -> None:
        """A run of writes: enough of them to fill caches, flush L0, merge and roll."""
        self.apply_changes(changes)

    @rule(changes=st.lists(changes, min_size=10, max_size=60))
    def write_a_lot(self, changes: list[tuple[Any, ...]]) -> None:
        """A second, longer run of writes, so writes make up a good part of every example."""
        self.apply_changes(changes)

    def conditional_sqn(self, model: Model, bucket: str, key: str, condition: str | None) -> Any:
        """``if_sqn`` for a change: None, the key's SQN in ``model`` ("right") or another."""
        if condition is None:
            return None
        current = model.sqn(bucket, key, self.now_ms())
        if condition == "right":
            return current
        return 0 if current else model.writes + 7

    @rule(work=st.lists(st.tuples(changes, conditions), max_size=8))
    def write_batch(self, work: list[tuple[tuple[Any, ...], str | None]]) -> None:
        """An atomic batch, its changes maybe conditional: all land in order, or none."""
        batch = inkpen.Batch()
        trial = self.model.copy()
        steps: list[Callable[[Model], None]] = []
        conflict = False
        now = self.now_ms()
        for change, condition in work:
            bucket, key = change[1], change[2]
            if_sqn = self.conditional_sqn(trial, bucket, key, condition)
            if if_sqn is not None and if_sqn != trial.sqn(bucket, key, now):
                conflict = True
            step: Callable[[Model], None]
            if change[0] == "put":
                _, bucket, key, size, compressible, index_specs, ttl = change
                value = make_value(trial.writes + 1, size, compressible)
                self.written.add(value)
                expiry = None if ttl is None else now + ttl * 1000
                batch.put(bucket, key, value, indexes=index_specs, ttl=ttl, if_sqn=if_sqn)

                def put_step(
                    model: Model,
                    b: str = bucket,
                    k: str = key,
                    v: bytes = value,
                    i: Iterable[IndexSpec] = index_specs,
                    e: int | None = expiry,
                ) -> None:
                    model.put(b, k, v, i, now_ms=now, expiry_ms=e)

                step = put_step
            else:
                _, bucket, key, index_specs = change
                batch.delete(bucket, key, indexes=index_specs, if_sqn=if_sqn)

                def delete_step(
                    model: Model,
                    b: str = bucket,
                    k: str = key,
                    i: Iterable[IndexSpec] = index_specs,
                ) -> None:
                    model.delete(b, k, i)

                step = delete_step

            step(trial)
            steps.append(step)
        assert len(batch) == len(work)
        if conflict:
            self.expect_conflict(lambda: self.book.write(batch), "batch")
            self.tally["batches_rejected"] += 1
        else:
            first = work[0][0] if work else ("put", BUCKETS[0], KEYS[0])

            def apply() -> None:
                for step in steps:
                    self.remember(step)

            self.write(lambda: self.book.write(batch), apply, first[1], first[2], len(steps))
            self.tally["batches"] += 1
        if work:
            self.expect_usage_error(lambda: self.book.write(batch), "a batch written twice")
        self.check_get(self.book, self.model, work[0][0][1] if work else BUCKETS[0], KEYS[0])

    @rule(
        bucket=buckets,
        key=keys,
        right=st.booleans(),
        delete=st.booleans(),
        size=sizes,
    )
    def conditional_write(
        self, bucket: str, key: str, right: bool, delete: bool, size: int
    ) -> None:
        """A read-modify-write: if_sqn as head() shows it (or a stale one)."""
        if_sqn = self.conditional_sqn(self.model, bucket, key, "right" if right else "wrong")
        value = make_value(self.model.writes + 1, size, True)
        self.written.add(value)
        now = self.now_ms()

        def call() -> None:
            if delete:
                self.book.delete(bucket, key, if_sqn=if_sqn)
            else:
                self.book.put(bucket, key, value, if_sqn=if_sqn)

        def change(model: Model) -> None:
            if delete:
                model.delete(bucket, key, [])
            else:
                model.put(bucket, key, value, [], now_ms=now, expiry_ms=None)

        if not right:
            self.expect_conflict(call, "conditional write")
        elif self.write(call, lambda: self.remember(change), bucket, key):
            self.tally["conditional_writes"] += 1
        self.check_get(self.book, self.model, bucket, key)

    @rule(bucket=buckets, wanted=st.lists(keys, max_size=8))
    def get_many(self, bucket: str, wanted: list[str]) -> None:
        now = self.now_ms()
        self.expect(
            lambda: self.book.get_many(bucket, wanted),
            [self.model.value(bucket, k, now) for k in wanted],
            "get_many",
        )

    @precondition(lambda self: not self.injects_faults)
    @rule(work=st.lists(st.lists(changes, min_size=1, max_size=15), min_size=2, max_size=4))
    def write_concurrently(self, work: list[list[tuple[Any, ...]]]) -> None:
        """Threads write at once, sharing journal segments (group commit), each to keys of its
        own and reading each write straight back, while another thread folds everything."""
        plans = self.partition(work)
        base = self.model.writes
        top = base + sum(len(plan) for plan in plans)
        now = self.now_ms()
        numbered = iter(range(base + 1, top + 1))
        values = [
            [make_value(next(numbered), c[3], c[4]) if c[0] == "put" else None for c in plan]
            for plan in plans
        ]
        self.written.update(v for row in values for v in row if v is not None)
        self.history = None
        failures: list[BaseException] = []
        writing = threading.Event()
        writing.set()

        def writer(plan: list[tuple[Any, ...]], row: list[bytes | None]) -> None:
            try:
                for change, value in zip(plan, row, strict=True):
                    bucket, key = change[1], change[2]
                    if value is None:
                        self.book.delete(bucket, key, indexes=change[3])
                    else:
                        self.book.put(bucket, key, value, indexes=change[5], ttl=change[6])
                    got = self.book.get(bucket, key)
                    assert got == value, f"{bucket!r}/{key!r} read {got!r} after writing it"
            except BaseException as exc:
                failures.append(exc)

        def folder() -> None:
            try:
                while writing.is_set():
                    seen = [(b, k) for b, k, v in self.book.objects() if self.check_written(v)]
                    assert seen == sorted(set(seen)), "a fold listed keys out of order"
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=folder)] + [
            threading.Thread(target=writer, args=(plan, row))
            for plan, row in zip(plans, values, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads[1:]:
            thread.join()
        writing.clear()
        threads[0].join()
        if failures:
            raise failures[0]
        chosen: dict[tuple[bytes, bytes], int] = {}
        for plan, row in zip(plans, values, strict=True):
            for change, value in zip(plan, row, strict=True):
                if value is None:
                    self.model.delete(change[1], change[2], change[3])
                else:
                    expiry = None if change[6] is None else now + change[6] * 1000
                    self.model.put(
                        change[1], change[2], value, change[5], now_ms=now, expiry_ms=expiry
                    )
            # The SQNs the engine chose: unique, above every earlier write, and in each
            # thread's own order for the puts that are still the latest of their key.
            in_order = []
            for change in reversed(plan):
                oid = (change[1].encode(), change[2].encode())
                if oid in self.model.objects and oid not in chosen:
                    head = self.book.head(change[1], change[2])
                    assert head is not None and base < head.sqn <= top, (
                        f"{head} not in ({base}, {top}]"
                    )
                    chosen[oid] = head.sqn
                    in_order.append(head.sqn)
            assert in_order == sorted(in_order, reverse=True), "a thread's puts were reordered"
        assert len(set(chosen.values())) == len(chosen), "two puts were given one SQN"
        for (b, k), sqn in chosen.items():
            self.model.renumber(b, k, sqn)
        self.tally["concurrent_writes"] += self.model.writes - base

    def partition(self, work: list[list[tuple[Any, ...]]]) -> list[list[tuple[Any, ...]]]:
        """Each thread's changes moved onto keys no other thread writes."""
        plans = []
        for i, changes_of_thread in enumerate(work):
            mine = [k for j, k in enumerate(KEYS) if j % len(work) == i]
            plans.append(
                [
                    (c[0], c[1], mine[KEYS.index(c[2]) % len(mine)], *c[3:])
                    for c in changes_of_thread
                ]
            )
        return plans

    def check_written(self, value: bytes) -> bool:
        assert value in self.written, f"a fold returned {value[:40]!r}, which was never written"
        return True

    @rule(call=st.sampled_from(sorted(BAD_CALLS)))
    def rejected_call(self, call: str) -> None:
        """Bad input is refused at once; the invariants then check that nothing changed."""
        with pytest.raises(inkpen.UsageError):
            BAD_CALLS[call](self.book)

    @rule(seconds=st.integers(1, 3))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    # -- reads ------------------------------------------------------------------------------------

    @rule(bucket=buckets, key=keys)
    def get(self, bucket: str, key: str) -> None:
        self.check_get(self.book, self.model, bucket, key)

    @rule(bucket=buckets, key=keys)
    def head(self, bucket: str, key: str) -> None:
        self.check_head(self.book, self.model, bucket, key)

    @rule(
        bucket=buckets,
        index_field=st.sampled_from(FIELDS),
        start=bounds,
        end=bounds,
        regex=st.one_of(st.none(), st.sampled_from(REGEXES)),
        return_terms=st.booleans(),
    )
    def index_query(
        self,
        bucket: str,
        index_field: str,
        start: str,
        end: str,
        regex: str | None,
        return_terms: bool,
    ) -> None:
        self.fold(
            lambda: self.book.index_query(
                bucket, index_field, start, end, regex=regex, return_terms=return_terms
            ),
            self.model.index_query(
                bucket,
                index_field,
                start,
                end,
                self.now_ms(),
                regex=regex,
                return_terms=return_terms,
            ),
            "index_query",
        )

    @rule(bucket=buckets, start=key_bounds, end=key_bounds)
    def fold_keys(self, bucket: str, start: str | None, end: str | None) -> None:
        self.fold(
            lambda: self.book.keys(bucket, start, end),
            self.model.keys(bucket, start, end, self.now_ms()),
            "keys",
        )

    @rule(
        bucket=st.one_of(st.none(), buckets),
        start=key_bounds,
        end=key_bounds,
        order=st.sampled_from(("key", "sqn")),
    )
    def fold_objects(
        self, bucket: str | None, start: str | None, end: str | None, order: str
    ) -> None:
        if bucket is None:
            start = end = None
        self.fold(
            lambda: self.book.objects(bucket, start, end, order=order),  # type: ignore[arg-type]
            self.model.objects_in(bucket, start, end, self.now_ms(), order=order),
            f"objects(order={order})",
        )

    @rule(bucket=st.one_of(st.none(), buckets), start=key_bounds, end=key_bounds)
    def fold_heads(self, bucket: str | None, start: str | None, end: str | None) -> None:
        if bucket is None:
            start = end = None
        self.fold(
            self.heads_got(self.book, bucket, start, end),
            self.heads_expected(self.model, bucket, start, end),
            "heads",
        )

    @rule()
    def buckets_and_is_empty(self) -> None:
        now = self.now_ms()
        self.fold(lambda: self.book.buckets(), self.model.buckets(now), "buckets")
        self.expect(self.book.is_empty, not self.model.buckets(now), "is_empty")

    # -- snapshots --------------------------------------------------------------------------------

    # Rules act on whatever snapshots and checkpoints exist rather than having preconditions:
    # under injected failures which ones exist depends on timing, and the rules Hypothesis may
    # choose must not.

    @rule(ledger_only=st.booleans(), long_running=st.booleans())
    def take_snapshot(self, ledger_only: bool, long_running: bool) -> None:
        if len(self.snaps) >= MAX_SNAPSHOTS:
            self.snaps.pop(0)[0].close()
        snap = self.maintain(
            lambda: self.book.snapshot(long_running=long_running, ledger_only=ledger_only)
        )
        if snap is _FAILED:
            return
        assert snap.ledger_only == ledger_only
        self.snaps.append((snap, self.model.copy(), ledger_only))
        self.tally["snapshots"] += 1

    @rule(
        choice=st.integers(0, MAX_SNAPSHOTS - 1),
        bucket=buckets,
        key=keys,
        index_field=st.sampled_from(FIELDS),
    )
    def read_snapshot(self, choice: int, bucket: str, key: str, index_field: str) -> None:
        if not self.snaps:
            return
        snap, frozen, ledger_only = self.snaps[choice % len(self.snaps)]
        self.check_view(snap, frozen, bucket, key, index_field, ledger_only=ledger_only)
        self.tally["snapshot_reads"] += 1

    @rule(choice=st.integers(0, MAX_SNAPSHOTS - 1), everything=st.booleans())
    def close_snapshot(self, choice: int, everything: bool) -> None:
        if not self.snaps:
            return
        snap, frozen, ledger_only = self.snaps.pop(choice % len(self.snaps))
        if everything:
            self.full_check(snap, frozen, ledger_only=ledger_only)
        snap.close()
        with pytest.raises(inkpen.UsageError):
            snap.get("b0", "k0")

    # -- checkpoints and readers -------------------------------------------------------------------

    @rule()
    def take_checkpoint(self) -> None:
        if len(self.checkpoints) >= MAX_CHECKPOINTS:
            return
        made = self.maintain(self.book.checkpoint)
        if made is _FAILED:
            return
        assert isinstance(made, str)
        self.checkpoints.append((made, self.model.copy()))
        self.tally["checkpoints"] += 1

    @contextmanager
    def reader(self, checkpoint: str | None) -> Iterator[inkpen.Reader | None]:
        """A Reader at ``checkpoint`` (None: its own), or None if an injected failure stopped
        the open; closing it (which deletes its own checkpoint) may fail the same way."""
        reader = self.maintain(
            lambda: inkpen.open_reader(self.target(), checkpoint=checkpoint, clock=self.clock)
        )
        if reader is _FAILED:
            yield None
            return
        try:
            yield reader
        finally:
            self.maintain(reader.close)

    @rule(
        choice=st.integers(0, MAX_CHECKPOINTS - 1),
        bucket=buckets,
        key=keys,
        index_field=st.sampled_from(FIELDS),
    )
    def read_checkpoint(self, choice: int, bucket: str, key: str, index_field: str) -> None:
        if not self.checkpoints:
            return
        checkpoint, frozen = self.checkpoints[choice % len(self.checkpoints)]
        with self.reader(checkpoint) as reader:
            if reader is None:
                return
            assert reader.checkpoint_id == checkpoint
            self.check_view(reader, frozen, bucket, key, index_field)
        self.tally["checkpoint_reads"] += 1

    @rule(bucket=buckets, key=keys, index_field=st.sampled_from(FIELDS))
    def read_latest(self, bucket: str, key: str, index_field: str) -> None:
        """A reader with its own checkpoint sees every acknowledged write, and nothing later."""
        with self.reader(None) as reader:
            if reader is None:
                return
            frozen = self.model.copy()
            if not self.injects_faults:
                self.put(bucket, key, 40, False, [("add", index_field, TERMS[2])], None)
            self.check_view(reader, frozen, bucket, key, index_field)
        self.tally["latest_reads"] += 1

    @precondition(lambda self: not self.injects_faults)
    @rule(bucket=buckets, key=keys, index_field=st.sampled_from(FIELDS))
    def follower_agrees(self, bucket: str, key: str, index_field: str) -> None:
        """A following Reader kept open across rules (writes, flushes, merges, journal
        compaction, GC, reopens) agrees with the model after each refresh."""
        if self.follower is None:
            self.follower = inkpen.open_reader(
                self.target(), follow=True, refresh_interval=3600.0, clock=self.clock
            )
        self.follower.refresh()
        assert self.follower.last_sqn == self.model.writes
        self.check_view(self.follower, self.model, bucket, key, index_field)
        self.tally["follower_checks"] += 1

    def drop_follower(self) -> None:
        if self.follower is not None:
            follower, self.follower = self.follower, None
            follower.close()

    @rule(choice=st.integers(0, MAX_CHECKPOINTS - 1))
    def delete_checkpoint(self, choice: int) -> None:
        if not self.checkpoints:
            return
        checkpoint, _ = self.checkpoints.pop(choice % len(self.checkpoints))
        with self.store_for_gc() as store:
            if (
                self.maintain(lambda: remove_checkpoint(ManifestStore(store), checkpoint))
                is _FAILED
            ):
                return
        with self.checked(), pytest.raises(inkpen.NotFoundError):
            inkpen.open_reader(self.target(), checkpoint=checkpoint, clock=self.clock)

    @rule()
    def collect_garbage(self) -> None:
        """GC with no age limit while snapshots and checkpoints are open: they still read."""
        report = self.maintain(lambda: self.book.run_gc(min_age=0.0))
        if report is _FAILED:
            return
        self.tally["gc_deleted"] += len(report.deleted)
        for snap, frozen, ledger_only in self.snaps:
            self.check_view(snap, frozen, BUCKETS[0], KEYS[0], FIELDS[0], ledger_only=ledger_only)
        for checkpoint, frozen in self.checkpoints:
            with self.reader(checkpoint) as reader:
                if reader is None:
                    continue
                self.fold(
                    reader.objects,
                    frozen.objects_in(None, None, None, self.now_ms()),
                    "objects at a checkpoint after GC",
                )

    # -- maintenance ------------------------------------------------------------------------------

    @rule()
    def flush(self) -> None:
        if self.maintain(self.book.flush) is _FAILED:
            return
        stats = self.book.stats()
        assert stats["ledger_cache_entries"] == 0
        assert stats["ledger_mem_entries"] == 0
        assert stats["persisted_sqn"] == self.model.writes
        self.tally["flushes"] += 1

    @rule()
    def compact_ledger(self) -> None:
        if self.maintain(self.book.compact_ledger) is _FAILED:
            return
        stats = self.book.stats()
        assert stats["l0_files"] == 0
        for depth, files in enumerate(stats["level_files"][1:], start=1):
            target = self.sizes["l1_target_files"] * self.sizes["level_fanout"] ** (depth - 1)
            assert files <= target, f"L{depth} holds {files} files, over its target {target}"
        self.tally["merges_seen"] = max(self.tally["merges_seen"], stats["merges"])

    @rule()
    def compact_journal(self) -> None:
        report = self.maintain(self.book.compact_journal)
        if report is _FAILED:
            return
        assert isinstance(report, inkpen.CompactionReport)
        assert set(report.compacted) <= set(report.scores)
        assert not set(report.written) & set(report.compacted)
        if report.compacted:
            assert report.manifest_id is not None
            assert report.entries_kept + report.entries_reduced + report.entries_dropped > 0
            self.tally["journal_compactions"] += 1
        else:
            assert not report.written

    @rule(sizes=st.sampled_from(sorted(SIZES)))
    def close_and_reopen(self, sizes: str) -> None:
        """Reopen, perhaps with other file and cache sizes than the files were written with."""
        self.sizes = {**SIZES[sizes], **self.in_flight}
        self.reopen(crash=False)

    @rule()
    def crash_and_reopen(self) -> None:
        self.reopen(crash=True)

    @rule(drop_fences=st.booleans())
    def close_collect_garbage_and_reopen(self, drop_fences: bool) -> None:
        self.drop_snapshots(still_open=True)
        self.close_book(self.book)
        options = GcOptions(min_age=0.0, fence_min_age=0.0 if drop_fences else None, offline=True)
        with self.store_for_gc() as store:
            report = self.maintain(lambda: run_gc(store, options=options))
        if report is not _FAILED:
            self.tally["gc_deleted"] += len(report.deleted)
        self.book = self.open_book()
        self.full_check(self.book, self.model)

    @rule(close_first=st.booleans())
    def second_writer_takes_over(self, close_first: bool) -> None:
        first = self.book
        now = self.now_ms()
        self.drop_snapshots(still_open=True)
        self.book = self.open_book()
        self.expect_fenced(first)
        if not self.injects_faults:
            with pytest.raises(inkpen.FencedError):
                self.notice_fence(first)
        # The fenced Bookie still answers reads, with what it had, unless the newer writer has
        # already replaced a file they need (its merges run from its open, and with
        # gc_min_age=0 it deletes what it replaced at once): then FencedError saying so.
        for bucket, key in sample_keys(self.steps):
            try:
                self.check_get(first, self.model, bucket, key)
            except inkpen.FencedError as exc:
                assert "newer writer has replaced" in str(exc), exc
                self.tally["fenced_reads_replaced"] += 1
        assert now == self.now_ms()
        if close_first:
            self.close_book(first)
        else:
            first.abandon()
        self.tally["takeovers"] += 1

    @rule()
    def fence_while_throttled(self) -> None:
        """Puts held back by backpressure at "stop" end when a second writer opens: the first
        learns of the fence from its GC (the epoch check) and its held puts raise FencedError;
        none of them lands. (If the failing store hides the fence, closing ends them too.)"""
        first = self.book
        self.drop_snapshots(still_open=True)
        throttle = first._engine.ctx.throttle
        throttle.set("held by the test", STOP)  # as a ledger that cannot flush leaves it
        errors: list[BaseException] = []

        def held_put(index: int) -> None:
            try:
                first.put("b0", f"held{index}", b"never acknowledged")
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=held_put, args=(i,), daemon=True) for i in range(HELD_PUTS)
        ]
        for thread in threads:
            thread.start()
        wait_until(
            lambda: throttle.waiting + len(errors) == HELD_PUTS,
            "the puts to be held back",
            HELD_DEADLINE,
        )
        self.book = self.open_book()
        try:
            self.notice_fence(first)
        except inkpen.FencedError:
            pass
        except inkpen.StoreError as exc:
            if not (self.injects_faults and injected(exc)):
                raise
            first.abandon()
        else:
            raise AssertionError("the fenced writer's GC ran")
        deadline = time.monotonic() + HELD_DEADLINE
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), "a put held back by backpressure outlived the fence"
        assert len(errors) == HELD_PUTS
        for error in errors:
            if self.injects_faults:  # or a store failure that had stopped it writing before
                assert isinstance(error, inkpen.FencedError | inkpen.UsageError) or (
                    isinstance(error, inkpen.StoreError) and error.definite
                ), repr(error)
            else:
                assert isinstance(error, inkpen.FencedError), repr(error)
        first.abandon()
        self.tally["fenced_while_throttled"] += 1

    def notice_fence(self, first: inkpen.Bookie) -> None:
        """A maintenance call through which a fenced writer learns of the fence: its GC pass
        checks the epoch (raises :class:`FencedError`)."""
        first.run_gc(min_age=0.0)

    def expect_fenced(self, first: inkpen.Bookie) -> None:
        with pytest.raises(inkpen.FencedError):
            first.put("b0", "k0", b"from a fenced writer")
        with pytest.raises(inkpen.FencedError):
            first.delete("b0", "k1")

    @rule(bucket=buckets, key=keys, again=st.booleans())
    def hot_backup_and_restore(self, bucket: str, key: str, again: bool) -> None:
        """Back up (into a fresh root, or again into the same one), then open the backup: its
        ledger, rebuilt from the journal, shows exactly what the model held at the backup."""
        backup = self.maintain(self.book.hot_backup)
        if backup is _FAILED:
            return
        frozen = self.model.copy()
        if not self.injects_faults:
            # A write after the backup was taken is not in it.
            self.put(bucket, key, 3, True, [("add", FIELDS[0], TERMS[1])], None)
        dest = self.backup_url if again else self.new_url()
        try:
            if self.maintain(lambda: backup(dest)) is _FAILED:
                return
            restored = inkpen.open(dest, clock=self.clock, **TINY)
            try:
                self.full_check(restored, frozen)
            finally:
                restored.close()
        finally:
            if not again:
                self.discard(dest)
        self.tally["backups"] += 1

    # -- damage ------------------------------------------------------------------------------------

    @precondition(lambda self: not self.injects_faults)
    @rule(choice=st.integers(0, 2**16), restore=st.booleans())
    def lose_a_segment(self, choice: int, restore: bool) -> None:
        """A crash leaves unrolled segments; one below the newest is deleted. The next open and
        a new Reader must refuse with a CorruptionError naming it, writing nothing. Then either
        the object is put back (everything reads as before), or the database is opened with
        ``allow_missing_segments`` and the model loses exactly the writes the segment held
        (only when the ledger has not persisted them: then replay is all that knows them)."""
        self.drop_follower()  # it read the segment before it was lost
        self.drop_snapshots(still_open=True)
        self.book.abandon()
        self.tally["crashes"] += 1
        with self.store_for_gc() as store:
            latest = ManifestStore(store).latest()
            assert latest is not None
            persisted = latest.manifest.ledger.persisted_sqn
            refs = scan_segments(store, latest.manifest.journal.last_rolled_segment).refs
            newest = refs[-1].id if refs else 0
            lost: list[tuple[str, bytes, Mapping[str, str], set[int]]] = []
            for ref in refs:
                if ref.id < newest and ref.size > EMPTY_JOURNAL_SIZE:
                    key = segment_key(ref.id)
                    data = store.get(key)
                    sqns = {entry.sqn for entry in decode_journal(data, key)[1]}
                    lost.append((key, data, store.head(key).metadata, sqns))
            if not lost:
                self.book = self.open_book()
                return
            key, data, metadata, sqns = lost[choice % len(lost)]
            store.delete(key)
            before = [(info.key, info.size) for info in store.list("")]
            with pytest.raises(inkpen.CorruptionError, match=re.escape(key)):
                inkpen.open(self.target(), clock=self.clock, **self.sizes)
            with pytest.raises(inkpen.CorruptionError, match=re.escape(key)):
                inkpen.open_reader(self.target(), clock=self.clock)
            assert [(info.key, info.size) for info in store.list("")] == before
            self.tally["segments_lost"] += 1
            if restore or self.history is None or min(sqns) <= persisted:
                store.put(key, data, metadata=metadata)
                self.book = self.open_book()
                self.full_check(self.book, self.model)
                return
            # Readers at the checkpoints taken before would refuse the gap as well: drop them.
            for checkpoint, _ in self.checkpoints:
                remove_checkpoint(ManifestStore(store), checkpoint)
            self.checkpoints.clear()
        # What replay makes of the writes left: each as its journal entry holds it. A delete
        # removes the index entries its object had when it was written, a put with a ttl adds
        # those it shortened then, whatever the lost writes had done to them.
        left = Model()
        for sqn, change, journaled in self.history:
            if sqn not in sqns:
                left.writes = sqn - 1
                index = dict(left.index)
                change(left)
                left.index = index
                left.replay_index(journaled)
        self.history = [entry for entry in self.history if entry[0] not in sqns]
        self.model = left
        book = self.open_raw(allow_missing_segments=True)
        self.epoch += 1
        self.tally["opens"] += 1
        self.tally["segments_stepped_over"] += 1
        assert book.stats()["sqn"] == self.model.writes
        self.book = book
        self.full_check(self.book, self.model)

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def counters_are_sane(self) -> None:
        self.steps += 1
        stats = self.book.stats()
        assert stats["sqn"] == self.model.writes, (
            f"the Bookie's SQN is {stats['sqn']}, but {self.model.writes} writes were acknowledged"
        )
        self.check_epoch(stats["writer_epoch"])
        assert not stats["fenced"]
        assert stats["snapshots"] == len(self.snaps)
        assert 0 <= stats["persisted_sqn"] <= stats["sqn"]
        assert stats["ledger_cache_entries"] >= 0 and stats["ledger_mem_entries"] >= 0
        assert stats["l0_files"] >= 0 and all(n >= 0 for n in stats["level_files"])
        self.tally["steps"] += 1
        self.tally["merges_seen"] = max(self.tally["merges_seen"], stats["merges"])
        self.tally["l0_writes_seen"] = max(self.tally["l0_writes_seen"], stats["l0_writes"])
        self.tally["max_sqn"] = max(self.tally["max_sqn"], stats["sqn"])

    def check_epoch(self, epoch: int) -> None:
        assert epoch == self.epoch

    @invariant()
    def sample_reads_back(self) -> None:
        for bucket, key in sample_keys(self.steps):
            self.check_get(self.book, self.model, bucket, key)
            self.check_head(self.book, self.model, bucket, key)

    @invariant()
    def snapshots_keep_their_moment(self) -> None:
        """However the live database moved on, every open snapshot reads what it was taken on."""
        for number, (snap, frozen, ledger_only) in enumerate(self.snaps):
            bucket, key = sample_keys(self.steps + number)[0]
            self.check_view(snap, frozen, bucket, key, FIELDS[number % 2], ledger_only=ledger_only)

    def teardown(self) -> None:
        try:
            self.drop_follower()
            book = self._book
            if book is not None:
                self.drop_snapshots(still_open=not book.closed)
                if not book.closed:
                    self.close_book(book)
        finally:
            self.discard(self.url)
            self.discard(self.backup_url)


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_FAILED = object()
"""What ``maintain`` answers when an injected store failure stopped the call."""


class FaultyMachine(BookieMachine):
    """The machine over a store that fails, at random but reproducibly, on every kind of call."""

    kind: ClassVar[str] = "faulty"
    injects_faults: ClassVar[bool] = True

    def __init__(self) -> None:
        self.pending = False
        self.pending_count = 1
        self.faulty: FaultyStore | None = None
        super().__init__()

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        chance=st.sampled_from((0.01, 0.03, 0.06)),
        after_share=st.sampled_from((0.25, 0.5)),
        storm=st.sampled_from((False, False, True)),
    )
    def start(self, seed: int, chance: float, after_share: float, storm: bool) -> None:
        """Faults everywhere at ``chance``; in a storm, also a third of the creates, reads and
        heads a journal write makes fail, so some writes end with their outcome unknown."""
        plan = FaultPlan.everywhere(
            seed,
            before=chance * (1 - after_share),
            after=chance * after_share,
            partial_lists=chance * 4,
        )
        if storm:
            heavy = ("put_if_absent", "get", "head")
            plan = FaultPlan(
                seed,
                before={**plan.before, **dict.fromkeys(heavy, STORM * (1 - after_share))},
                after={**plan.after, **dict.fromkeys(heavy, STORM * after_share)},
                partial_lists=plan.partial_lists,
            )
        self.faulty = FaultyStore(open_store(self.url), plan)
        self.book = self.open_book()

    def target(self) -> FaultyStore:
        assert self.faulty is not None
        return self.faulty

    @contextmanager
    def store_for_gc(self) -> Iterator[ObjectStore]:
        yield self.target()

    def teardown(self) -> None:
        if self.faulty is not None:
            for (kind, phase), count in self.faulty.counts().items():
                self.tally[f"fault {kind} {phase}"] += count
        super().teardown()

    def checked(self) -> Any:
        return self.target().paused()

    def check_epoch(self, epoch: int) -> None:
        # A failed open may have claimed an epoch before it failed.
        assert epoch >= self.epoch
        self.epoch = epoch

    def open_book(self) -> inkpen.Bookie:
        faulty = self.target()
        for _ in range(OPEN_ATTEMPTS):
            try:
                book = inkpen.open(faulty, clock=self.clock, **self.sizes)
                break
            except inkpen.StoreError as exc:
                if not injected(exc):
                    raise
                self.tally["failed_opens"] += 1
        else:
            with faulty.paused():
                book = inkpen.open(faulty, clock=self.clock, **self.sizes)
        self.tally["opens"] += 1
        stats = book.stats()
        assert stats["writer_epoch"] > self.epoch
        self.epoch = stats["writer_epoch"]
        assert stats["sqn"] in (self.model.writes, self.model.writes + self.pending_count)
        if stats["sqn"] != self.model.writes:
            assert self.pending, (
                f"reopened at SQN {stats['sqn']}, above the {self.model.writes} writes the "
                "model knows, with no write of unknown outcome outstanding"
            )
        return book

    def expect(self, call: Callable[[], Any], expected: Any, what: str) -> None:
        try:
            got = call()
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            self.tally["failed_reads"] += 1
            return
        assert got == expected, f"{what}: got {got!r}, model says {expected!r}"

    def expect_usage_error(self, call: Callable[[], Any], what: str) -> None:
        # The ledger part of the read comes first and may fail with an injected error.
        try:
            call()
        except inkpen.UsageError:
            return
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            return
        raise AssertionError(f"{what}: no UsageError")

    def fold(self, make: Callable[[], Iterable[Any]], expected: list[Any], what: str) -> None:
        got: list[Any] = []
        try:
            for item in make():
                got.append(item)
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            self.tally["failed_rolls"] += 1
            assert got == expected[: len(got)], f"{what}: a failed fold yielded {got!r}"
            return
        assert got == expected, f"{what}: got {got!r}, model says {expected!r}"

    def maintain(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            self.tally["failed_maintenance"] += 1
            return _FAILED

    def close_book(self, book: inkpen.Bookie) -> None:
        try:
            book.close()
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            self.tally["failed_closes"] += 1
        assert book.closed

    def write(
        self,
        call: Callable[[], None],
        apply: Callable[[], None],
        bucket: str,
        key: str,
        count: int = 1,
    ) -> bool:
        try:
            call()
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            if exc.definite:
                self.tally["definitely_failed_writes"] += 1
                return False
            self.settle(apply, bucket, key, count)
            return False
        except (inkpen.FencedError, inkpen.ConflictError):
            raise  # a retried write that landed never conflicts with itself
        except inkpen.InkpenError:
            # The Inker stops writing when it cannot tell what a segment slot holds.
            self.tally["writes_stopped"] += 1
            self.settle(apply, bucket, key, count)
            return False
        apply()
        self.tally["writes"] += 1
        return True

    def expect_conflict(self, call: Callable[[], None], what: str) -> None:
        # The condition is checked against the ledger, whose reads may fail: definitely.
        try:
            call()
        except inkpen.ConflictError:
            self.tally["conflicts"] += 1
            return
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
            assert exc.definite, f"{what}: a rejected write failed with an unknown outcome"
            return
        raise AssertionError(f"{what}: no ConflictError")

    def settle(self, apply: Callable[[], None], bucket: str, key: str, count: int = 1) -> None:
        """A write of unknown outcome: look once through the failed Bookie, then reopen and let
        the SQN the database recovers say whether it landed. The earlier look may show the value
        from before the write even when it landed (an unknown write may take effect at any
        moment until the reopen), but never a write that did not land."""
        self.tally["unknown_writes"] += 1
        seen: list[bytes | None] = []
        before = self.model.value(bucket, key, self.now_ms())
        with suppress(inkpen.StoreError):
            seen.append(self.book.get(bucket, key))
        self.drop_snapshots(still_open=True)
        self.book.abandon()
        self.pending = True
        self.pending_count = count
        try:
            self.book = self.open_book()
        finally:
            self.pending = False
            self.pending_count = 1
        if self.book.stats()["sqn"] == self.model.writes + count:
            apply()
            self.tally["unknown_writes_landed"] += 1
        if seen:
            after = self.model.value(bucket, key, self.now_ms())
            assert seen[0] in (before, after), (
                f"the failed Bookie read {bucket!r}/{key!r} as {seen[0]!r}; before the write it "
                f"held {before!r}, the reopened database holds {after!r}"
            )
        self.full_check(self.book, self.model)

    @rule(bucket=buckets, key=keys, severity=st.sampled_from(OUTAGES))
    def write_during_outage(self, bucket: str, key: str, severity: float) -> None:
        """A put while every create lands but loses its response and reads fail at
        ``severity``: the engine settles the outcome by reading back, or, when it cannot, the
        put fails with its outcome unknown and the machine settles it."""
        faulty = self.target()
        usual = faulty.plan
        faulty.plan = FaultPlan(
            usual.seed,
            before=dict.fromkeys(("get", "get_range", "head", "list"), severity),
            after={"put_if_absent": 1.0},
        )
        try:
            self.put(bucket, key, 40, True, [("add", FIELDS[1], TERMS[3])], None)
        finally:
            faulty.plan = usual
        self.tally["outages"] += 1

    @rule(bucket=buckets, key=keys, severity=st.sampled_from(OUTAGES), delete=st.booleans())
    def conditional_write_during_outage(
        self, bucket: str, key: str, severity: float, delete: bool
    ) -> None:
        """A conditional write whose segment lands but loses its response: the engine retries
        it (reading back) and it reports success, never a conflict with itself; or its outcome
        stays unknown and the machine settles it.

        The write must find room first: at the throttle's STOP level it would wait for an L0
        write, which the outage (every put's response lost) never lets finish."""
        try:
            self.book.flush()
        except inkpen.StoreError as exc:
            if not injected(exc):
                raise
        if self.book._engine.throttle.level != NONE:
            return
        faulty = self.target()
        usual = faulty.plan
        faulty.plan = FaultPlan(
            usual.seed,
            before=dict.fromkeys(("get", "get_range", "head", "list"), severity),
            after={"put_if_absent": 1.0},
        )
        try:
            self.conditional_write(bucket, key, True, delete, 40)
        finally:
            faulty.plan = usual
        self.tally["conditional_outages"] += 1

    def expect_fenced(self, first: inkpen.Bookie) -> None:
        for _ in range(FENCED_WRITE_ATTEMPTS):
            try:
                first.put("b0", "k0", b"from a fenced writer")
            except inkpen.FencedError:
                return
            except inkpen.InkpenError:
                continue
            raise AssertionError("a fenced Bookie acknowledged a write")


class ExternalMachine(BookieMachine):
    """The machine with its writer opened with compaction="external": merges, journal compaction
    and GC are a compactor's (run in threads here, on the same store), which the rules start
    beside the writer's writes, fence with a newer one, and call on when the writer waits.

    Writes never wait for ever without a compactor: while a write is held at the throttle's
    STOP level and the writer reports ``waiting_for_compactor``, a watcher thread runs a
    compactor round (``rescues``), as an operator's compactor process would; it stands aside
    while a rule holds a compactor of its own (``compactor_lock``)."""

    kind: ClassVar[str] = "external"
    compaction: ClassVar[str] = "external"

    def __init__(self) -> None:
        self.compactor_lock = threading.Lock()
        self.watching = threading.Event()
        self.watcher: threading.Thread | None = None
        self.watch_failures: list[BaseException] = []
        super().__init__()

    @initialize()
    def start(self) -> None:
        self.book = self.open_book()
        self.watching.set()
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        self.watcher.start()

    def open_raw(self, **extra: Any) -> inkpen.Bookie:
        """Open beside a running compactor: replay may fill L0 before the writer is back, and
        an external writer's replay waits for a compactor like its puts do."""
        with self.compactor_lock:
            try:
                compactor = self.open_compactor()
            except inkpen.NotFoundError:  # the first open creates the database
                return super().open_raw(**extra)
            stop = threading.Event()
            runner = threading.Thread(target=compactor.run, args=(stop,), daemon=True)
            runner.start()
            try:
                return super().open_raw(**extra)
            finally:
                stop.set()
                runner.join(HELD_DEADLINE)
                compactor.close()

    def open_compactor(self, store: str | ObjectStore | None = None) -> inkpen.Compactor:
        return inkpen.open_compactor(
            store or self.target(), clock=self.clock, interval=0.01, **self.sizes
        )

    def watch(self) -> None:
        """Run a compactor round whenever writes are held and the writer waits for one."""
        try:
            while self.watching.is_set():
                book = self.book
                if book is not None and book._engine.ctx.throttle.waiting and self.held(book):
                    self.rescue(book)
                threading.Event().wait(0.01)
        except BaseException as exc:  # reported by the invariant below
            self.watch_failures.append(exc)

    def rescue(self, book: inkpen.Bookie) -> None:
        """One compactor round, unless a rule runs a compactor; then wait for the adoption."""
        if not self.compactor_lock.acquire(blocking=False):
            return
        try:
            with self.open_compactor() as compactor:
                compactor.run_once()
            self.tally["rescues"] += 1
        finally:
            self.compactor_lock.release()
        # The writer adopts within WATCH_INTERVAL_HELD: pace the next look, expect nothing.
        threading.Event().wait(0.2)

    @staticmethod
    def held(book: inkpen.Bookie) -> bool:
        try:
            return bool(book.stats()["waiting_for_compactor"])
        except inkpen.InkpenError:  # closed or abandoned meanwhile
            return False

    @invariant()
    def watcher_is_well(self) -> None:
        assert not self.watch_failures, repr(self.watch_failures[0])

    def notice_fence(self, first: inkpen.Bookie) -> None:
        # An external writer runs no GC pass; its next manifest commit learns of the fence.
        first.checkpoint()

    def teardown(self) -> None:
        self.watching.clear()
        if self.watcher is not None:
            self.watcher.join(HELD_DEADLINE)
        super().teardown()

    # -- the compactor ------------------------------------------------------------------------

    @rule(changes=st.lists(changes, max_size=40))
    def compactor_beside_writes(self, changes: list[tuple[Any, ...]]) -> None:
        """A compactor runs rounds while the writer writes (its L0 commits merge with the
        compactor's replacements), then one more round; every read agrees with the model."""
        stop = threading.Event()
        failures: list[BaseException] = []
        reports: list[inkpen.CompactorReport] = []
        with self.compactor_lock:
            compactor = self.open_compactor()

            def loop() -> None:
                try:
                    compactor.run(stop, on_report=reports.append)
                except BaseException as exc:
                    failures.append(exc)

            runner = threading.Thread(target=loop, daemon=True)
            runner.start()
            try:
                self.apply_changes(changes)
            finally:
                stop.set()
                runner.join(HELD_DEADLINE)
            assert not runner.is_alive(), "the compactor's loop did not stop"
            assert not failures, repr(failures[0])
            reports.append(compactor.run_once())
            compactor.close()
        assert all(r.epoch == compactor.epoch for r in reports)
        self.tally["compactor_rounds"] += len(reports)
        self.tally["compactor_merges"] += sum(r.merges for r in reports)
        self.full_check(self.book, self.model)

    @rule()
    def compactor_fenced_by_a_newer_one(self) -> None:
        """A second compactor claims the database while the first is between storing a merge's
        files and committing them: the first gets FencedError, and nothing it stored appears in
        any manifest; the second's round then works."""
        self.book.flush()  # an L0 file to merge, if anything was written
        with self.compactor_lock, self.store_for_gc() as plain:
            before = {i.key for i in plain.list("ledger/")}
            hooked = HookedStore(open_store(self.url))
            newer: list[inkpen.Compactor] = []

            def claim() -> None:
                if not newer:
                    newer.append(self.open_compactor())

            hooked.before_create("ledger/", claim)
            older = self.open_compactor(hooked)
            try:
                with pytest.raises(inkpen.FencedError, match="compactor epoch"):
                    older.run_once()
                    claim()  # no merge to make: the claim comes after a round
                    older.run_once()
                if hooked.fired:
                    self.tally["compactors_fenced_mid_merge"] += 1
                stored = {i.key for i in plain.list("ledger/")} - before
                latest = ManifestStore(plain).latest()
                assert latest is not None
                named = {name for _, name in latest.manifest.referenced_objects()}
                assert not stored & named, "a fenced compactor's files appeared in the manifest"
                assert newer[0].epoch == older.epoch + 1
                newer[0].run_once()
                latest = ManifestStore(plain).latest()
                assert latest is not None
                named = {name for _, name in latest.manifest.referenced_objects()}
                assert not stored & named, "a fenced compactor's files appeared in the manifest"
            finally:
                older.close()
                for compactor in newer:
                    compactor.close()
                hooked.close()
        self.tally["compactors_fenced"] += 1
        self.full_check(self.book, self.model)

    # -- maintenance is the compactor's ---------------------------------------------------------

    @rule()
    def compact_ledger(self) -> None:
        """The writer merges nothing; a compactor empties L0 and the writer adopts its levels."""
        self.book.flush()
        with self.compactor_lock, self.open_compactor() as compactor:
            wait_until(
                lambda: compactor.run_once().l0_files == 0,
                "the compactor to empty L0",
                HELD_DEADLINE,
                interval=0,
            )
        wait_until(lambda: self.book.stats()["l0_files"] == 0, "an adopted L0", HELD_DEADLINE)
        stats = self.book.stats()
        assert stats["merges"] == 0, "an external writer merged"
        for depth, files in enumerate(stats["level_files"][1:], start=1):
            target = self.sizes["l1_target_files"] * self.sizes["level_fanout"] ** (depth - 1)
            assert files <= target, f"L{depth} holds {files} files, over its target {target}"

    @rule()
    def compact_journal(self) -> None:
        with pytest.raises(inkpen.UsageError, match="external"):
            self.book.compact_journal()
        with self.compactor_lock, self.open_compactor() as compactor:
            report = compactor.run_once().journal
        if report is not None and report.compacted:
            assert not set(report.written) & set(report.compacted)
            self.tally["journal_compactions"] += 1

    @rule()
    def collect_garbage(self) -> None:
        """The writer runs no GC pass; a compactor's (min_age a minute) leaves every snapshot
        and checkpoint reading as before."""
        with pytest.raises(inkpen.UsageError, match="external"):
            self.book.run_gc(min_age=0.0)
        with self.compactor_lock, self.open_compactor() as compactor:
            gc = compactor.run_once().gc
        assert gc is not None
        for snap, frozen, ledger_only in self.snaps:
            self.check_view(snap, frozen, BUCKETS[0], KEYS[0], FIELDS[0], ledger_only=ledger_only)
        for checkpoint, frozen in self.checkpoints:
            with self.reader(checkpoint) as reader:
                assert reader is not None
                self.fold(
                    reader.objects,
                    frozen.objects_in(None, None, None, self.now_ms()),
                    "objects at a checkpoint after GC",
                )


def run_machine(machine: type[BookieMachine], kind: str) -> Counter[str]:
    machine.tally = Counter()
    run_state_machine_as_test(machine, settings=machine_settings(kind))
    return machine.tally


def test_machine_on_memory() -> None:
    tally = run_machine(BookieMachine, "memory")
    print(dict(tally))
    assert tally["journal_compactions"] > 0
    assert tally["merges_seen"] > 0
    assert tally["crashes"] > 0 and tally["takeovers"] > 0
    assert tally["segments_lost"] > 0


def test_machine_with_a_compactor() -> None:
    tally = run_machine(ExternalMachine, "external")
    print(dict(tally))
    assert tally["compactor_rounds"] > 0 and tally["compactor_merges"] > 0
    assert tally["compactors_fenced"] > 0 and tally["compactors_fenced_mid_merge"] > 0
    assert tally["crashes"] > 0 and tally["takeovers"] > 0


def test_machine_on_failing_store() -> None:
    tally = run_machine(FaultyMachine, "faulty")
    print(dict(tally))
    assert any(k.endswith(" before") for k in tally) and any(k.endswith(" after") for k in tally)


PIPELINED = {"segments_in_flight": 4}
"""Several segment writes in flight: the threads of ``write_concurrently`` share a window of
them, and every write's acknowledgement, failure and settling goes through it."""


def test_machine_with_segments_in_flight() -> None:
    class Pipelined(BookieMachine):
        in_flight = PIPELINED

    tally = run_machine(Pipelined, "pipelined")
    print(dict(tally))
    assert tally["concurrent_writes"] > 0
    assert tally["crashes"] > 0 and tally["takeovers"] > 0


def test_machine_with_segments_in_flight_on_failing_store() -> None:
    class PipelinedFaulty(FaultyMachine):
        in_flight = PIPELINED

    tally = run_machine(PipelinedFaulty, "pipelined_faulty")
    print(dict(tally))
    assert any(k.endswith(" after") for k in tally)


def test_machine_on_local_directory(tmp_path: Path) -> None:
    class OnLocalDirectory(BookieMachine):
        kind = "local"

        def new_url(self) -> str:
            return str(tmp_path / f"machine-{uuid.uuid4().hex[:16]}")

        def discard(self, url: str) -> None:
            shutil.rmtree(url, ignore_errors=True)

    tally = run_machine(OnLocalDirectory, "local")
    print(dict(tally))
    assert tally["full_checks"] > 0


@pytest.mark.s3
def test_machine_on_seaweedfs(seaweed: SeaweedServer, seaweed_bucket: str) -> None:
    class OnSeaweed(BookieMachine):
        kind = "s3"

        def new_url(self) -> str:
            return f"s3://{seaweed_bucket}/machine-{uuid.uuid4().hex}?endpoint={seaweed.endpoint}"

        def discard(self, url: str) -> None:
            store = open_store(url)
            try:
                for info in store.list(""):
                    store.delete(info.key)
            finally:
                store.close()

    tally = run_machine(OnSeaweed, "s3")
    print(dict(tally))
    assert tally["full_checks"] > 0


@pytest.mark.s3
@pytest.mark.latency
@pytest.mark.latency_tier
def test_machine_behind_latency(
    seaweed: SeaweedServer, seaweed_bucket: str, latency_proxy: ProxyProcess
) -> None:
    """The machine on SeaweedFS behind the latency proxy: every request takes a round trip, so
    flushes, merges, rolls and GC overlap the writes more than on loopback."""

    class BehindLatency(BookieMachine):
        kind = LATENCY_KIND

        def new_url(self) -> str:
            root = f"machine-{uuid.uuid4().hex}"
            return f"s3://{seaweed_bucket}/{root}?endpoint={latency_proxy.endpoint}"

        def discard(self, url: str) -> None:
            store = open_store(url.replace(latency_proxy.endpoint, seaweed.endpoint))
            try:
                for info in store.list(""):
                    store.delete(info.key)
            finally:
                store.close()

    tally = run_machine(BehindLatency, LATENCY_KIND)
    print(dict(tally))
    assert tally["full_checks"] > 0
