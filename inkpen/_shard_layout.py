"""A sharded data set's layout: its descriptor, where its shards live, and how keys route.

A data set is N inkpen databases under one root, each with its own writer. The root holds:

- ``inkpen-data-set.json``, the **descriptor**, written once with the store's conditional put
  (create-if-absent) and never changed::

      {"format": "inkpen-data-set", "version": 1, "shards": 8,
       "hash": "blake2b64-mod", "created": 1764093600.25}

- ``shard-0000/`` ... ``shard-NNNN/``: shard ``i`` is the database at :func:`shard_url` ``(url,
  i)``, the root's URL with the segment ``shard-%04d`` appended to its path.

**Routing** (``hash = "blake2b64-mod"``), so that any language routes the same way: encode the
bucket and the key as bytes (a str as UTF-8), hash ``u32be(len(bucket)) || bucket ||
u32be(len(key)) || key`` with BLAKE2b (digest size 8 bytes, no key, salt or personalisation),
read the digest as a big-endian unsigned 64-bit integer ``h``; the shard is ``h % N``. The shard
count is fixed for the data set's life (the descriptor never changes), so a plain modulo is
enough.

This module is pure routing and descriptor handling: it opens no Bookie (the handle is
:mod:`inkpen._shard_handle`; the public names are in :mod:`inkpen.shards`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from inkpen.actors.journal.changes import as_bytes
from inkpen.formats.keys import MAX_KEY_BYTES
from inkpen.logs import get_logger
from inkpen.manifest.model import Manifest
from inkpen.manifest.paths import DATA_SET_KEY
from inkpen.manifest.store import ManifestStore, RootState
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.url import backend_of, parse_store_url
from inkpen.options import HEAD_ONLY_MODES

from .errors import AlreadyExistsError, CorruptionError, NotFoundError, StoreError, UsageError

log = get_logger("inkpen.shards")

FORMAT = "inkpen-data-set"
"""The descriptor's ``format`` field: what the JSON object is."""
VERSION = 1
"""The descriptor format version this code writes and reads."""
HASH = "blake2b64-mod"
"""The routing function's name, as the descriptor records it (see the module docstring)."""
MAX_SHARDS = 4096
"""The most shards a data set may have (shard names have four digits; 4096 writers is far past
what one data set of this design is for)."""
DESCRIPTOR_KEY = DATA_SET_KEY
"""The descriptor's object key under the data set's root."""
_MAX_DESCRIPTOR_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Descriptor:
    """A data set's descriptor: format version, shard count, hash function name, and when it was
    created (seconds since the epoch; None for a descriptor built by hand)."""

    version: int
    shards: int
    hash: str
    created: float | None = None

    def encode(self) -> bytes:
        """The descriptor's JSON bytes, as stored."""
        return json.dumps(
            {
                "format": FORMAT,
                "version": self.version,
                "shards": self.shards,
                "hash": self.hash,
                "created": self.created,
            },
            sort_keys=True,
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes, where: str) -> Descriptor:
        """Parse stored bytes; :class:`CorruptionError` naming ``where`` if they are not a
        descriptor this version reads."""

        def bad(why: str) -> CorruptionError:
            return CorruptionError(
                where,
                f"the data set descriptor is unreadable: {why}. inkpen never rewrites it; "
                "restore it from a backup or recreate the data set",
            )

        if len(data) > _MAX_DESCRIPTOR_BYTES:
            raise bad(f"{len(data)} bytes is far more than a descriptor holds")
        try:
            fields = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise bad("not JSON") from None
        if not isinstance(fields, dict) or fields.get("format") != FORMAT:
            raise bad(f"not a JSON object with format {FORMAT!r}")
        version = fields.get("version")
        if not _is_int(version):
            raise bad("its version is not an integer")
        if version != VERSION:
            raise bad(f"format version {version} (this inkpen reads version {VERSION}; upgrade)")
        shards: Any = fields.get("shards")
        hash_name, created = fields.get("hash"), fields.get("created")
        if not _is_int(shards) or not 1 <= shards <= MAX_SHARDS:
            raise bad(f"its shard count {shards!r} is not an int from 1 to {MAX_SHARDS}")
        if hash_name != HASH:
            raise bad(f"unknown hash function {hash_name!r} (this inkpen routes with {HASH!r})")
        if created is not None and (
            not isinstance(created, int | float) or isinstance(created, bool)
        ):
            raise bad("its created time is not a number")
        if created is not None and not math.isfinite(created):
            raise bad("its created time is not finite")
        return cls(version, shards, hash_name, None if created is None else float(created))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_shard_count(shards: Any) -> int:
    """A shard count: an int from 1 to :data:`MAX_SHARDS`."""
    if not _is_int(shards) or not 1 <= shards <= MAX_SHARDS:
        raise UsageError(f"shards must be an int from 1 to {MAX_SHARDS}, got {shards!r}")
    return int(shards)


def check_shard_number(index: Any, shards: int) -> int:
    """A shard number of a data set of ``shards`` shards: an int from 0 to ``shards - 1``."""
    if not _is_int(index) or not 0 <= index < shards:
        raise UsageError(
            f"a shard number of this data set is an int from 0 to {shards - 1}, got {index!r}"
        )
    return int(index)


# -- routing ----------------------------------------------------------------------------------


def route_hash(bucket: bytes, key: bytes) -> int:
    """The 64-bit routing hash of an encoded (bucket, key) (see the module docstring)."""
    digest = hashlib.blake2b(
        len(bucket).to_bytes(4, "big") + bucket + len(key).to_bytes(4, "big") + key,
        digest_size=8,
    ).digest()
    return int.from_bytes(digest, "big")


def shards_of(pairs: Iterable[tuple[bytes, bytes]], shards: int) -> list[int]:
    """The shard of each encoded (bucket, key) in a data set of ``shards`` shards, in order:
    ``route_hash(bucket, key) % shards`` for a loop over many rows (each bucket's length prefix
    is made once; a quarter less time per row than calling :func:`route_hash`)."""
    n = check_shard_count(shards)
    heads: dict[bytes, bytes] = {}
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    found = []
    for bucket, key in pairs:
        head = heads.get(bucket)
        if head is None:
            head = heads[bucket] = len(bucket).to_bytes(4, "big") + bucket
        digest = blake2b(head + len(key).to_bytes(4, "big") + key, digest_size=8).digest()
        found.append(from_bytes(digest, "big") % n)
    return found


def shard_of(bucket: str | bytes, key: str | bytes, shards: int) -> int:
    """The shard (0 to ``shards - 1``) holding (bucket, key) in a data set of ``shards`` shards."""
    n = check_shard_count(shards)
    b = as_bytes("bucket", bucket, MAX_KEY_BYTES)
    k = as_bytes("key", key, MAX_KEY_BYTES)
    return route_hash(b, k) % n


# -- where shards live ------------------------------------------------------------------------


def shard_name(index: int) -> str:
    """``shard-%04d``: the path segment of shard ``index`` under the data set's root."""
    if not _is_int(index) or not 0 <= index < MAX_SHARDS:
        raise UsageError(f"a shard number is an int from 0 to {MAX_SHARDS - 1}, got {index!r}")
    return f"shard-{index:04d}"


def shard_url(url: str, index: int) -> str:
    """The URL of shard ``index``: ``url`` with the segment ``shard-%04d`` appended to its path
    (before any ``?query``), so ``s3://bucket/sets/a?endpoint=E`` gives
    ``s3://bucket/sets/a/shard-0003?endpoint=E`` and ``./data`` gives ``./data/shard-0003``."""
    parse_store_url(url)  # a clear UsageError for anything that is not a store URL
    name = shard_name(index)
    if "://" not in url:
        return os.path.join(url, name)
    parts = urlsplit(url)
    return urlunsplit(
        (parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + name, parts.query, "")
    )


# -- reading and creating the descriptor ------------------------------------------------------


def _missing_directory(url: str) -> bool:
    """A local directory that does not exist (opening it would create it)."""
    parsed = parse_store_url(url)
    return backend_of(parsed).local and not os.path.isdir(parsed.location)


@contextmanager
def _root(url: str) -> Iterator[ObjectStore]:
    if not isinstance(url, str):
        raise UsageError(f"url must be a store URL (a str), got {type(url).__name__}")
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def _stored(store: ObjectStore) -> Descriptor | None:
    try:
        data = store.get(DESCRIPTOR_KEY)
    except NotFoundError:
        return None
    return Descriptor.decode(data, f"{store.url} ({DESCRIPTOR_KEY})")


def is_data_set(url: str) -> bool:
    """Whether ``url`` holds a data set descriptor (it may still be unreadable: see
    :func:`read_descriptor`). A missing local directory holds none, and is not created."""
    if not isinstance(url, str):
        raise UsageError(f"url must be a store URL (a str), got {type(url).__name__}")
    if _missing_directory(url):
        return False
    with _root(url) as store:
        try:
            store.head(DESCRIPTOR_KEY)
        except NotFoundError:
            return False
        return True


def read_descriptor(url: str) -> Descriptor:
    """The descriptor of the data set at ``url``.

    Refuses a root without one with :class:`NotFoundError`, saying whether it holds a plain
    database (open that with ``inkpen.open``) or nothing (create a data set with
    ``inkpen.shards.create``); an unreadable descriptor is a :class:`CorruptionError`."""
    if not isinstance(url, str):
        raise UsageError(f"url must be a store URL (a str), got {type(url).__name__}")
    if _missing_directory(url):
        raise NotFoundError(
            f"no data set at {url}: the directory does not exist; create one with "
            "inkpen.shards.create(url, shards=N)",
            key=DESCRIPTOR_KEY,
        )
    with _root(url) as store:
        found = _stored(store)
        if found is not None:
            return found
        raise NotFoundError(_not_a_data_set(store), key=DESCRIPTOR_KEY)


def _not_a_data_set(store: ObjectStore) -> str:
    state = ManifestStore(store).check_root_state()
    if state is RootState.DATABASE:
        return (
            f"{store.url} holds a plain inkpen database, not a sharded data set: open it with "
            "inkpen.open(url), or create the data set at another URL"
        )
    if state is RootState.FOREIGN:
        return (
            f"{store.url} holds objects but no data set descriptor ({DESCRIPTOR_KEY}); it is "
            "not a sharded data set"
        )
    return f"no data set at {store.url}; create one with inkpen.shards.create(url, shards=N)"


def create(url: str, *, shards: int, head_only: str | None = None) -> Descriptor:
    """Create the data set of ``shards`` databases at ``url`` if it does not exist, and return
    its descriptor. ``head_only``: every shard a head-only store of this mode
    (``"with_lookup"`` or ``"no_lookup"``, as ``inkpen.open(url, head_only=...)`` makes one),
    which it stays; open it with the same ``head_only``.

    The descriptor is written once, with the store's create-if-absent put, so of concurrent
    creators exactly one writes it; then every shard's database is created (idempotently, as a
    first open does, claiming no writer). Calling it again with the same count returns the
    existing data set (finishing the shards of an interrupted create); another count is a
    :class:`UsageError`, as is a root holding a plain database or other objects.
    """
    n = check_shard_count(shards)
    if head_only is not None and head_only not in HEAD_ONLY_MODES:
        raise UsageError(f"head_only must be None, 'with_lookup' or 'no_lookup', got {head_only!r}")
    with _root(url) as store:
        found = _stored(store)
        if found is None:
            found = _write_descriptor(store, n)
        if found.shards != n:
            raise UsageError(
                f"the data set at {store.url} has {found.shards} shards, not {n}; its shard "
                f"count never changes: open it with inkpen.shards.open(url), or create a "
                "data set of another size at another URL"
            )
    _create_shards(url, found.shards, head_only)
    return found


def _write_descriptor(store: ObjectStore, shards: int) -> Descriptor:
    state = ManifestStore(store).check_root_state()
    if state is not RootState.EMPTY:
        # A concurrent creator may have written its descriptor since we looked: read again.
        found = _stored(store)
        if found is not None:
            return found
        raise UsageError(_not_a_data_set(store) + "; create the data set at an empty URL")
    mine = Descriptor(VERSION, shards, HASH, round(time.time(), 3))
    data = mine.encode()
    try:
        store.put_if_absent(DESCRIPTOR_KEY, data)
    except AlreadyExistsError:
        found = _stored(store)
        if found is None:  # written and removed since: nothing sensible to do but say so
            raise StoreError(
                f"the data set descriptor at {store.url} appeared and vanished during create; "
                "is something deleting it? Try again",
                definite=True,
            ) from None
        return found
    except StoreError as exc:
        if exc.definite:
            raise
        try:
            landed = store.get(DESCRIPTOR_KEY)
        except NotFoundError:
            raise exc from None
        found = Descriptor.decode(landed, f"{store.url} ({DESCRIPTOR_KEY})")
        if landed != data:
            return found  # another creator's
    log.info("shards.created", url=store.url, shards=shards, hash=HASH)
    return mine


def adopt_descriptor(url: str, descriptor: Descriptor) -> Descriptor:
    """Make ``url`` a data set described by ``descriptor`` (a copy's: a backup or restore of a
    data set keeps its source's descriptor), writing it if absent; its shards are left to the
    copy. A root already holding a data set of another shard count, a plain database or other
    objects is refused with :class:`UsageError`."""
    with _root(url) as store:
        found = _stored(store)
        if found is None:
            state = ManifestStore(store).check_root_state()
            if state is not RootState.EMPTY:
                raise UsageError(_not_a_data_set(store) + "; copy the data set to an empty URL")
            try:
                store.put_if_absent(DESCRIPTOR_KEY, descriptor.encode())
                found = descriptor
            except AlreadyExistsError:
                found = _stored(store)
        if found is None or found.shards != descriptor.shards:
            held = "none" if found is None else found.shards
            raise UsageError(
                f"the data set at {store.url} has {held} shards and its copy source "
                f"{descriptor.shards}; copy into an empty URL or an earlier copy of this data set"
            )
        return found


def _create_shards(url: str, shards: int, head_only: str | None) -> None:
    def one(index: int) -> None:
        with _root(shard_url(url, index)) as store:
            manifests = ManifestStore(store)
            if head_only is not None and manifests.check_root_state() is RootState.EMPTY:
                # A concurrent creator may have made it first: its mode is checked below.
                with contextlib.suppress(AlreadyExistsError):
                    manifests.create(Manifest(head_only=head_only))
            found = manifests.open_database(create_if_missing=True).manifest.head_only
            if found != head_only:
                raise UsageError(
                    f"shard {index} of the data set at {url} is "
                    + ("not a head-only store" if found is None else f"head_only={found!r}")
                    + f", not head_only={head_only!r}; create the data set with the mode it has"
                )

    workers = min(8, shards)
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="inkpen-shards") as pool:
        for done in [pool.submit(one, i) for i in range(shards)]:
            done.result()
