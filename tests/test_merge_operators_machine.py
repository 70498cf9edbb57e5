"""A Hypothesis state machine mixing merges with puts, deletes, batches, flushes, ledger merges,
journal compaction, snapshots and clean and crashed reopens, against a model dict.

Tiny file sizes make a few writes flush, merge and roll; the key space is small, so operands,
puts and deletes of one key keep meeting in every file. After every step a rotating key must
read as the model says; after every reopen and compaction every key is compared, through get,
get_many and the objects fold.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

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
from inkpen.objectstore.memory import drop_space
from support.engine import TINY
from support.profiles import machine_settings

_NUMBER = re.compile(rb"-?[0-9]+")
BUCKET = "b"
KEYS = ("k0", "k1", "k2", "k\x00")


def add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    """Adds to the number the value starts with (0 if none), dropping the rest of it."""
    found = _NUMBER.match(existing or b"")
    total = int(found.group()) if found else 0
    return str(total + sum(int(o) for o in operands)).encode()


def append(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return (existing or b"") + b"".join(operands)


OPERATORS = {"add": add, "append": append}

keys = st.sampled_from(KEYS)
numbers = st.integers(min_value=-3, max_value=30)
# Values of every size class: small ones are kept in the ledger too, large ones only in the
# journal (TINY rolls a segment of 4 KiB or more by link).
pieces = st.sampled_from((b"", b"a", b"xyz" * 20, b"L" * 1500, b"H" * 5000))
operations = st.one_of(
    st.tuples(st.just("put"), keys, numbers, pieces),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("add"), keys, numbers),
    st.tuples(st.just("append"), keys, pieces),
)


def folded(model: dict[str, bytes], operation: tuple[Any, ...]) -> bytes | None:
    """The value ``operation`` leaves its key with, ``model`` holding the values before it."""
    kind, key = operation[0], operation[1]
    if kind == "put":
        return str(operation[2]).encode() + b"|" + bytes(operation[3])
    if kind == "delete":
        return None
    if kind == "add":
        return add(b"", model.get(key), [str(operation[2]).encode()])
    return append(b"", model.get(key), [operation[2]])


class MergeMachine(RuleBasedStateMachine):
    """One database driven through merges and maintenance, compared with a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.url = f"memory://merge-machine-{uuid.uuid4().hex}"
        self.model: dict[str, bytes] = {}
        self.book: inkpen.Bookie | None = None
        self.snapshot: tuple[inkpen.Snapshot, dict[str, bytes]] | None = None
        self.turn = 0

    @initialize()
    def open_book(self) -> None:
        self.book = inkpen.open(self.url, **TINY, merge_operators=OPERATORS)

    def apply(self, book: inkpen.Bookie, operation: tuple[Any, ...]) -> None:
        kind, key = operation[0], operation[1]
        if kind == "put":
            book.put(BUCKET, key, str(operation[2]).encode() + b"|" + operation[3])
        elif kind == "delete":
            book.delete(BUCKET, key)
        elif kind == "add":
            book.merge(BUCKET, key, str(operation[2]).encode(), operator="add")
        else:
            book.merge(BUCKET, key, operation[2], operator="append")

    @rule(operation=operations)
    def write(self, operation: tuple[Any, ...]) -> None:
        assert self.book is not None
        self.apply(self.book, operation)
        self.record(operation)

    def record(self, operation: tuple[Any, ...]) -> None:
        value = folded(self.model, operation)
        if value is None:
            self.model.pop(operation[1], None)
        else:
            self.model[operation[1]] = value

    @rule(batch=st.lists(operations, min_size=1, max_size=6))
    def write_batch(self, batch: list[tuple[Any, ...]]) -> None:
        assert self.book is not None
        written = inkpen.Batch()
        for operation in batch:
            kind, key = operation[0], operation[1]
            if kind == "put":
                written.put(BUCKET, key, str(operation[2]).encode() + b"|" + operation[3])
            elif kind == "delete":
                written.delete(BUCKET, key)
            elif kind == "add":
                written.merge(BUCKET, key, str(operation[2]).encode(), operator="add")
            else:
                written.merge(BUCKET, key, operation[2], operator="append")
        self.book.write(written)
        for operation in batch:
            self.record(operation)

    @rule()
    def flush(self) -> None:
        assert self.book is not None
        self.book.flush()

    @rule()
    def compact_ledger(self) -> None:
        assert self.book is not None
        self.book.compact_ledger()
        self.check_all("after ledger merges")

    @rule()
    def compact_journal(self) -> None:
        assert self.book is not None
        self.book.compact_journal()
        self.check_all("after journal compaction")

    @precondition(lambda self: self.snapshot is None)
    @rule()
    def take_snapshot(self) -> None:
        assert self.book is not None
        self.snapshot = (self.book.snapshot(), dict(self.model))

    @precondition(lambda self: self.snapshot is not None)
    @rule()
    def check_and_close_snapshot(self) -> None:
        assert self.snapshot is not None
        snap, frozen = self.snapshot
        self.compare(snap, frozen, "through a snapshot")
        snap.close()
        self.snapshot = None

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        assert self.book is not None
        if self.snapshot is not None:
            self.snapshot[0].close()
            self.snapshot = None
        if crash:
            self.book.abandon()
        else:
            self.book.close()
        self.book = inkpen.open(self.url, **TINY, merge_operators=OPERATORS)
        self.check_all("after reopening" + (" from a crash" if crash else ""))

    def compare(self, reader: Any, model: dict[str, bytes], what: str) -> None:
        wanted = [model.get(key) for key in KEYS]
        assert [reader.get(BUCKET, key) for key in KEYS] == wanted, what
        assert reader.get_many(BUCKET, KEYS) == wanted, what
        objects = {key.decode(): value for _, key, value in reader.objects(BUCKET)}
        assert objects == model, what

    def check_all(self, what: str) -> None:
        assert self.book is not None
        self.compare(self.book, self.model, what)

    @invariant()
    def a_key_reads_as_the_model_says(self) -> None:
        if self.book is None:
            return
        key = KEYS[self.turn % len(KEYS)]
        self.turn += 1
        assert self.book.get(BUCKET, key) == self.model.get(key)

    def teardown(self) -> None:
        if self.snapshot is not None:
            self.snapshot[0].close()
        if self.book is not None:
            self.check_all("at the end")
            self.book.close()
        drop_space(self.url.removeprefix("memory://"))


def test_merge_machine_on_memory() -> None:
    run_state_machine_as_test(MergeMachine, settings=machine_settings("local"))
