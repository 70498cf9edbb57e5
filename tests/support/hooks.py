"""A store that runs a test's callback at one chosen moment of the protocol under test.

:class:`HookedStore` passes every call through to its inner store; ``after_list(prefix, hook)``
runs ``hook`` once, right after the first listing of ``prefix`` returns its first page, so a test
can make another party act exactly between a reader's listing and its next step;
``before_create(prefix, hook)`` runs ``hook`` once, before the next create-if-absent of a key
under ``prefix`` reaches the store (a slow request, or a step of someone else's first);
``before_get(key, hook)`` likewise before the next get of ``key``; ``before_read(prefix, hook)``
runs ``hook(key)`` once, before the next get or ranged get of a key under ``prefix``, and
``before_head(prefix, hook)`` before the next head of one (a writer's commit heads each file it
adds before it takes the manifest lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from inkpen.objectstore import ObjectInfo, ObjectStore
from inkpen.objectstore.base import DEFAULT_PAGE_SIZE, ListPage
from inkpen.objectstore.faults import FaultPlan, FaultyStore


class HookedStore(FaultyStore):
    """Injects no fault; runs each registered hook once, after the listing it waits for."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner, FaultPlan())
        self._lock_hooks = threading.Lock()
        self._after_list: list[tuple[str, Callable[[], None]]] = []
        self._before_create: list[tuple[str, Callable[[], None]]] = []
        self._before_get: list[tuple[str, Callable[[], None]]] = []
        self._before_read: list[tuple[str, Callable[[str], None]]] = []
        self._before_head: list[tuple[str, Callable[[str], None]]] = []
        self.fired: list[str] = []

    def after_list(self, prefix: str, hook: Callable[[], None]) -> None:
        """Run ``hook`` once, after the next listing of ``prefix`` (its first page)."""
        with self._lock_hooks:
            self._after_list.append((prefix, hook))

    def before_create(self, prefix: str, hook: Callable[[], None]) -> None:
        """Run ``hook`` once, before the next ``put_if_absent`` of a key under ``prefix``."""
        with self._lock_hooks:
            self._before_create.append((prefix, hook))

    def before_get(self, key: str, hook: Callable[[], None]) -> None:
        """Run ``hook`` once, before the next ``get`` of ``key``."""
        with self._lock_hooks:
            self._before_get.append((key, hook))

    def before_read(self, prefix: str, hook: Callable[[str], None]) -> None:
        """Run ``hook(key)`` once, before the next ``get`` or ``get_range`` of a key under
        ``prefix``."""
        with self._lock_hooks:
            self._before_read.append((prefix, hook))

    def before_head(self, prefix: str, hook: Callable[[str], None]) -> None:
        """Run ``hook(key)`` once, before the next ``head`` of a key under ``prefix``."""
        with self._lock_hooks:
            self._before_head.append((prefix, hook))

    def _due(self, hooks: list[tuple[str, Callable[[str], None]]], key: str) -> None:
        with self._lock_hooks:
            due = [h for h in hooks if key.startswith(h[0])]
            hooks[:] = [h for h in hooks if h not in due]
        for prefix, hook in due:
            self.fired.append(prefix)
            hook(key)

    def _reading(self, key: str) -> None:
        self._due(self._before_read, key)

    def head(self, key: str) -> ObjectInfo:
        self._due(self._before_head, key)
        return super().head(key)

    def get(self, key: str) -> bytes:
        with self._lock_hooks:
            due = [h for h in self._before_get if h[0] == key]
            self._before_get = [h for h in self._before_get if h[0] != key]
        for name, hook in due:
            self.fired.append(name)
            hook()
        self._reading(key)
        return super().get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._reading(key)
        return super().get_range(key, start, end)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        with self._lock_hooks:
            due = [h for h in self._before_create if key.startswith(h[0])]
            self._before_create = [h for h in self._before_create if h not in due]
        for prefix, hook in due:
            self.fired.append(prefix)
            hook()
        super().put_if_absent(key, data, metadata=metadata)

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        page = super().list_page(prefix, token=token, limit=limit)
        # The first page asked for once a hook is set, whatever token it starts after (a
        # listing of segments starts after the last rolled one).
        with self._lock_hooks:
            due = [h for h in self._after_list if h[0] == prefix]
            self._after_list = [h for h in self._after_list if h[0] != prefix]
        for _, hook in due:
            self.fired.append(prefix)
            hook()
        return page
