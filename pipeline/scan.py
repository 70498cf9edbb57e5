"""Reading one partition of a Spark read, in its task: views of the checkpoint, rows as Arrow.

A task opens the views of its partition's cut-down manifest once
(:func:`inkpen.actors.read.checkpoint_views.load_views`: SST readers, journal readers, the unrolled
segments and the replayed journal tail), then walks its key ranges with the read path every inkpen
reader uses (:func:`inkpen.actors.read.path.live_range`: every source merged in key order, the
newest version of each key, tombstones and expired objects skipped) and, when values are read,
reads the values of a window of rows together
(:func:`inkpen.actors.read.path.window_reader`: journal records in file order, each byte at most
once). Rows leave in key order, in Arrow record batches of ``batch_rows``.

So a partition yields exactly what ``Bookie.objects()`` yields for its ranges at the same
checkpoint, with TTLs judged at the instant the read was pinned.

A file that is gone means the checkpoint stopped protecting it (it expired, or was deleted, and
GC ran); the task then fails saying so, never skipping rows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from inkpen.actors.kernel.views import CacheView, LedgerView
from inkpen.actors.read.ahead import ReadAhead
from inkpen.actors.read.checkpoint_views import ManifestViews, load_views
from inkpen.actors.read.path import (
    SCAN_WINDOW,
    live_range,
    reading_ahead,
    window_bodies,
    window_reader,
)
from inkpen.errors import CorruptionError, NotFoundError, UsageError
from inkpen.formats.keys import (
    LedgerValue,
    Tag,
    bucket_prefix,
    decode_key,
    object_key,
    object_parts,
    prefix_end,
)
from inkpen.logs import get_logger
from inkpen.manifest.clones import StoreResolver
from inkpen.objectstore import open_store
from inkpen.options import Options

from .options import KeyType
from .plan import ScanSlice

log = get_logger("inkpen.pipeline")


@dataclass(frozen=True, slots=True)
class ScanSpec:
    """What every partition of one read shares."""

    url: str
    checkpoint_id: str
    values: bool
    indexes: bool
    key_type: KeyType
    batch_rows: int
    now_ms: int
    read_ahead_bytes: int = 0
    """Bytes the task reads ahead of its scan (0: none)."""
    cache_dir: str | None = None
    """The executors' disk cache of file parts (None: none), of ``cache_dir_bytes``."""
    cache_dir_bytes: int = 1024 * 1024 * 1024


def _name_decoder(key_type: KeyType, what: str) -> Callable[[bytes], Any]:
    if key_type == "binary":
        return bytes

    def decode(raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(
                f"a {what} is not valid UTF-8 ({raw[:40]!r}); read with key_type=binary"
            ) from None

    return decode


class _Batcher:
    """Column lists that become one Arrow record batch every ``batch_rows`` rows."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.columns: list[list[Any]] = [[] for _ in schema.names]

    def __len__(self) -> int:
        return len(self.columns[0])

    def add(self, row: tuple[Any, ...]) -> None:
        for column, value in zip(self.columns, row, strict=True):
            column.append(value)

    def flush(self) -> pa.RecordBatch:
        arrays = [
            pa.array(column, type=field.type)
            for column, field in zip(self.columns, self.schema, strict=True)
        ]
        self.columns = [[] for _ in self.schema.names]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _index_terms(
    cache: CacheView,
    ledger: LedgerView,
    bucket: bytes,
    bounds: tuple[bytes, bytes],
    now_ms: int,
    name: Callable[[bytes], Any],
) -> dict[bytes, list[dict[str, Any]]]:
    """Live index entries of ``bucket`` pointing at objects in ``bounds``, by object key."""
    prefix = bucket_prefix(Tag.INDEX, bucket)
    terms: dict[bytes, list[dict[str, Any]]] = defaultdict(list)
    lo, hi = bounds
    for encoded, _ in live_range(cache, ledger, prefix, prefix_end(prefix), now_ms):
        entry = decode_key(encoded)
        if lo <= object_key(bucket, entry.object_key) < hi:
            terms[entry.object_key].append({"field": name(entry.key), "term": name(entry.subkey)})
    return terms


def _rows(
    spec: ScanSpec, slice_: ScanSlice, views: ManifestViews, ahead: ReadAhead | None
) -> Iterator[tuple[Any, ...]]:
    cache, ledger, journal = views.views()
    bucket_name = _name_decoder(spec.key_type, "bucket")
    key_name = _name_decoder(spec.key_type, "key")
    index_name = _name_decoder(spec.key_type, "index field or term")
    read_window = window_reader(journal, ahead)
    for lo, hi in slice_.ranges:
        terms_bucket: bytes | None = None
        terms: dict[bytes, list[dict[str, Any]]] = {}
        entries = live_range(cache, ledger, lo, hi, spec.now_ms, ahead=ahead)
        for window in _windows(entries):
            bodies: list[bytes | None] | None = None
            if spec.values:  # the window's values: from the ledger, or read in journal order
                bodies = window_bodies(read_window, window)
            for at, (encoded, value) in enumerate(window):
                bucket, key = object_parts(encoded)
                sqn, size, last_modified = value[0], value[4], value[5]
                if bodies is not None:
                    middle: Any = bodies[at]
                    if middle is None:
                        raise CorruptionError(
                            "journal",
                            f"the ledger names SQN {sqn} for key {encoded!r} but no journal "
                            "holds it",
                        )
                else:
                    middle = size
                row: tuple[Any, ...] = (
                    bucket_name(bucket),
                    key_name(key),
                    middle,
                    sqn,
                    "put",  # a read's row is the latest change of a live object
                    last_modified * 1000,
                )
                if spec.indexes:
                    if bucket != terms_bucket:
                        terms_bucket = bucket
                        terms = _index_terms(
                            cache, ledger, bucket, (lo, hi), spec.now_ms, index_name
                        )
                    row = (*row, terms.get(key, []))
                yield row


def _windows(
    entries: Iterator[tuple[bytes, LedgerValue]],
) -> Iterator[list[tuple[bytes, LedgerValue]]]:
    """``entries`` in lists of up to :data:`SCAN_WINDOW`."""
    window: list[tuple[bytes, LedgerValue]] = []
    for item in entries:
        window.append(item)
        if len(window) == SCAN_WINDOW:
            yield window
            window = []
    if window:
        yield window


def scan_slice(spec: ScanSpec, slice_: ScanSlice, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every live object of the partition's ranges, in key order, as record batches of
    ``schema`` (the Arrow form of :func:`inkpen.pipeline.schema.read_schema`)."""
    if not slice_.ranges:
        return  # the filters left nothing to read: no file needs opening
    started = time.monotonic()
    store = open_store(spec.url)
    resolver = StoreResolver(store)
    rows = 0
    options = Options(
        read_ahead_bytes=spec.read_ahead_bytes,
        cache_dir=spec.cache_dir,
        cache_dir_bytes=spec.cache_dir_bytes,
    )
    try:
        views = load_views(resolver, slice_.manifest, slice_.manifest_id, options)
        batcher = _Batcher(schema)
        with reading_ahead(spec.read_ahead_bytes) as ahead:
            for row in _rows(spec, slice_, views, ahead):
                batcher.add(row)
                if len(batcher) >= spec.batch_rows:
                    rows += len(batcher)
                    yield batcher.flush()
        if len(batcher):
            rows += len(batcher)
            yield batcher.flush()
    except NotFoundError as exc:
        raise NotFoundError(
            f"a file of checkpoint {spec.checkpoint_id} is gone from {spec.url} ({exc}): the "
            "checkpoint expired or was deleted while the job ran and GC removed the file. Read "
            "again with a longer checkpoint_lifetime, or hold the checkpoint yourself "
            "(inkpen.pipeline.pinned_checkpoint)",
            key=exc.key,
        ) from exc
    finally:
        resolver.close()
        store.close()
    log.debug(
        "pipeline.partition_read",
        url=spec.url,
        partition=slice_.index,
        rows=rows,
        ms=round((time.monotonic() - started) * 1000, 1),
    )
