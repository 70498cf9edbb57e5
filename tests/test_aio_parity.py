"""inkpen.aio offers every public method and property of the synchronous handles, derived here by
introspection: a method added to Bookie, Reader, Snapshot, HotBackup, Transaction or a sharded
data set's handles (ShardedBookie and what it hands out) without its async twin (same name, same
parameters with the same kinds, defaults and types, the matching shape) fails.

The shapes: what returns a fold or an iterator there returns an :class:`inkpen.aio.AsyncFold` of
the same items here; ``__enter__``/``__exit__`` become ``__aenter__``/``__aexit__``; a method
returning a snapshot (a context manager) answers something both awaitable and usable with
``async with``; everything else is a coroutine returning the same type (or its async twin),
except what is computed from the arguments alone (:data:`PURE`), a plain method in both.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from typing import Any

import pytest

import inkpen
import inkpen.aio
from inkpen import shards
from inkpen.aio import (
    AsyncBookie,
    AsyncFold,
    AsyncHotBackup,
    AsyncReader,
    AsyncSnapshot,
    AsyncTransaction,
)
from inkpen.aio.shards import (
    AsyncShardedBookie,
    AsyncShardedHotBackup,
    AsyncShardedSnapshot,
    AsyncShardedTransaction,
)
from inkpen.read_api import FoldIterator, ReadAPI

PAIRS: list[tuple[type, type]] = [
    (inkpen.Bookie, AsyncBookie),
    (inkpen.Reader, AsyncReader),
    (inkpen.Snapshot, AsyncSnapshot),
    (inkpen.HotBackup, AsyncHotBackup),
    (inkpen.Transaction, AsyncTransaction),
    (shards.ShardedBookie, AsyncShardedBookie),
    (shards.ShardedSnapshot, AsyncShardedSnapshot),
    (shards.ShardedTransaction, AsyncShardedTransaction),
    (shards.ShardedHotBackup, AsyncShardedHotBackup),
]
TWINS: dict[Any, Any] = {**dict(PAIRS), ReadAPI: AsyncBookie | AsyncReader}
"""A sync handle type a method returns -> the type its async twin returns instead (a shard's own
handle, ``ShardedBookie.shard(i)``, is its Bookie or its Reader)."""
PURE = {"shard_of"}
"""Methods computed from their arguments alone (no I/O, nothing to wait for): plain in both."""
DUNDERS = {"__enter__": "__aenter__", "__exit__": "__aexit__", "__call__": "__call__"}
"""The special methods that are part of a handle's public face, and their async names."""
DEPRECATED_EXTRAS: dict[str, set[str]] = {
    "AsyncBookie.hot_backup": {"dest"},  # the old one-step hot_backup(dest); warns
}
"""Optional parameters an async method (by its qualified name) may have beyond the sync ones,
kept for compatibility."""
OPENER_EXTRAS = {"workers", "fold_chunk"}
"""Keyword-only options of inkpen.aio.open / open_reader that the sync openers do not have."""
ITERATORS = {FoldIterator, collections.abc.Iterator, collections.abc.Iterable}
"""The return types (origins) that make a sync method a fold."""


def public_surface(cls: type) -> tuple[dict[str, Any], dict[str, property]]:
    """The public methods (name -> function) and properties of ``cls``, its bases included."""
    methods: dict[str, Any] = {}
    properties: dict[str, property] = {}
    for name in dir(cls):
        if name.startswith("_") and name not in DUNDERS:
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            properties[name] = member
        elif inspect.isfunction(member):
            methods[name] = member
    return methods, properties


def hints(fn: Any) -> dict[str, Any]:
    return typing.get_type_hints(fn)


def params(fn: Any) -> list[inspect.Parameter]:
    """The parameters of a method, without ``self``."""
    return list(inspect.signature(fn).parameters.values())[1:]


def compare_params(
    where: str,
    sync_fn: Any,
    async_fn: Any,
    extras: set[str],
) -> list[str]:
    """What differs between the two methods' parameters (names, kinds, defaults, types)."""
    problems: list[str] = []
    ours, theirs = params(sync_fn), params(async_fn)
    sync_types, async_types = hints(sync_fn), hints(async_fn)
    for i, p in enumerate(ours):
        if i >= len(theirs):
            problems.append(f"{where}: lacks parameter {p.name!r}")
            continue
        q = theirs[i]
        if (q.name, q.kind, q.default) != (p.name, p.kind, p.default):
            problems.append(
                f"{where}: parameter {i} is {q.name!r} ({q.kind.description}, default "
                f"{q.default!r}); the sync method has {p.name!r} ({p.kind.description}, default "
                f"{p.default!r})"
            )
        elif sync_types.get(p.name) != async_types.get(q.name):
            problems.append(
                f"{where}: parameter {p.name!r} is typed {async_types.get(q.name)!r}, the sync "
                f"one {sync_types.get(p.name)!r}"
            )
    for q in theirs[len(ours) :]:
        if q.name not in extras:
            problems.append(f"{where}: has parameter {q.name!r} the sync method does not have")
        elif q.default is inspect.Parameter.empty:
            problems.append(f"{where}: the extra parameter {q.name!r} must be optional")
    return problems


def matching_overload(sync_fn: Any, async_fn: Any) -> Any:
    """The overload of ``async_fn`` whose parameters are the sync method's (else ``async_fn``)."""
    for candidate in typing.get_overloads(async_fn):
        if [p.name for p in params(candidate)] == [p.name for p in params(sync_fn)]:
            return candidate
    return async_fn


def compare_shape(where: str, sync_fn: Any, async_fn: Any) -> list[str]:
    """Whether the async twin answers what the sync method answers, the async way."""
    returned = hints(sync_fn).get("return")
    typed = matching_overload(sync_fn, async_fn)
    answered = hints(typed).get("return")
    is_coroutine = inspect.iscoroutinefunction(async_fn)
    if sync_fn.__name__ in PURE:
        if is_coroutine or answered != returned:
            return [f"{where}: a pure method, plain in both; want it answering {returned}"]
        return []
    origin = typing.get_origin(returned) or returned
    if origin in ITERATORS:
        # AsyncFold of the sync fold's items, made at run time: a value no static type names
        wanted = typing.cast(Any, AsyncFold)[typing.get_args(returned)]
        if is_coroutine or answered != wanted:
            return [
                f"{where}: the sync method is a fold of {returned}; want a plain method "
                f"answering {wanted}, got {'a coroutine' if is_coroutine else answered}"
            ]
        return []
    twin = TWINS.get(returned, returned)
    if is_coroutine:
        if answered != twin:
            return [f"{where}: answers {answered}, want {twin} (the sync one answers {returned})"]
        return []
    if returned in TWINS and typing.get_args(answered) == (twin,):
        opening = typing.get_origin(answered)
        if hasattr(opening, "__await__") and hasattr(opening, "__aenter__"):
            return []  # awaitable for the handle, and an async context manager releasing it
    return [
        f"{where}: must be a coroutine answering {twin}, is a plain method answering {answered}"
    ]


def parity_problems(sync_cls: type, async_cls: type) -> list[str]:
    """Everything of ``sync_cls``'s public face that ``async_cls`` lacks or has differently."""
    problems: list[str] = []
    methods, properties = public_surface(sync_cls)
    for name, sync_fn in sorted(methods.items()):
        async_name = DUNDERS.get(name, name)
        where = f"{async_cls.__name__}.{async_name}"
        try:
            async_fn = inspect.getattr_static(async_cls, async_name)
        except AttributeError:
            problems.append(f"{where}: missing (the twin of {sync_cls.__name__}.{name})")
            continue
        if not inspect.isfunction(async_fn):
            problems.append(f"{where}: is {type(async_fn).__name__}, not a method")
            continue
        extras = DEPRECATED_EXTRAS.get(async_fn.__qualname__, set())
        problems += compare_params(where, sync_fn, async_fn, extras)
        problems += compare_shape(where, sync_fn, async_fn)
    for name, prop in sorted(properties.items()):
        where = f"{async_cls.__name__}.{name}"
        try:
            twin = inspect.getattr_static(async_cls, name)
        except AttributeError:
            problems.append(
                f"{where}: missing (the twin of the property {sync_cls.__name__}.{name})"
            )
            continue
        if not isinstance(twin, property):
            problems.append(f"{where}: is not a property, as {sync_cls.__name__}.{name} is")
        elif hints(twin.fget).get("return") != hints(prop.fget).get("return"):
            problems.append(f"{where}: typed {hints(twin.fget).get('return')}, not as the sync one")
    return problems


# -- the real handles -------------------------------------------------------------------------


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_method_and_property_has_an_async_twin(
    sync_cls: type, async_cls: type
) -> None:
    assert parity_problems(sync_cls, async_cls) == []


def test_the_derived_surface_holds_what_the_handles_are_known_to_have() -> None:
    """Guards the introspection itself: an empty or partial derivation would pass vacuously."""
    bookie, bookie_props = public_surface(inkpen.Bookie)
    assert {
        "put", "get", "keys", "heads", "changes", "objects", "index_query", "tictac_tree",
        "snapshot", "hot_backup", "mput", "trim_journal", "create_feed_cursor",
        "advance_feed_cursor", "delete_feed_cursor", "feed_cursors", "close", "__enter__",
        "__exit__",
    } <= set(bookie)  # fmt: skip
    assert {"url", "options", "closed"} <= set(bookie_props)
    reader, reader_props = public_surface(inkpen.Reader)
    assert {"refresh", "changes", "close", "get_many"} <= set(reader)
    assert {"last_sqn", "following", "checkpoint_id", "manifest_id"} <= set(reader_props)
    assert "wait" in inspect.signature(inkpen.Reader.changes).parameters
    assert "wait" in inspect.signature(inkpen.Bookie.changes).parameters  # the writer's tail
    assert "__call__" in public_surface(inkpen.HotBackup)[0]
    assert "ledger_only" in public_surface(inkpen.Snapshot)[1]


@pytest.mark.parametrize("name", ["open", "open_reader"])
def test_the_async_openers_take_the_sync_openers_arguments(name: str) -> None:
    sync_fn, async_fn = getattr(inkpen, name), getattr(inkpen.aio, name)
    ours = list(inspect.signature(sync_fn).parameters.values())
    theirs = {p.name: p for p in inspect.signature(async_fn).parameters.values()}
    for p in ours:
        assert p.name in theirs, p.name
        q = theirs[p.name]
        assert (q.kind, q.default) == (p.kind, p.default), p.name
    for q in theirs.values():
        if q.name not in {p.name for p in ours}:
            assert q.name in OPENER_EXTRAS, q.name
            assert q.kind is inspect.Parameter.KEYWORD_ONLY and q.default is not q.empty
    # and the parameters keep the sync order
    order = [n for n in theirs if n in {p.name for p in ours}]
    assert order == [p.name for p in ours]


# -- the check catches what it is for -----------------------------------------------------------


class _GrownBookie(inkpen.Bookie):
    def frobnicate(self, times: int = 1) -> int:
        return times

    @property
    def mood(self) -> str:
        return "fine"


class _DriftedAsyncBookie(AsyncBookie):
    async def checkpoint(self, lifetime: float | None = 60.0, *, name: str | None = None) -> str:
        return "drifted"

    async def flush(self, hard: bool = False) -> None:
        return None

    def stats(self) -> Any:  # not a coroutine
        return None

    async def feed_cursors(self) -> Any:
        return ()

    def keys(  # type: ignore[override]
        self,
        bucket: str | bytes,
        start: str | bytes | None = None,
        end: str | bytes | None = None,
        *,
        reversed: bool = False,
    ) -> AsyncFold[bytes]:
        raise AssertionError("not called")


def test_a_sync_method_or_property_without_an_async_twin_fails() -> None:
    problems = parity_problems(_GrownBookie, AsyncBookie)
    assert problems == [
        "AsyncBookie.frobnicate: missing (the twin of _GrownBookie.frobnicate)",
        "AsyncBookie.mood: missing (the twin of the property _GrownBookie.mood)",
    ]


def test_a_twin_with_other_parameters_or_another_shape_fails() -> None:
    problems = parity_problems(inkpen.Bookie, _DriftedAsyncBookie)
    joined = "\n".join(problems)
    assert "_DriftedAsyncBookie.checkpoint: parameter 0 is 'lifetime'" in joined  # default
    assert "_DriftedAsyncBookie.flush: has parameter 'hard'" in joined
    assert "_DriftedAsyncBookie.stats: must be a coroutine" in joined
    assert "_DriftedAsyncBookie.feed_cursors: answers typing.Any" in joined
    assert "_DriftedAsyncBookie.keys: parameter 3 is 'reversed'" in joined
    assert len(problems) == 5, problems


def test_deprecated_extras_are_allowed_only_where_listed() -> None:
    def sync(self: Any, a: int) -> None: ...

    async def with_extra(self: Any, a: int, old: int = 0) -> None: ...

    assert compare_params("x", sync, with_extra, {"old"}) == []
    assert compare_params("x", sync, with_extra, set()) == [
        "x: has parameter 'old' the sync method does not have"
    ]
