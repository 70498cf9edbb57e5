"""Several interleaved transactions against a model of the committed history.

A Hypothesis rule-based state machine opens up to three transactions at a time (either isolation
level), reads keys and key ranges in them, buffers puts and deletes, commits or rolls them back,
and writes outside any transaction meanwhile. The model keeps the committed state and, per key,
the commit that last changed it, so it knows exactly which commits must conflict:

- every read inside a transaction equals the model's state when the transaction began, overlaid
  with its own buffered writes;
- ``snapshot``: a commit conflicts exactly when a key it writes changed after it began, so no
  two committed transactions both wrote a key from the same snapshot (no lost update);
- ``serializable``: also when a key it read (found or not) changed, or a changed key falls in a
  range it read; and then every committed transaction's reads equal the model's state just
  before its commit: the committed history is the serial history in commit order;
- a conflicting commit writes nothing, and after every step the Bookie holds the model's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import inkpen
from inkpen.objectstore.memory import drop_space
from support.profiles import machine_settings

BUCKET = "b"
KEYS = ("k0", "k1", "k2", "k3", "k4")
MAX_OPEN = 3

keys = st.sampled_from(KEYS)
values = st.one_of(st.none(), st.sampled_from((b"", b"a", b"bb", b"ccc")))
bounds = st.sampled_from((None, *KEYS))
picks = st.integers(min_value=0, max_value=MAX_OPEN - 1)


@dataclass
class OpenTxn:
    txn: inkpen.Transaction
    isolation: str
    began: int
    """The model's commit count when it began."""
    snapshot: dict[str, bytes]
    writes: dict[str, bytes | None] = field(default_factory=dict)
    reads: set[str] = field(default_factory=set)
    ranges: list[tuple[str | None, str | None]] = field(default_factory=list)

    def sees(self) -> dict[str, bytes]:
        view = dict(self.snapshot)
        for key, value in self.writes.items():
            if value is None:
                view.pop(key, None)
            else:
                view[key] = value
        return view


def _in(key: str, start: str | None, end: str | None) -> bool:
    return (start is None or start <= key) and (end is None or key <= end)


class TransactionMachine(RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.book = inkpen.open(self.url)
        self.state: dict[str, bytes] = {}
        self.commits = 0
        self.changed: dict[str, int] = {}
        """Key -> the commit (1, 2, ...) that last wrote it (a delete of an absent key too)."""
        self.open: list[OpenTxn] = []

    def teardown(self) -> None:
        for entry in self.open:
            entry.txn.close()
        self.book.close()
        if self.url.startswith("memory://"):
            drop_space(self.url.removeprefix("memory://"))

    def _pick(self, i: int) -> OpenTxn:
        return self.open[i % len(self.open)]

    def _committed(self, writes: dict[str, bytes | None]) -> None:
        self.commits += 1
        for key, value in writes.items():
            self.changed[key] = self.commits
            if value is None:
                self.state.pop(key, None)
            else:
                self.state[key] = value

    # -- outside transactions ---------------------------------------------------------------

    @rule(key=keys, value=values)
    def plain_write(self, key: str, value: bytes | None) -> None:
        if value is None:
            self.book.delete(BUCKET, key)
        else:
            self.book.put(BUCKET, key, value)
        self._committed({key: value})

    # -- transactions -----------------------------------------------------------------------

    @precondition(lambda self: len(self.open) < MAX_OPEN)
    @rule(isolation=st.sampled_from(("snapshot", "serializable")))
    def begin(self, isolation: str) -> None:
        txn = self.book.transaction(isolation)
        self.open.append(OpenTxn(txn, isolation, self.commits, dict(self.state)))

    @precondition(lambda self: self.open)
    @rule(i=picks, key=keys)
    def read(self, i: int, key: str) -> None:
        entry = self._pick(i)
        got = entry.txn.get(BUCKET, key)
        assert got == entry.sees().get(key)
        if key not in entry.writes:
            entry.reads.add(key)

    @precondition(lambda self: self.open)
    @rule(i=picks, start=bounds, end=bounds, reverse=st.booleans())
    def read_range(self, i: int, start: str | None, end: str | None, reverse: bool) -> None:
        entry = self._pick(i)
        got = [k.decode() for k in entry.txn.keys(BUCKET, start, end, reverse=reverse)]
        expected = sorted((k for k in entry.sees() if _in(k, start, end)), reverse=reverse)
        assert got == expected
        entry.ranges.append((start, end))

    @precondition(lambda self: self.open)
    @rule(i=picks, key=keys, value=values)
    def write(self, i: int, key: str, value: bytes | None) -> None:
        entry = self._pick(i)
        if value is None:
            entry.txn.delete(BUCKET, key)
        else:
            entry.txn.put(BUCKET, key, value)
        entry.writes[key] = value

    @precondition(lambda self: self.open)
    @rule(i=picks)
    def rollback(self, i: int) -> None:
        entry = self._pick(i)
        self.open.remove(entry)
        entry.txn.rollback()

    @precondition(lambda self: self.open)
    @rule(i=picks)
    def commit(self, i: int) -> None:
        entry = self._pick(i)
        self.open.remove(entry)
        since = {k for k, at in self.changed.items() if at > entry.began}
        culprits = since & set(entry.writes)
        if entry.isolation == "serializable":
            culprits |= since & entry.reads
            culprits |= {k for k in since for s, e in entry.ranges if _in(k, s, e)}
        if not entry.writes:
            culprits = set()  # read-only: serialises at its snapshot, nothing to check
        try:
            entry.txn.commit()
        except inkpen.ConflictError as exc:
            assert culprits, f"an unexpected conflict: {exc}"
            assert exc.key.decode() in culprits, (exc.key, culprits)
            return
        assert not culprits, f"committed although {sorted(culprits)} changed after it began"
        # no lost update: nothing it wrote changed since its snapshot
        assert all(self.changed.get(k, 0) <= entry.began for k in entry.writes)
        if entry.isolation == "serializable" and entry.writes:
            # its reads are the state just before its commit: the commit-order serial history
            for key in entry.reads:
                assert entry.snapshot.get(key) == self.state.get(key)
            for start, end in entry.ranges:
                before = {k for k in entry.snapshot if _in(k, start, end)}
                assert before == {k for k in self.state if _in(k, start, end)}
        self._committed(entry.writes)

    # -- what the Bookie holds --------------------------------------------------------------

    @invariant()
    def the_bookie_holds_the_committed_state(self) -> None:
        got = self.book.get_many(BUCKET, KEYS)  # one consistent state, no fold's snapshot
        assert got == [self.state.get(k) for k in KEYS]


def _run(url: str, kind: str) -> None:
    class Machine(TransactionMachine):
        pass

    counter = {"n": 0}

    def fresh(self: Any) -> None:
        counter["n"] += 1
        Machine.url = f"{url}-{counter['n']}"
        TransactionMachine.__init__(self)

    Machine.__init__ = fresh  # type: ignore[method-assign]
    chosen = machine_settings(kind)
    # each step commits through the journal: half the engine machine's examples keep this file
    # to seconds (the deep profile scales it up as it does the others)
    run_state_machine_as_test(
        Machine, settings=settings(chosen, max_examples=max(10, chosen.max_examples // 2))
    )


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_interleaved_transactions_follow_the_model(
    kind: str, make_store_url: Any, tmp_path: Any
) -> None:
    base = make_store_url("memory") if kind == "memory" else str(tmp_path / "db")
    _run(base, kind)
