"""A store that refuses chosen deletes: :class:`RefusingDeletes`.

It counts requests as :class:`CountingStore` does and passes every call on, except that a
``delete_many`` refuses the keys under ``refuse_prefix`` (a definite error for each: nothing of
them is deleted) while the other keys of the same batch go. Each refusal is counted by key and
the keys of every batch are recorded. ``gate`` (set by default) holds a batch at the door while
it is clear; ``entered`` is set once a batch has reached it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from inkpen.errors import StoreError
from inkpen.objectstore import CountingStore, ObjectStore
from inkpen.objectstore.base import DeleteResult


class RefusingDeletes(CountingStore):
    """See the module docstring."""

    def __init__(self, inner: ObjectStore, refuse_prefix: str | None = None) -> None:
        super().__init__(inner)
        self.refuse_prefix = refuse_prefix
        self.refusals: Counter[str] = Counter()
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self._record = threading.Lock()

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        wanted = list(keys)
        self.entered.set()
        self.gate.wait()
        prefix = self.refuse_prefix
        refused = [k for k in wanted if prefix is not None and k.startswith(prefix)]
        with self._record:
            self.batches.append(wanted)
            self.refusals.update(refused)
        result = super().delete_many([k for k in wanted if k not in refused])
        failed = dict(result.failed)
        for key in refused:
            failed[key] = StoreError(f"the test refuses to delete {key}", definite=True, key=key)
        return DeleteResult(failed)
