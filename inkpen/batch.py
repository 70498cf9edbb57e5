"""Batch: several puts, deletes and merges that :meth:`inkpen.Bookie.write` applies atomically.

A batch is built in the caller's thread (``batch.put``, ``batch.delete``, ``batch.merge``;
nothing is written yet)
and handed to ``book.write(batch)`` once. The write is all or nothing: every change is checked
before anything is submitted (a bad one raises :class:`~inkpen.UsageError` and nothing is
written), the changes go into one journal segment (the intake never splits a batch across
segments, see :mod:`inkpen.actors.journal.intake`), and the Bookie caches them in one step, so no
reader ever sees part of a batch and after any crash either all of it or none of it is there.
Changes apply in order: a later change to the same key wins.

Conditions (``if_sqn``) are checked by the writer in the same step as the write; one failed
condition rejects the whole batch with :class:`~inkpen.ConflictError`.

Limits: at most :data:`MAX_BATCH_CHANGES` changes and :data:`MAX_BATCH_BYTES` bytes of buckets,
keys and values per batch (``UsageError`` beyond), besides the per-call limits of ``put``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from inkpen.actors.journal.changes import as_bytes, check_if_sqn, check_ttl
from inkpen.formats.keys import MAX_KEY_BYTES

from .errors import UsageError

MAX_BATCH_CHANGES = 10_000
"""The most changes one batch may hold."""

MAX_BATCH_BYTES = 256 * 1024 * 1024
"""The most bytes of buckets, keys and values one batch may hold."""

IndexSpecs = Iterable[tuple[str, str | bytes, str | bytes]]


class _Op(NamedTuple):
    delete: bool
    bucket: bytes
    key: bytes
    value: bytes | None
    indexes: tuple[Any, ...]
    ttl: float | None
    if_sqn: int | None
    operator: str | None = None


class Batch:
    """Puts and deletes applied together by :meth:`inkpen.Bookie.write`, atomically and in
    order. A batch is written at most once; ``len(batch)`` is the number of changes."""

    __slots__ = ("_bytes", "_ops", "_written")

    def __init__(self) -> None:
        self._ops: list[_Op] = []
        self._bytes = 0
        self._written = False

    def put(
        self,
        bucket: str | bytes,
        key: str | bytes,
        value: bytes,
        *,
        indexes: IndexSpecs = (),
        ttl: float | None = None,
        if_sqn: int | None = None,
    ) -> Batch:
        """Add a put (as :meth:`inkpen.Bookie.put`); returns the batch, so calls can chain."""
        b, k = self._names(bucket, key)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise UsageError(f"value must be bytes, got {type(value).__name__}")
        life = None if ttl is None else check_ttl(ttl)
        return self._add(_Op(False, b, k, bytes(value), _specs(indexes), life, _condition(if_sqn)))

    def delete(
        self,
        bucket: str | bytes,
        key: str | bytes,
        *,
        indexes: IndexSpecs = (),
        if_sqn: int | None = None,
    ) -> Batch:
        """Add a delete (as :meth:`inkpen.Bookie.delete`); returns the batch."""
        b, k = self._names(bucket, key)
        return self._add(_Op(True, b, k, None, _specs(indexes), None, _condition(if_sqn)))

    def merge(
        self,
        bucket: str | bytes,
        key: str | bytes,
        operand: bytes,
        *,
        operator: str,
    ) -> Batch:
        """Add a merge (as :meth:`inkpen.Bookie.merge`): ``operand`` folded onto the key's value
        (as the batch's earlier changes leave it) by the merge operator named ``operator``;
        returns the batch."""
        b, k = self._names(bucket, key)
        if not isinstance(operand, bytes | bytearray | memoryview):
            raise UsageError(f"merge operand must be bytes, got {type(operand).__name__}")
        if not isinstance(operator, str):
            raise UsageError(
                f"merge operator must be the name (str) of one of the option merge_operators, "
                f"got {type(operator).__name__}"
            )
        return self._add(_Op(False, b, k, bytes(operand), (), None, None, operator))

    def _names(self, bucket: Any, key: Any) -> tuple[bytes, bytes]:
        self._check_unwritten()
        return as_bytes("bucket", bucket, MAX_KEY_BYTES), as_bytes("key", key, MAX_KEY_BYTES)

    def _add(self, op: _Op) -> Batch:
        if len(self._ops) >= MAX_BATCH_CHANGES:
            raise UsageError(
                f"a batch holds at most {MAX_BATCH_CHANGES} changes; write this one and start "
                "another (each batch is atomic on its own)"
            )
        size = len(op.bucket) + len(op.key) + (0 if op.value is None else len(op.value))
        if self._bytes + size > MAX_BATCH_BYTES:
            raise UsageError(
                f"a batch holds at most {MAX_BATCH_BYTES} bytes of keys and values; write this "
                "one and start another (each batch is atomic on its own)"
            )
        self._bytes += size
        self._ops.append(op)
        return self

    def _check_unwritten(self) -> None:
        if self._written:
            raise UsageError("this batch was already written; build a new Batch for new changes")

    def _pending(self) -> list[_Op]:
        """For ``Bookie.write``: the changes (a written batch raises ``UsageError``)."""
        self._check_unwritten()
        return self._ops

    def _mark_written(self) -> None:
        """For ``Bookie.write``: the batch was handed to the writer; it takes no more."""
        self._check_unwritten()
        self._written = True

    def __len__(self) -> int:
        return len(self._ops)

    def __repr__(self) -> str:
        state = "written" if self._written else "open"
        return f"<inkpen.Batch {len(self._ops)} changes, {state}>"


def _condition(if_sqn: Any) -> int | None:
    return None if if_sqn is None else check_if_sqn(if_sqn)


def _specs(indexes: Any) -> tuple[Any, ...]:
    if indexes is None:
        return ()
    if isinstance(indexes, str | bytes) or not isinstance(indexes, Iterable):
        raise UsageError('indexes must be a sequence of ("add" | "remove", field, term)')
    return tuple(indexes)


__all__ = ["MAX_BATCH_BYTES", "MAX_BATCH_CHANGES", "Batch"]
