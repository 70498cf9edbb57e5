"""Every public entry point that takes a number, a name or a duration, found from its signature,
fed extreme values: it refuses with UsageError and changes nothing, or it succeeds.

The entry points are not listed here: they are read from ``inkpen.__all__``, ``inkpen.aio``,
``inkpen.operations`` and the manifest layer's feed cursor and checkpoint modules, so a new
function or method is fuzzed as soon as it is public. A parameter is fuzzed when its annotation
names ``int``, ``float`` or ``str``, except locations (store URLs, fuzzed by the URL tests).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import types
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

import inkpen
import inkpen.aio
import inkpen.aio.shards
import inkpen.operations
import inkpen.shards
from inkpen.aio.shards import AsyncShardedBookie, AsyncShardedSnapshot, AsyncShardedTransaction
from inkpen.errors import NotFoundError, UsageError
from inkpen.manifest import checkpoints as manifest_checkpoints
from inkpen.manifest import feed_cursors as manifest_feed_cursors
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.objectstore.memory import drop_space
from inkpen.read_api import FoldIterator

NUMBERS: list[Any] = [
    2**64,
    2**63,
    -1,
    10**23,
    1e30,
    -1e30,
    math.nan,
    math.inf,
    -math.inf,
    True,
    "",
    "1",
    [1],
]
NAMES: list[Any] = [
    "",
    "x" * (1 << 17),
    "\x00",
    "\x01\x7f",
    "a\ud800b",
    7,
    2**64,
    1.5,
    b"\xff" * 70_000,
    ["k"],
]


def _append(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return (existing or b"") + b"".join(operands)


OPERATORS = {"append": _append}
"""The merge operators the fuzzed handles are opened with."""

LOCATIONS = {"url", "dest", "destination", "backup", "parent", "clone", "manifests", "store"}
"""Parameters naming a store: given a valid one, never fuzzed here (see test_engine_bad_input)."""

MODULES: list[types.ModuleType] = [
    inkpen,
    inkpen.aio,
    inkpen.aio.shards,
    inkpen.operations,
    inkpen.shards,
    manifest_feed_cursors,
    manifest_checkpoints,
]

SKIPPED_CLASSES = {
    "TicTacTree": "an in-memory value built and compared by the caller; it writes nothing",
    "Options": "every field is fuzzed by test_fuzzed_bad_options_are_usage_errors",
    "FeedCursor": "a record read from a manifest; its one method only compares times",
    "DataSetCheckpoint": "a record read from the shards' manifests; its one method only "
    "compares times",
    "HotBackup": "its only argument is a location (see test_copy_onto_itself)",
    "CheckpointLease": "made by Readers and copies around a checkpoint they created; its "
    "lifetime comes from create_checkpoint / ensure_checkpoint, fuzzed here",
    "ObjectStore": "the store seam: every store's checks of keys, ranges and pages are tested "
    "against memory, a local directory and SeaweedFS in test_objectstore",
    "Levels": "a pure value handed to merge policies; it answers LevelError for a broken "
    "structure (test_ledger_levels) and writes nothing",
    "MergeJob": "a frozen description a merge policy answers; it writes nothing",
    "MergePolicy": "a protocol: its one method is the application's own",
    "FeedHistory": "a protocol the writer's and the store's histories answer; the SQNs it is "
    "asked about come from create_feed_cursor / advance_feed_cursor, fuzzed here",
    "LeveledMergePolicy": "a pure chooser over Levels, tested in test_merge_policy; its sizes "
    "come from options fuzzed by test_fuzzed_bad_options_are_usage_errors",
}
"""Public classes with methods taking numbers or names that are not fuzzed here, and why."""


def _kind(parameter: inspect.Parameter) -> str | None:
    if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        return None
    if parameter.name in LOCATIONS or parameter.name == "self":
        return None
    annotation = str(parameter.annotation)
    if "int" in annotation or "float" in annotation:
        return "number"
    if "str" in annotation:
        return "name"
    return None


def _fuzzable(function: Callable[..., Any]) -> list[tuple[str, str]]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    return [(p.name, kind) for p in parameters if (kind := _kind(p)) is not None]


def _entry_points() -> dict[str, tuple[str | None, Callable[..., Any]]]:
    """``id -> (class name or None, function)`` for every public callable with a fuzzable
    parameter."""
    found: dict[str, tuple[str | None, Callable[..., Any]]] = {}
    for module in MODULES:
        names = getattr(module, "__all__", None) or [
            n for n, v in vars(module).items() if getattr(v, "__module__", None) == module.__name__
        ]
        for name in names:
            if name.startswith("_"):
                continue
            value = getattr(module, name)
            if inspect.isfunction(value) and _fuzzable(value):
                found[f"{value.__module__}.{name}"] = (None, value)
            elif inspect.isclass(value) and value.__name__ not in SKIPPED_CLASSES:
                for method_name, method in inspect.getmembers(value, inspect.isfunction):
                    if method_name.startswith("_") or not _fuzzable(method):
                        continue
                    found[f"{value.__module__}.{value.__name__}.{method_name}"] = (
                        value.__name__,
                        method,
                    )
    return found


ENTRY_POINTS = _entry_points()


@dataclass
class World:
    url: str
    async_url: str
    other_url: str
    shards_url: str
    async_shards_url: str
    book: inkpen.Bookie
    sharded: inkpen.shards.ShardedBookie
    runner: asyncio.Runner
    async_book: inkpen.aio.AsyncBookie
    async_sharded: AsyncShardedBookie
    closers: list[Callable[[], object]]
    checkpoint_id: str

    def url_of(self, owner: str | None) -> str:
        """The store a call on an instance of ``owner`` may change."""
        if owner is None:
            return self.url
        if owner.startswith("AsyncSharded"):
            return self.async_shards_url
        if owner.startswith("Sharded"):
            return self.shards_url
        return self.async_url if owner.startswith("Async") else self.url

    def _latest_manifest(self) -> Any:
        with open_store(self.url) as store:
            latest = ManifestStore(store).latest()
        assert latest is not None
        return latest.manifest

    def instance(self, owner: str) -> Any:
        makers: dict[str, Callable[[], Any]] = {
            "Bookie": lambda: self.book,
            "ShardedBookie": lambda: self.sharded,
            "Reader": lambda: self._closing(inkpen.open_reader(self.url)),
            "Snapshot": lambda: self._closing(self.book.snapshot()),
            "Batch": inkpen.Batch,
            "Histogram": lambda: self.book.metrics().get_seconds,
            "AsyncBookie": lambda: self.async_book,
            "AsyncReader": lambda: self._async_closing(inkpen.aio.open_reader(self.url)),
            "AsyncSnapshot": lambda: self._async_closing(self.async_book.snapshot()),
            "Transaction": lambda: self._closing(self.book.transaction("serializable")),
            "AsyncTransaction": lambda: self._async_closing(self.async_book.transaction()),
            "ShardedSnapshot": lambda: self._closing(self.sharded.snapshot()),
            "ShardedTransaction": lambda: self._closing(self.sharded.transaction("serializable")),
            "AsyncShardedBookie": lambda: self.async_sharded,
            "AsyncShardedSnapshot": lambda: self._async_closing(self.async_sharded.snapshot()),
            "AsyncShardedTransaction": lambda: self._async_closing(
                self.async_sharded.transaction()
            ),
        }
        if owner not in makers:
            pytest.fail(
                f"the public class {owner} has methods taking numbers or names: give the fuzz "
                "an instance of it (World.instance) or skip it with a reason (SKIPPED_CLASSES)"
            )
        return makers[owner]()

    def _closing(self, handle: Any) -> Any:
        self.closers.append(handle.close)
        return handle

    def _async_closing(self, opening: Any) -> Any:
        async def made() -> Any:
            return await opening

        handle = self.runner.run(made())
        self.closers.append(lambda: self.runner.run(handle.close()))
        return handle

    def valid(self, name: str) -> Any:
        values = {
            "url": self.url,
            "dest": self.other_url,
            "backup": self.url,
            "manifests": ManifestStore(open_store(self.url)),
            "manifest_store": ManifestStore(open_store(self.url)),
            "manifest": self._latest_manifest(),
            "bucket": "b",
            "key": "k",
            "keys": ["k"],
            "pairs": [(b"b", b"k")],
            "value": b"v",
            "field": "f",
            "start": "a",
            "end": "z",
            "name": "cursor",
            "sqn": 1,
            "specs": [],
            "batch": inkpen.Batch(),
            "checkpoint": None,
            "checkpoint_id": self.checkpoint_id,
            "lifetime": 60.0,
            "shard": 0,
            "index": 0,
            "shards": 2,
            "fn": lambda: None,
            "operand": b"1",
            "operator": "append",
        }
        if name not in values:
            pytest.fail(
                f"no valid value for the required parameter {name!r}: add one to World.valid"
            )
        return values[name]


def _state(url: str) -> tuple[object, ...]:
    with open_store(url) as store:
        listing = sorted((info.key, info.size) for info in store.list())
        latest = ManifestStore(store).latest()
    return (listing, None if latest is None else (latest.id, latest.manifest))


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    spaces = [f"fuzz-{uuid.uuid4().hex[:8]}" for _ in range(5)]
    url, async_url, other_url, shards_url, async_shards_url = (
        f"memory://{space}" for space in spaces
    )
    inkpen.shards.create(shards_url, shards=2)
    inkpen.shards.create(async_shards_url, shards=2)
    with (
        inkpen.open(url, merge_operators=OPERATORS) as book,
        asyncio.Runner() as runner,
        inkpen.shards.open(shards_url) as sharded,
    ):
        book.put("b", "k", b"v")
        sharded.put("b", "k", b"v")
        book.create_feed_cursor("cursor", 1)

        async def opened() -> inkpen.aio.AsyncBookie:
            return await inkpen.aio.open(async_url, merge_operators=OPERATORS)

        async def opened_sharded() -> AsyncShardedBookie:
            sharded = await inkpen.aio.shards.open(async_shards_url)
            await sharded.put("b", "k", b"v")
            return sharded

        async_book = runner.run(opened())
        async_sharded = runner.run(opened_sharded())
        pinned = book.checkpoint(None, name="fuzz")
        made = World(
            url,
            async_url,
            other_url,
            shards_url,
            async_shards_url,
            book,
            sharded,
            runner,
            async_book,
            async_sharded,
            [],
            pinned,
        )
        try:
            yield made
        finally:
            for close in made.closers:
                close()
            runner.run(async_book.close())
            runner.run(async_sharded.close())
    for space in spaces:
        drop_space(space)


async def _drain(fold: Any) -> None:
    async for _ in fold:
        pass


def _settle(world: World, result: Any) -> None:
    """Run what the call started (a coroutine, a fold) to its end and close what it opened."""
    if inspect.isawaitable(result):

        async def awaited() -> Any:
            return await result

        result = world.runner.run(awaited())
    if isinstance(result, inkpen.aio.AsyncFold):
        world.runner.run(_drain(result))
    elif isinstance(result, FoldIterator):
        list(result)
    if isinstance(
        result,
        inkpen.aio.AsyncSnapshot
        | inkpen.aio.AsyncReader
        | inkpen.aio.AsyncTransaction
        | AsyncShardedSnapshot
        | AsyncShardedTransaction
        | inkpen.aio.shards.AsyncShardedHotBackup,
    ):
        world.runner.run(result.close())
    elif result is not world.book and isinstance(
        result,
        inkpen.Reader
        | inkpen.Snapshot
        | inkpen.Compactor
        | inkpen.Bookie
        | inkpen.Transaction
        | inkpen.shards.ShardedSnapshot
        | inkpen.shards.ShardedTransaction
        | inkpen.shards.ShardedHotBackup,
    ):
        result.close()


def test_the_fuzz_finds_the_entry_points() -> None:
    for expected in (
        "inkpen.bookie.Bookie.create_feed_cursor",
        "inkpen.bookie.Bookie.checkpoint",
        "inkpen.bookie.Bookie.get",
        "inkpen.reader.Reader.changes",
        "inkpen.aio.AsyncBookie.put",
        "inkpen.reader.open_reader",
        "inkpen.manifest.feed_cursors.advance_feed_cursor",
        "inkpen.operations.backup",
        "inkpen._shard_layout.shard_of",
        "inkpen._shard_handle.ShardedBookie.put",
        "inkpen._shard_handle.ShardedBookie.create_feed_cursor",
        "inkpen._shard_parts.ShardedTransaction.put",
        "inkpen.aio.shards.AsyncShardedBookie.put",
        "inkpen.shards.open_reader",
        "inkpen.bookie.Bookie.transaction",
        "inkpen.transaction.Transaction.put",
        "inkpen.transaction.Transaction.index_query",
        "inkpen.transaction.retrying",
        "inkpen.aio.AsyncTransaction.get_many",
    ):
        assert expected in ENTRY_POINTS, sorted(ENTRY_POINTS)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_extreme_values_are_refused_or_accepted_and_refusals_change_nothing(
    world: World, entry: str
) -> None:
    owner, function = ENTRY_POINTS[entry]
    signature = inspect.signature(function)
    target = world.instance(owner) if owner is not None else None
    url = world.url_of(owner)
    for fuzzed, kind in _fuzzable(function):
        for value in NUMBERS if kind == "number" else NAMES:
            args: list[Any] = [] if target is None else [target]
            kwargs: dict[str, Any] = {}
            for parameter in signature.parameters.values():
                if parameter.name == "self" or parameter.kind in (
                    parameter.VAR_POSITIONAL,
                    parameter.VAR_KEYWORD,
                ):
                    continue
                if parameter.name == fuzzed:
                    given = value
                elif parameter.default is parameter.empty:
                    given = world.valid(parameter.name)
                else:
                    continue
                if parameter.kind is parameter.KEYWORD_ONLY:
                    kwargs[parameter.name] = given
                else:
                    args.append(given)
            before = _state(url)
            try:
                _settle(world, function(*args, **kwargs))
            except UsageError:
                assert _state(url) == before, f"{entry}({fuzzed}={value!r:.40}) changed the store"
            except NotFoundError:
                pass  # a well-formed name that names nothing (a checkpoint, a cursor)
            except Exception as exc:
                pytest.fail(
                    f"{entry}({fuzzed}={value!r:.40}) raised {type(exc).__name__}: {exc}"[:400]
                )
