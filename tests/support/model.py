"""A reference model of an inkpen database: what every read and fold must answer.

The model knows only the public semantics, the way Leveled defines them:

- an object is its latest put, gone after a delete or once its expiry has passed;
- index entries are the application's own: a put's ``("add", field, term)`` specs create entries
  that expire with the put, ``("remove", field, term)`` specs remove them; within one call the
  last spec for a (field, term) wins; a later put of the key that does not mention an entry
  keeps it. Entries follow their object: a delete removes every entry of its object, named or
  not; a put with a ttl shortens every entry of its object that would outlive it to its own
  expiry (so entries never outlive an expiring object); an index query never answers a key
  whose object is deleted or expired, and a key put again after a delete or its expiry answers
  only for the terms it has been given since;
- a conditional write (``if_sqn``) lands only if the key's SQN is ``if_sqn`` (0: absent);
  a batch is its changes applied in order, each with the next SQN, or none of them;
- folds list buckets, keys and index terms in byte order of their components; ``order="sqn"``
  lists objects in the order they were written.

A :class:`Model` is a value the state machines copy cheaply (a snapshot is a frozen copy).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from inkpen.formats.keys import content_hash

IndexSpec = tuple[str, str, str]
ObjectId = tuple[bytes, bytes]
IndexId = tuple[bytes, bytes, bytes, bytes]
"""(bucket, field, term, object key)."""


class Removed:
    """The mark of a remove spec in :attr:`Model.journaled`."""

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED = Removed()
Journaled = list[tuple[IndexId, "int | Removed | None"]]
"""The index specs of one journal entry, as :attr:`Model.journaled` lists them."""


def encode(text: str | bytes) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else text


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One live (or expiring) object as the model remembers it."""

    value: bytes
    expiry_ms: int | None
    written_ms: int
    sqn: int
    """The put's sequence number: every acknowledged write takes the next one, so this is also
    the order of ``objects(order="sqn")``."""

    def live(self, now_ms: int) -> bool:
        return self.expiry_ms is None or self.expiry_ms > now_ms


@dataclass
class Model:
    """Objects and index entries, as the public API must show them."""

    objects: dict[ObjectId, StoredObject] = field(default_factory=dict)
    index: dict[IndexId, int | None] = field(default_factory=dict)
    """Active index entries and their expiry (ms since the epoch, None: never)."""
    writes: int = 0
    """Acknowledged writes: the SQN of the latest one."""
    journaled: Journaled | None = field(default=None, repr=False, compare=False)
    """When a list: each change appends the index specs the engine writes in its journal entry
    (the ones it names, and those the entries following their object add): (entry, expiry) for
    an add, (entry, REMOVED) for a remove. Replaying them (:meth:`replay_index`) is how replay
    sees that change, whatever the entries are by then."""

    def copy(self) -> Model:
        return Model(dict(self.objects), dict(self.index), self.writes)

    def _note(self, entry: IndexId, expiry: int | Removed | None) -> None:
        if self.journaled is not None:
            self.journaled.append((entry, expiry))

    def replay_index(self, journaled: Journaled) -> None:
        """Apply index specs as a journal entry holds them (see :attr:`journaled`)."""
        for entry, expiry in journaled:
            if isinstance(expiry, Removed):
                self.index.pop(entry, None)
            else:
                self.index[entry] = expiry

    # -- changes --------------------------------------------------------------------------------

    def _apply_specs(
        self, bucket: bytes, key: bytes, specs: Iterable[IndexSpec], expiry_ms: int | None
    ) -> None:
        for op, index_field, term in specs:
            entry = (bucket, encode(index_field), encode(term), key)
            if op == "add":
                self.index[entry] = expiry_ms
                self._note(entry, expiry_ms)
            else:
                self.index.pop(entry, None)
                self._note(entry, REMOVED)

    def _entries_of(self, bucket: bytes, key: bytes) -> list[IndexId]:
        return [entry for entry in self.index if entry[0] == bucket and entry[3] == key]

    def put(
        self,
        bucket: str,
        key: str,
        value: bytes,
        specs: Iterable[IndexSpec],
        *,
        now_ms: int,
        expiry_ms: int | None,
    ) -> None:
        b, k = encode(bucket), encode(key)
        self.writes += 1
        self.objects[(b, k)] = StoredObject(value, expiry_ms, now_ms, self.writes)
        specs = list(specs)
        if expiry_ms is not None:  # entries it does not name expire no later than the object
            named = {(encode(f), encode(t)) for _, f, t in specs}
            for entry in self._entries_of(b, k):
                expiry = self.index[entry]
                if (entry[1], entry[2]) not in named and (expiry is None or expiry > expiry_ms):
                    self.index[entry] = expiry_ms
                    self._note(entry, expiry_ms)
        self._apply_specs(b, k, specs, expiry_ms)

    def renumber(self, bucket: bytes, key: bytes, sqn: int) -> None:
        """Give a stored object the SQN the engine chose (writes from several threads)."""
        self.objects[(bucket, key)] = replace(self.objects[(bucket, key)], sqn=sqn)

    def delete(self, bucket: str, key: str, specs: Iterable[IndexSpec]) -> None:
        b, k = encode(bucket), encode(key)
        self.writes += 1
        self.objects.pop((b, k), None)
        for entry in self._entries_of(b, k):  # named or not
            del self.index[entry]
            self._note(entry, REMOVED)
        for _, index_field, term in specs:  # named ones it has not: still in the journal entry
            self._note((b, encode(index_field), encode(term), k), REMOVED)

    # -- reads ----------------------------------------------------------------------------------

    def live(self, now_ms: int) -> dict[ObjectId, StoredObject]:
        return {oid: obj for oid, obj in self.objects.items() if obj.live(now_ms)}

    def get(self, bucket: str | bytes, key: str | bytes, now_ms: int) -> StoredObject | None:
        found = self.objects.get((encode(bucket), encode(key)))
        return found if found is not None and found.live(now_ms) else None

    def sqn(self, bucket: str, key: str, now_ms: int) -> int:
        """The key's SQN as ``head().sqn`` shows it; 0 when absent (what ``if_sqn=0`` means)."""
        found = self.get(bucket, key, now_ms)
        return 0 if found is None else found.sqn

    def value(self, bucket: str, key: str, now_ms: int) -> bytes | None:
        found = self.get(bucket, key, now_ms)
        return None if found is None else found.value

    def keys(self, bucket: str, start: str | None, end: str | None, now_ms: int) -> list[bytes]:
        b = encode(bucket)
        lo = None if start is None else encode(start)
        hi = None if end is None else encode(end)
        return sorted(
            k
            for (ob, k) in self.live(now_ms)
            if ob == b and (lo is None or lo <= k) and (hi is None or k <= hi)
        )

    def objects_in(
        self,
        bucket: str | None,
        start: str | None,
        end: str | None,
        now_ms: int,
        *,
        order: str = "key",
    ) -> list[tuple[bytes, bytes, bytes]]:
        b = None if bucket is None else encode(bucket)
        lo = None if start is None else encode(start)
        hi = None if end is None else encode(end)
        chosen = [
            (oid, obj)
            for oid, obj in self.live(now_ms).items()
            if (b is None or oid[0] == b)
            and (lo is None or lo <= oid[1])
            and (hi is None or oid[1] <= hi)
        ]
        if order == "sqn":
            chosen.sort(key=lambda item: item[1].sqn)
        else:
            chosen.sort(key=lambda item: item[0])
        return [(oid[0], oid[1], obj.value) for oid, obj in chosen]

    def buckets(self, now_ms: int) -> list[bytes]:
        return sorted({b for (b, _) in self.live(now_ms)})

    def index_query(
        self,
        bucket: str,
        index_field: str,
        start: str,
        end: str,
        now_ms: int,
        *,
        regex: str | None = None,
        return_terms: bool = False,
    ) -> list[bytes] | list[tuple[bytes, bytes]]:
        b, f = encode(bucket), encode(index_field)
        lo, hi = encode(start), encode(end)
        pattern = None if regex is None else re.compile(regex)
        found = sorted(
            (term, key)
            for (eb, ef, term, key), expiry in self.index.items()
            if eb == b
            and ef == f
            and lo <= term <= hi
            and (expiry is None or expiry > now_ms)
            and self.get(bucket, key, now_ms) is not None
            and (pattern is None or pattern.search(term.decode("utf-8", "replace")) is not None)
        )
        if return_terms:
            return found
        return [key for _, key in found]


def expected_hash(value: bytes) -> int:
    """The content hash a head of ``value`` carries."""
    return content_hash(value)
