"""ShardedBookie offers every public method and property of the Bookie that has a meaning over
shards, with the Bookie's parameters: derived here by introspection, as tests/test_aio_parity.py
derives the asyncio handles'. A method added to the Bookie fails this test until the sharded
handle has it too, or :data:`LEFT_OUT` says why it cannot.

Where a data set differs it is declared here, each with its reason: the methods that are per
shard (SQNs are per shard) take a keyword ``shard``; the maintenance calls that act on every
shard the handle writes answer one report per shard; snapshots, transactions and hot backups
are the sharded kinds.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import pytest
from test_aio_parity import hints, params, public_surface

import inkpen
from inkpen import shards
from inkpen.read_api import FoldIterator

LEFT_OUT: dict[str, str] = {}
"""Bookie methods a ShardedBookie does not offer -> why. (Every one has a meaning over shards
today: a head-only data set's mput, trim_journal and head_only_get route or fan out as writes
and reads do.)"""

SHARD_REQUIRED = {
    "changes": "SQNs are per shard: each shard has its own feed",
    "create_feed_cursor": "a feed cursor holds an SQN, which is one shard's",
    "advance_feed_cursor": "a feed cursor holds an SQN, which is one shard's",
    "delete_feed_cursor": "a feed cursor is one shard's",
    "feed_cursors": "a feed cursor is one shard's",
}
"""Methods whose sharded twin takes a required keyword-only ``shard`` -> why."""

SHARD_OPTIONAL = {"metrics": "the sum over the opened shards, or one shard's"}
"""Methods whose sharded twin takes an optional keyword-only ``shard`` -> why."""

EXTRA_PARAMETERS = {"changes": {"wait"}}
"""Optional parameters a sharded method has beyond the Bookie's (the Bookie's ``changes`` gains
``wait`` too, beside a following Reader's)."""

BY_SHARD = {"run_gc", "compact_journal", "trim_journal", "stats"}
"""Maintenance on every shard the handle writes: the Bookie's answer, once per shard, in a dict
keyed by shard number."""

SHARDED_KINDS: dict[Any, Any] = {
    inkpen.Bookie: shards.ShardedBookie,
    inkpen.Snapshot: shards.ShardedSnapshot,
    inkpen.Transaction: shards.ShardedTransaction,
    inkpen.HotBackup: shards.ShardedHotBackup,
}
"""A type a Bookie method answers -> what the sharded method answers instead."""


def sharded_parity_problems(book_cls: type, sharded_cls: type) -> list[str]:
    """Everything of ``book_cls``'s public face that ``sharded_cls`` lacks or has differently."""
    problems: list[str] = []
    methods, properties = public_surface(book_cls)
    for name, book_fn in sorted(methods.items()):
        where = f"{sharded_cls.__name__}.{name}"
        if name in LEFT_OUT:
            if hasattr(sharded_cls, name):
                problems.append(f"{where}: listed as left out, but it exists")
            continue
        try:
            fn = inspect.getattr_static(sharded_cls, name)
        except AttributeError:
            problems.append(f"{where}: missing (the Bookie has it); add it or say in LEFT_OUT why")
            continue
        problems += _compare_parameters(where, name, book_fn, fn)
        problems += _compare_answers(where, name, book_fn, fn)
    for name, prop in sorted(properties.items()):
        twin = inspect.getattr_static(sharded_cls, name, None)
        if not isinstance(twin, property):
            problems.append(f"{sharded_cls.__name__}.{name}: not a property, as Bookie.{name} is")
        elif hints(twin.fget).get("return") != hints(prop.fget).get("return"):
            problems.append(f"{sharded_cls.__name__}.{name}: typed other than Bookie.{name}")
    return problems


def _compare_parameters(where: str, name: str, book_fn: Any, fn: Any) -> list[str]:
    problems: list[str] = []
    ours, theirs = params(book_fn), params(fn)
    book_types, types = hints(book_fn), hints(fn)
    positional = [p for p in ours if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    their_positional = [p for p in theirs if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    if [(p.name, p.kind, p.default) for p in positional] != [
        (p.name, p.kind, p.default) for p in their_positional
    ]:
        problems.append(f"{where}: positional parameters differ from the Bookie's")
    keywords = {p.name: p for p in ours if p.kind is inspect.Parameter.KEYWORD_ONLY}
    their_keywords = {p.name: p for p in theirs if p.kind is inspect.Parameter.KEYWORD_ONLY}
    for p in [*positional, *keywords.values()]:
        q = their_keywords.get(p.name) or next(
            (t for t in their_positional if t.name == p.name), None
        )
        if q is None:
            problems.append(f"{where}: lacks the Bookie's parameter {p.name!r}")
        elif q.default != p.default or types.get(q.name) != book_types.get(p.name):
            problems.append(f"{where}: parameter {p.name!r} has another default or type")
    extra = set(their_keywords) - set(keywords)
    allowed = set(EXTRA_PARAMETERS.get(name, set()))
    if name in SHARD_REQUIRED or name in SHARD_OPTIONAL:
        allowed.add("shard")
        shard = their_keywords.get("shard")
        if shard is None:
            problems.append(f"{where}: must take a keyword-only shard")
        elif (shard.default is inspect.Parameter.empty) != (name in SHARD_REQUIRED):
            problems.append(
                f"{where}: shard must be {'required' if name in SHARD_REQUIRED else 'optional'}"
            )
    for unknown in sorted(extra - allowed):
        problems.append(f"{where}: has parameter {unknown!r} the Bookie does not have")
    for extra_name in sorted(extra & set(EXTRA_PARAMETERS.get(name, set()))):
        if their_keywords[extra_name].default is inspect.Parameter.empty:
            problems.append(f"{where}: the extra parameter {extra_name!r} must be optional")
    return problems


def _compare_answers(where: str, name: str, book_fn: Any, fn: Any) -> list[str]:
    answered = hints(fn).get("return")
    returned = hints(book_fn).get("return")
    if name in BY_SHARD:
        wanted: Any = types.GenericAlias(dict, (int, returned))
    else:
        wanted = SHARDED_KINDS.get(returned, returned)
    if answered != wanted:
        return [f"{where}: answers {answered}, want {wanted} (the Bookie answers {returned})"]
    return []


# -- the real handles -------------------------------------------------------------------------


def test_the_sharded_bookie_has_every_method_of_the_bookie() -> None:
    assert sharded_parity_problems(inkpen.Bookie, shards.ShardedBookie) == []


def test_the_declarations_name_only_bookie_methods() -> None:
    """A declaration naming what the Bookie does not have is stale: it hides nothing."""
    methods, _ = public_surface(inkpen.Bookie)
    declared = {*LEFT_OUT, *SHARD_REQUIRED, *SHARD_OPTIONAL, *EXTRA_PARAMETERS, *BY_SHARD}
    assert declared <= set(methods)


def test_the_derived_surface_holds_what_the_bookie_is_known_to_have() -> None:
    """Guards the introspection itself: an empty or partial derivation would pass vacuously."""
    methods, props = public_surface(inkpen.Bookie)
    assert {
        "put", "delete", "merge", "write", "mput", "transaction", "snapshot", "metrics",
        "stats", "checkpoint", "hot_backup", "changes", "get", "keys", "objects",
        "index_query", "tictac_tree", "compact_journal", "run_gc", "close", "__enter__",
    } <= set(methods)  # fmt: skip
    assert {"url", "options", "closed"} <= set(props)
    assert typing.get_origin(hints(inkpen.Bookie.keys)["return"]) is FoldIterator


# -- the check catches what it is for -----------------------------------------------------------


class _GrownBookie(inkpen.Bookie):
    def frobnicate(self, times: int = 1) -> int:
        return times


class _DriftedShardedBookie(shards.ShardedBookie):
    def checkpoint(self, lifetime: float | None = 60.0, *, name: str | None = None) -> str:
        return "drifted"

    def feed_cursors(self) -> tuple[inkpen.FeedCursor, ...]:  # type: ignore[override]
        return ()

    def stats(self) -> Any:
        return None


def test_a_bookie_method_without_a_sharded_twin_fails() -> None:
    assert sharded_parity_problems(_GrownBookie, shards.ShardedBookie) == [
        "ShardedBookie.frobnicate: missing (the Bookie has it); add it or say in LEFT_OUT why"
    ]


def test_a_twin_with_other_parameters_or_answers_fails() -> None:
    problems = sharded_parity_problems(inkpen.Bookie, _DriftedShardedBookie)
    joined = "\n".join(problems)
    assert "_DriftedShardedBookie.checkpoint: positional parameters differ" in joined
    assert "_DriftedShardedBookie.feed_cursors: must take a keyword-only shard" in joined
    assert "_DriftedShardedBookie.stats: answers typing.Any" in joined
    assert "_DriftedShardedBookie.checkpoint: parameter 'lifetime' has another default" in joined
    assert len(problems) == 4, problems


@pytest.mark.parametrize("name", ["open", "open_reader"])
def test_the_async_shards_openers_take_the_sync_openers_arguments(name: str) -> None:
    import inkpen.aio.shards

    sync_fn, async_fn = getattr(shards, name), getattr(inkpen.aio.shards, name)
    ours = list(inspect.signature(sync_fn).parameters.values())
    theirs = {p.name: p for p in inspect.signature(async_fn).parameters.values()}
    for p in ours:
        assert p.name in theirs, p.name
        assert (theirs[p.name].kind, theirs[p.name].default) == (p.kind, p.default), p.name
    for q in theirs.values():
        if q.name not in {p.name for p in ours}:
            assert q.name in {"workers", "fold_chunk"}, q.name
            assert q.kind is inspect.Parameter.KEYWORD_ONLY and q.default is not q.empty
