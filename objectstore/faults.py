"""Seeded, reproducible failure injection around any object store.

A :class:`FaultPlan` says, per kind of operation, how likely a failure is *before* the real
operation (it never reaches the store: a definite :class:`StoreError`) and *after* it (the
real operation ran and its effect stands, but the caller gets an indefinite
:class:`StoreError`, as after a lost response). It can also delay operations and truncate list
pages (a shorter page whose token still resumes exactly after its last key, as a real store may
return).

A ``delete_many`` is its requests (one per :data:`~inkpen.objectstore.base.DELETE_MANY_KEYS`
keys), each delayed once: the ``delete_many`` kind fails a request as a whole (before: none of
its keys is deleted; after: all are, each reported with an indefinite error), and the ``delete``
kind fails single keys of it (as ``DeleteObjects`` names the keys it could not delete), so a
plan can fail some keys of a batch and not others.

A :class:`FaultyStore` applies a plan to an inner store, drawing every decision from one random
generator seeded by the plan, so a single-threaded run injects the same faults every time.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeVar

from inkpen.errors import StoreError, UsageError

from .base import (
    DEFAULT_PAGE_SIZE,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoreBase,
    batches,
    check_key,
    check_keys,
    check_prefix,
)
from .parallel import concurrency as concurrency_of
from .parallel import run_bounded

OperationKind = Literal[
    "put_if_absent", "put", "get", "get_range", "head", "list", "delete", "delete_many", "copy"
]
OPERATION_KINDS: tuple[OperationKind, ...] = (
    "put_if_absent",
    "put",
    "get",
    "get_range",
    "head",
    "list",
    "delete",
    "delete_many",
    "copy",
)
WRITE_KINDS: tuple[OperationKind, ...] = ("put_if_absent", "put", "delete", "delete_many", "copy")

Phase = Literal["before", "after", "partial_list"]
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Which failures to inject, how often, and from which seed.

    ``before`` and ``after`` map operation kinds (see :data:`OPERATION_KINDS`) to a probability
    in ``[0, 1]``; kinds not named never fail. ``delay`` is a ``(low, high)`` range of seconds
    slept before each operation. ``partial_lists`` is the probability that a list page with two
    or more objects comes back truncated.
    """

    seed: int = 0
    before: Mapping[str, float] = field(default_factory=dict)
    after: Mapping[str, float] = field(default_factory=dict)
    delay: tuple[float, float] | None = None
    partial_lists: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int):
            raise UsageError(f"FaultPlan seed must be an int, got {type(self.seed).__name__}")
        for name in ("before", "after"):
            chances = getattr(self, name)
            if not isinstance(chances, Mapping):
                raise UsageError(f"FaultPlan {name} must map operation kinds to probabilities")
            for kind, chance in chances.items():
                if kind not in OPERATION_KINDS:
                    raise UsageError(
                        f"FaultPlan {name} names unknown operation kind {kind!r}; "
                        f"known: {', '.join(OPERATION_KINDS)}"
                    )
                _check_probability(f"{name}[{kind!r}]", chance)
            object.__setattr__(self, name, MappingProxyType(dict(chances)))
        _check_probability("partial_lists", self.partial_lists)
        if self.delay is not None:
            low, high = self.delay
            if not 0 <= low <= high:
                raise UsageError(
                    f"FaultPlan delay {self.delay!r} must be (low, high), 0 <= low <= high"
                )

    @classmethod
    def everywhere(
        cls,
        seed: int,
        *,
        before: float = 0.0,
        after: float = 0.0,
        kinds: tuple[OperationKind, ...] = OPERATION_KINDS,
        delay: tuple[float, float] | None = None,
        partial_lists: float = 0.0,
    ) -> FaultPlan:
        """The same ``before`` and ``after`` probabilities for every kind in ``kinds``."""
        return cls(
            seed=seed,
            before=dict.fromkeys(kinds, before),
            after=dict.fromkeys(kinds, after),
            delay=delay,
            partial_lists=partial_lists,
        )


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """One fault a :class:`FaultyStore` injected: the operation, its key (or list prefix) and
    when it struck."""

    kind: OperationKind
    key: str
    phase: Phase


class FaultyStore(StoreBase):
    """Wraps a store and injects the failures its :class:`FaultPlan` calls for.

    ``injected`` lists every fault in order; ``enabled`` (or the :meth:`paused` context) turns
    injection off so a test can reopen or check the store cleanly. While disabled, no random
    numbers are drawn, so the faults that follow do not depend on how much ran in between.
    ``concurrency``: the requests worth having in flight on this store at once
    (:mod:`.parallel`; the inner store's by default); a delayed local directory standing in for
    a store far away takes that store's.
    """

    def __init__(
        self, inner: ObjectStore, plan: FaultPlan, *, concurrency: int | None = None
    ) -> None:
        if not isinstance(plan, FaultPlan):
            raise UsageError(f"FaultyStore needs a FaultPlan, got {type(plan).__name__}")
        if concurrency is not None and (
            not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1
        ):
            raise UsageError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self.concurrency = concurrency_of(inner) if concurrency is None else concurrency
        self.inner = inner
        self.plan = plan
        self.enabled = True
        self.injected: list[InjectedFault] = []
        self._rng = random.Random(plan.seed)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.inner.url

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Inject nothing inside the block; restore the previous setting after it."""
        previous = self.enabled
        self.enabled = False
        try:
            yield
        finally:
            self.enabled = previous

    def counts(self) -> Counter[tuple[str, str]]:
        """How many faults were injected, by ``(kind, phase)``."""
        with self._lock:
            return Counter((fault.kind, fault.phase) for fault in self.injected)

    # -- the protocol ------------------------------------------------------------------------

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._run(
            "put_if_absent", key, lambda: self.inner.put_if_absent(key, data, metadata=metadata)
        )

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        self._run("put", key, lambda: self.inner.put(key, data, metadata=metadata))

    def get(self, key: str) -> bytes:
        return self._run("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._run("get_range", key, lambda: self.inner.get_range(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._run("head", key, lambda: self.inner.head(key))

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        page = self._run(
            "list", prefix, lambda: self.inner.list_page(prefix, token=token, limit=limit)
        )
        objects = page.objects
        if not self.enabled or len(objects) < 2 or self.plan.partial_lists <= 0:
            return page
        with self._lock:
            if self._rng.random() >= self.plan.partial_lists:
                return page
            keep = self._rng.randint(1, len(objects) - 1)
            self.injected.append(InjectedFault("list", prefix, "partial_list"))
        return ListPage(objects[:keep], objects[keep - 1].key)

    def delete(self, key: str) -> None:
        self._run("delete", key, lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """The inner store's batched delete, request by request (see the module docstring):
        every decision is drawn first, in key order, so a run injects the same faults whatever
        order the requests then run in, up to :attr:`concurrency` at once."""
        if not self.enabled:
            return self.inner.delete_many(keys)
        requests = [self._draw_batch(batch) for batch in batches(check_keys(keys))]
        return DeleteResult.merge(run_bounded(self._delete_batch, requests, limit=self.concurrency))

    def _draw_batch(self, keys: Sequence[str]) -> _BatchPlan:
        plan = self.plan
        with self._lock:
            rng = self._rng
            before = rng.random() < plan.before.get("delete_many", 0.0)
            after = rng.random() < plan.after.get("delete_many", 0.0)
            pause = rng.uniform(*plan.delay) if plan.delay else 0.0
            refused: list[str] = []
            lost: list[str] = []
            for key in keys:
                if rng.random() < plan.before.get("delete", 0.0):
                    refused.append(key)
                if rng.random() < plan.after.get("delete", 0.0):
                    lost.append(key)
            if before:
                self.injected.append(InjectedFault("delete_many", keys[0], "before"))
            else:
                self.injected.extend(InjectedFault("delete", key, "before") for key in refused)
        return _BatchPlan(tuple(keys), before, after, pause, frozenset(refused), frozenset(lost))

    def _delete_batch(self, batch: _BatchPlan) -> DeleteResult:
        if batch.pause:
            time.sleep(batch.pause)
        if batch.before:
            return DeleteResult(
                dict.fromkeys(
                    batch.keys,
                    StoreError(
                        f"injected failure before a delete_many of {len(batch.keys)} keys on "
                        f"{self.url}",
                        definite=True,
                    ),
                )
            )
        failed: dict[str, StoreError] = {
            key: StoreError(
                f"injected failure before the delete of {key!r} on {self.url}",
                definite=True,
                key=key,
            )
            for key in batch.keys
            if key in batch.refused
        }
        failed.update(
            self.inner.delete_many([k for k in batch.keys if k not in batch.refused]).failed
        )
        lost = [k for k in batch.keys if k not in failed and (batch.after or k in batch.lost)]
        with self._lock:
            if batch.after:
                self.injected.append(InjectedFault("delete_many", batch.keys[0], "after"))
            else:
                self.injected.extend(InjectedFault("delete", key, "after") for key in lost)
        for key in lost:
            failed[key] = StoreError(
                f"injected failure after the delete of {key!r} on {self.url} (it ran)",
                definite=False,
                key=key,
            )
        return DeleteResult(failed)

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        check_key(src_key)
        self._run("copy", dest_key, lambda: self.inner.copy(src_key, dest_key, source=source))

    def close(self) -> None:
        self.inner.close()

    # -- internals ---------------------------------------------------------------------------

    def _run(self, kind: OperationKind, key: str, operation: Callable[[], _T]) -> _T:
        if not self.enabled:
            return operation()
        # Bad input is the caller's error, never an injected store failure.
        if kind == "list":
            check_prefix(key)
        else:
            check_key(key)
        with self._lock:
            fail_before = self._rng.random() < self.plan.before.get(kind, 0.0)
            fail_after = self._rng.random() < self.plan.after.get(kind, 0.0)
            pause = self._rng.uniform(*self.plan.delay) if self.plan.delay else 0.0
            if fail_before:
                self.injected.append(InjectedFault(kind, key, "before"))
        if pause:
            time.sleep(pause)
        if fail_before:
            raise StoreError(
                f"injected failure before {kind} of {key!r} on {self.url}", definite=True, key=key
            )
        result = operation()
        if fail_after:
            with self._lock:
                self.injected.append(InjectedFault(kind, key, "after"))
            raise StoreError(
                f"injected failure after {kind} of {key!r} on {self.url} (the operation ran)",
                definite=False,
                key=key,
            )
        return result


@dataclass(frozen=True, slots=True)
class _BatchPlan:
    """What :meth:`FaultyStore.delete_many` decided for one request: its keys, whether it fails
    as a whole (before, after), its delay, and the keys that fail alone (before, after)."""

    keys: tuple[str, ...]
    before: bool
    after: bool
    pause: float
    refused: frozenset[str]
    lost: frozenset[str]


def _check_probability(name: str, value: object) -> None:
    if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise UsageError(f"FaultPlan {name} must be a probability in [0, 1], got {value!r}")
