"""Turning calls into changes: validation, journal entries and the ledger entries they imply.

A put or delete is checked and encoded in the caller's thread (so a rejected call touches nothing
and costs no actor message; a large value's journal record is encoded there too, but for its SQN:
:func:`~inkpen.formats.journal.prepare_record`), becomes a :class:`PendingChange` waiting in the
Inker's intake, a :class:`~inkpen.formats.journal.JournalEntry` once the Inker gives it an SQN,
and finally the ledger entries the Bookie caches: the object's key with its metadata, plus one
entry per index spec and its REVERSE twin. (Before a delete or a put with a ttl is written, the
Inker adds the specs it implies for the object's other index entries:
:mod:`inkpen.actors.write.conditions`.) :func:`ledger_entries` is the single place that last step
is defined; start-up replay and the rebuild of a ledger from a backup use it too, so the ledger
rebuilt from the journal is exactly the ledger built by live writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from inkpen.checks import MAX_SQN, check_seconds
from inkpen.errors import UsageError
from inkpen.formats.journal import PREPARE_FROM, JournalEntry, Kind, PreparedRecord, prepare_record
from inkpen.formats.keys import (
    ACTIVE,
    TOMBSTONE,
    LedgerValue,
    Tag,
    content_hash,
    decode_key,
    index_key,
    object_key,
    reverse_key,
)
from inkpen.options import Options

MAX_TTL = 100 * 365 * 86400.0
"""The longest ttl accepted (a century, in seconds): expiry times must fit the journal's u64."""

MAX_HEAD_VALUE_BYTES = 64 * 1024
"""Largest value of a head-only object: it is stored in the ledger with the key's metadata."""

_HEAD_TAG = Tag.HEAD.value
_OBJECT_TAG = Tag.OBJECT.value

INDEX_ADD = 1
INDEX_REMOVE = 0
_OPS = {"add": INDEX_ADD, "remove": INDEX_REMOVE}

IndexSpec = tuple[int, bytes, bytes]


class PendingChange(NamedTuple):
    """One validated put or delete, waiting for its SQN."""

    kind: Kind
    bucket: bytes
    key: bytes
    ledger_key: bytes
    value: bytes | None
    index_specs: tuple[IndexSpec, ...]
    expiry_ms: int | None
    last_modified_ms: int
    content_hash: int
    weight: int
    """Bytes this change adds to a journal batch (for the batch-size limit)."""
    if_sqn: int | None
    """The condition of a conditional write: the key's current SQN must be this (0: absent)."""
    operator: str | None = None
    """A merge: the name of the merge operator that folds ``value`` (the operand) onto the
    key's current value. The Inker folds it just before the change gets its SQN
    (:mod:`inkpen.actors.write.conditions`), so the journal entry holds the folded value."""
    prepared: PreparedRecord | None = None
    """A put of a large value (:data:`~inkpen.formats.journal.PREPARE_FROM`): its journal
    record encoded but for the SQN, in the caller's thread, so that the Inker does not
    compress, checksum or copy the value on its one thread."""

    def entry(self, sqn: int) -> JournalEntry:
        """The journal entry of this change at ``sqn``."""
        return _new_tuple(
            JournalEntry,
            (
                sqn,
                self.kind,
                self.ledger_key,
                self.value,
                self.index_specs,
                self.expiry_ms,
                self.last_modified_ms,
            ),
        )


def reaches_other_entries(change: PendingChange) -> bool:
    """Whether ``change`` also changes index entries it does not name: a delete of an object
    removes them all, a put with a ttl shortens their life to its own. The Inker adds the specs
    for them just before it writes the change (:mod:`inkpen.actors.write.conditions`)."""
    return (change.kind != Kind.OBJECT or change.expiry_ms is not None) and (
        change.ledger_key[0] == _OBJECT_TAG
    )


_new_tuple = tuple.__new__
"""Builds a NamedTuple from a tuple of its fields without a Python-level ``__new__`` call."""


def as_bytes(name: str, value: Any, limit: int, *, allow_empty: bool = False) -> bytes:
    """A bucket, key, field or term as bytes (str is UTF-8), within ``limit`` bytes."""
    if isinstance(value, str):
        try:
            encoded = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UsageError(
                f"{name} is not valid Unicode text (a lone surrogate at {exc.start}); pass "
                "bytes for binary names"
            ) from None
    elif isinstance(value, bytes):
        encoded = value
    elif isinstance(value, bytearray | memoryview):
        encoded = bytes(value)
    else:
        raise UsageError(f"{name} must be str or bytes, got {type(value).__name__}")
    if not encoded and not allow_empty:
        raise UsageError(f"{name} must not be empty")
    if len(encoded) > limit:
        raise UsageError(f"{name} is {len(encoded)} bytes; the limit is {limit} bytes")
    return encoded


def check_ttl(ttl: Any) -> float:
    """A put's ``ttl``: a positive number of seconds up to ``MAX_TTL``."""
    return check_seconds("ttl", ttl, above_minimum=True, maximum=MAX_TTL)


def check_if_sqn(if_sqn: Any) -> int:
    """A conditional write's ``if_sqn``: an int from 0 (the key is absent) to the largest SQN."""
    if isinstance(if_sqn, bool) or not isinstance(if_sqn, int) or not 0 <= if_sqn <= MAX_SQN:
        raise UsageError(
            "if_sqn must be None, 0 (only if the key is absent) or the key's current SQN as "
            f"head().sqn shows it (a non-negative int), got {if_sqn!r}"
        )
    return if_sqn


class ChangeMaker:
    """Validates calls against the Bookie's options and builds :class:`PendingChange` values."""

    __slots__ = ("_clock", "_options")

    def __init__(self, options: Options) -> None:
        self._options = options
        self._clock = options.clock

    def put(
        self,
        bucket: Any,
        key: Any,
        value: Any,
        indexes: Iterable[Any],
        ttl: float | None,
        *,
        tag: Tag = Tag.OBJECT,
        if_sqn: Any = None,
    ) -> PendingChange:
        options = self._options
        limit = options.max_key_bytes
        b = bucket if type(bucket) is bytes and 0 < len(bucket) <= limit else None
        if b is None:
            b = as_bytes("bucket", bucket, limit)
        k = key if type(key) is bytes and 0 < len(key) <= limit else None
        if k is None:
            k = as_bytes("key", key, limit)
        if not isinstance(value, bytes):
            if isinstance(value, bytearray | memoryview):
                value = bytes(value)
            else:
                raise UsageError(f"value must be bytes, got {type(value).__name__}")
        if len(value) > options.max_value_bytes:
            raise UsageError(
                f"value is {len(value)} bytes; the limit is {options.max_value_bytes} bytes "
                "(option max_value_bytes)"
            )
        specs = () if type(indexes) is tuple and not indexes else self._index_specs(indexes)
        now_ms = int(self._clock() * 1000)
        expiry_ms = None
        if ttl is not None:
            expiry_ms = now_ms + int(check_ttl(ttl) * 1000)
        lk = object_key(b, k, tag=tag)
        weight = len(lk) + len(value) + 64
        if specs:
            weight += sum(len(f) + len(t) for _, f, t in specs)
        condition = None if if_sqn is None else check_if_sqn(if_sqn)
        return _new_tuple(
            PendingChange,
            (
                Kind.OBJECT,
                b,
                k,
                lk,
                value,
                specs,
                expiry_ms,
                now_ms,
                content_hash(value),
                weight,
                condition,
                None,
                prepare_record(lk, value, specs, expiry_ms, now_ms)
                if len(value) >= PREPARE_FROM
                else None,
            ),
        )

    def merge(self, bucket: Any, key: Any, operand: Any, operator: Any) -> PendingChange:
        """A merge of ``operand`` onto (bucket, key) by the merge operator named ``operator``
        (one of the option ``merge_operators``; an unknown name is a ``UsageError``)."""
        options = self._options
        if not isinstance(operator, str) or operator not in options.merge_operators:
            known = ", ".join(repr(name) for name in sorted(options.merge_operators))
            raise UsageError(
                f"merge operator {operator!r} is not known to this Bookie "
                f"(known: {known or 'none'}); open the database with "
                f"inkpen.open(url, merge_operators={{{operator!r}: fn}})"
            )
        b = as_bytes("bucket", bucket, options.max_key_bytes)
        k = as_bytes("key", key, options.max_key_bytes)
        if isinstance(operand, bytearray | memoryview):
            operand = bytes(operand)
        if not isinstance(operand, bytes):
            raise UsageError(f"merge operand must be bytes, got {type(operand).__name__}")
        if len(operand) > options.max_value_bytes:
            raise UsageError(
                f"merge operand is {len(operand)} bytes; the limit is {options.max_value_bytes} "
                "bytes (option max_value_bytes)"
            )
        lk = object_key(b, k)
        now_ms = int(self._clock() * 1000)
        return PendingChange(
            Kind.OBJECT,
            b,
            k,
            lk,
            operand,
            (),
            None,
            now_ms,
            0,
            len(lk) + len(operand) + 64,
            None,
            operator,
        )

    def delete(
        self,
        bucket: Any,
        key: Any,
        indexes: Iterable[Any],
        *,
        tag: Tag = Tag.OBJECT,
        if_sqn: Any = None,
    ) -> PendingChange:
        options = self._options
        b = as_bytes("bucket", bucket, options.max_key_bytes)
        k = as_bytes("key", key, options.max_key_bytes)
        specs = self._index_specs(indexes)
        if any(op == INDEX_ADD for op, _, _ in specs):
            raise UsageError(
                "a delete removes every index entry of its object by itself; it takes "
                '("remove", field, term) specs or none, never "add": drop the add specs'
            )
        now_ms = int(self._clock() * 1000)
        lk = object_key(b, k, tag=tag)
        weight = len(lk) + 64 + sum(len(f) + len(t) for _, f, t in specs)
        condition = None if if_sqn is None else check_if_sqn(if_sqn)
        return PendingChange(
            Kind.TOMBSTONE, b, k, lk, None, specs, None, now_ms, 0, weight, condition
        )

    def head_only(self, spec: Any) -> PendingChange:
        """One ``("add" | "remove", bucket, key, subkey, value)`` spec of ``Bookie.mput``: a put
        or a delete of a head-only object (HEAD tag), whose value the ledger keeps."""
        if not isinstance(spec, Sequence) or isinstance(spec, str | bytes) or len(spec) != 5:
            raise UsageError(
                f'mput spec {spec!r} must be a 5-tuple ("add" | "remove", bucket, key, subkey, '
                "value)"
            )
        op, bucket, key, subkey, value = spec
        if not isinstance(op, str) or op not in _OPS:
            raise UsageError(f'mput spec operation {op!r} must be "add" or "remove"')
        limit = self._options.max_key_bytes
        b = as_bytes("bucket", bucket, limit)
        k = as_bytes("key", key, limit)
        sk = as_bytes("subkey", subkey, limit, allow_empty=True)
        lk = object_key(b, k, sk, tag=Tag.HEAD)
        now_ms = int(self._clock() * 1000)
        if op == "remove":
            return PendingChange(
                Kind.TOMBSTONE, b, k, lk, None, (), None, now_ms, 0, len(lk) + 64, None
            )
        if isinstance(value, bytearray | memoryview):
            value = bytes(value)
        if not isinstance(value, bytes):
            raise UsageError(f"mput value must be bytes, got {type(value).__name__}")
        if len(value) > MAX_HEAD_VALUE_BYTES:
            raise UsageError(
                f"mput value is {len(value)} bytes; a head-only value (kept in the ledger) is at "
                f"most {MAX_HEAD_VALUE_BYTES} bytes"
            )
        weight = len(lk) + len(value) + 64
        return PendingChange(
            Kind.OBJECT, b, k, lk, value, (), None, now_ms, content_hash(value), weight, None
        )

    def _index_specs(self, indexes: Iterable[Any]) -> tuple[IndexSpec, ...]:
        if indexes is None:
            return ()
        if isinstance(indexes, str | bytes) or not isinstance(indexes, Iterable):
            raise UsageError('indexes must be a sequence of ("add" | "remove", field, term)')
        specs: list[IndexSpec] = []
        limit = self._options.max_key_bytes
        for spec in indexes:
            if not isinstance(spec, Sequence) or isinstance(spec, str | bytes) or len(spec) != 3:
                raise UsageError(
                    f'index spec {spec!r} must be a 3-tuple ("add" | "remove", field, term)'
                )
            op, field, term = spec
            if not isinstance(op, str) or op not in _OPS:
                raise UsageError(f'index spec operation {op!r} must be "add" or "remove"')
            specs.append(
                (
                    _OPS[op],
                    as_bytes("index field", field, limit),
                    as_bytes("index term", term, limit, allow_empty=True),
                )
            )
        if len(specs) > self._options.max_indexes:
            raise UsageError(
                f"{len(specs)} index specs; the limit is {self._options.max_indexes} "
                "(option max_indexes)"
            )
        return tuple(specs)


def value_in_ledger(entry: JournalEntry, inline_limit: int) -> bool:
    """Whether the ledger entry :func:`ledger_entries` makes of ``entry`` (under option
    ``inline_value_bytes`` = ``inline_limit``) holds the value itself: a put of a head-only
    object, or of a value of at most ``inline_limit`` bytes (0: none)."""
    if entry[1] != Kind.OBJECT:
        return False
    if entry[2][0] == _HEAD_TAG:
        return True
    value = entry[3]
    return bool(inline_limit) and len(value if value is not None else b"") <= inline_limit


def ledger_entries(
    entry: JournalEntry,
    bucket: bytes,
    key: bytes,
    hash_: int | None = None,
    *,
    inline_limit: int = 0,
) -> list[tuple[bytes, LedgerValue]]:
    """The ledger entries one journal entry implies, object entry first.

    An OBJECT entry gives the object's metadata (``hash_`` may be passed when already known),
    and a seventh field, the value itself, for a head-only object (HEAD tag; see
    ``head_value``) and for an object whose value is at most ``inline_limit`` bytes (option
    ``inline_value_bytes``, 0 inlines none: a GET then reads the ledger alone); a TOMBSTONE
    gives a tombstone; a KEY_CHANGES entry (a value replaced, kept by ``retain`` compaction)
    gives no object entry. Every index spec gives an index entry with the same SQN,
    and its REVERSE twin (:func:`~inkpen.formats.keys.reverse_key`) with the same value.
    """
    sqn, kind = entry[0], entry[1]
    lm = entry[6]
    out: list[tuple[bytes, LedgerValue]] = []
    if kind == Kind.OBJECT:
        value = entry[3] if entry[3] is not None else b""
        digest = hash_ if hash_ is not None else content_hash(value)
        if value_in_ledger(entry, inline_limit):
            # a head-only object, or a value small enough: the ledger keeps the value too
            fields: tuple[Any, ...] = (sqn, ACTIVE, entry[5], digest, len(value), lm, value)
        else:
            fields = (sqn, ACTIVE, entry[5], digest, len(value), lm)
        out.append((entry[2], _new_tuple(LedgerValue, fields)))
    elif kind == Kind.TOMBSTONE:
        out.append((entry[2], _new_tuple(LedgerValue, (sqn, TOMBSTONE, None, 0, 0, lm))))
    elif kind == Kind.VALUE_IN_LEDGER:
        raise ValueError(f"SQN {sqn}: a put whose value the ledger holds makes no ledger entries")
    for op, field, term in entry.index_specs:
        status = ACTIVE if op == INDEX_ADD else TOMBSTONE
        expiry = entry.expiry_ms if status == ACTIVE else None
        meta: LedgerValue = _new_tuple(LedgerValue, (sqn, status, expiry, 0, 0, lm))
        out.append((index_key(bucket, field, term, key), meta))
        out.append((reverse_key(bucket, key, field, term), meta))
    return out


def replayed_entries(
    entry: JournalEntry, *, inline_limit: int = 0
) -> list[tuple[bytes, LedgerValue]]:
    """:func:`ledger_entries` for an entry read back from the journal (its key decoded)."""
    decoded = decode_key(entry.ledger_key)
    return ledger_entries(entry, decoded.bucket, decoded.key, inline_limit=inline_limit)
