"""Corruption: a damaged byte in any stored object is reported, never read back as data.

One database is built on a local directory, with a model of what it holds: SSTs on several
levels, compacted journal files, unrolled journal segments a crashed writer left behind, and
superseded manifests nothing reads any more. Each case copies it, flips bits of one byte of one
object, opens the copy and reads everything the API can read (every get and head, every fold,
the journal in SQN order, and the index entries a delete of every object removes). Then:

- a damaged latest manifest: opening fails with a ``CorruptionError`` naming it;
- a damaged object the database reads (SST, journal file, unrolled segment): opening or some read
  raises ``CorruptionError`` naming that object, and every read that answers is exactly right;
- a damaged object nothing reads any more (a superseded manifest, a rolled segment, a replaced
  file not yet deleted): nothing notices; every read is right.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import inkpen
from inkpen.formats.journal import FORMAT_VERSION, HEADER_SIZE, read_header
from inkpen.manifest.paths import parse_segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY
from support.profiles import machine_settings

BUCKETS = ("red", "blue")
KEYS = tuple(f"key{n:02d}" for n in range(30))
FIELDS = ("colour_bin", "size_int")
TERMS = ("a", "b", "c", "d")
KINDS = ("latest manifest", "sst", "journal file", "segment", "unused")
READ_OPTIONS = {"gc_min_age": 3600.0}
"""Checking reads with default sizes starts no merge; nothing young is collected."""


@dataclass(frozen=True)
class Built:
    """A closed database on disk and what it holds."""

    root: Path
    objects: dict[tuple[bytes, bytes], bytes]
    index: frozenset[tuple[bytes, bytes, bytes, bytes]]
    """(bucket, field, term, key)."""
    files: dict[str, tuple[str, ...]]
    """Object keys by kind (see :data:`KINDS`)."""


def build(root: Path) -> Built:
    """Write, merge, compact, close, reopen, write a little more and crash."""
    rng = random.Random(20)
    objects: dict[tuple[bytes, bytes], bytes] = {}
    index: set[tuple[bytes, bytes, bytes, bytes]] = set()
    options = dict(TINY, gc_min_age=3600.0)

    def write(book: inkpen.Bookie, n: int) -> None:
        bucket, key = rng.choice(BUCKETS), rng.choice(KEYS)
        b, k = bucket.encode(), key.encode()
        specs = [
            (rng.choice(("add", "add", "remove")), rng.choice(FIELDS), rng.choice(TERMS))
            for _ in range(rng.randrange(3))
        ]
        if rng.random() < 0.2:
            specs = [s for s in specs if s[0] == "remove"]
            book.delete(bucket, key, indexes=specs)
            objects.pop((b, k), None)
            # a delete takes every index entry of its object
            index.difference_update({e for e in index if (e[0], e[3]) == (b, k)})
        else:
            value = b"value-%d-" % n + bytes(rng.randrange(256) for _ in range(rng.randrange(600)))
            book.put(bucket, key, value, indexes=specs)
            objects[(b, k)] = value
        for op, index_field, term in specs:
            entry = (b, index_field.encode(), term.encode(), k)
            if op == "add":
                index.add(entry)
            else:
                index.discard(entry)

    book = inkpen.open(str(root), **options)
    for n in range(240):
        write(book, n)
    book.compact_journal()
    book.compact_journal()
    book.close()
    book = inkpen.open(str(root), **options)
    book.compact_ledger()
    for n in range(240, 244):
        write(book, n)
    book.abandon()
    return Built(root, objects, frozenset(index), classify(root))


def classify(root: Path) -> dict[str, tuple[str, ...]]:
    store = open_store(str(root))
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        manifest = latest.manifest
        referenced: dict[str, str] = {}
        for sst in manifest.ledger.ssts():
            referenced[sst.name] = "sst"
        for journal_file in manifest.journal.files:
            referenced[journal_file.name] = "journal file"
        files: dict[str, list[str]] = {kind: [] for kind in KINDS}
        for info in store.list(""):
            segment = parse_segment_key(info.key)
            if info.key == f"manifest/{latest.id:020d}.manifest":
                files["latest manifest"].append(info.key)
            elif info.key in referenced:
                files[referenced[info.key]].append(info.key)
            elif segment is not None and segment > manifest.journal.last_rolled_segment:
                files["segment"].append(info.key)
            else:
                files["unused"].append(info.key)
    finally:
        store.close()
    return {kind: tuple(keys) for kind, keys in files.items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    made = build(tmp_path_factory.mktemp("corruption") / "db")
    for kind in KINDS:
        assert made.files[kind], f"the database holds no object of kind {kind!r} to damage"
    return made


def damaged_copy(built: Built, destination: Path, key: str, offset: int, mask: int) -> Path:
    root = destination / "db"
    shutil.copytree(built.root, root)
    path = root / key
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))
    return root


class Reads:
    """Every read the API offers, each compared with the model; collects CorruptionErrors."""

    def __init__(self, built: Built) -> None:
        self.built = built
        self.errors: list[inkpen.CorruptionError] = []

    def expect(self, read: Callable[[], Any], expected: Any) -> None:
        try:
            got = read()
        except inkpen.CorruptionError as exc:
            self.errors.append(exc)
            return
        assert got == expected, f"wrong data read back: {got!r:.200}, expected {expected!r:.200}"

    def everything(self, book: inkpen.Bookie) -> None:
        objects = self.built.objects
        for bucket in BUCKETS:
            b = bucket.encode()
            for key in KEYS:
                value = objects.get((b, key.encode()))
                self.expect(partial(book.get, bucket, key), value)
                self.expect(
                    partial(_head_size, book, bucket, key), None if value is None else len(value)
                )
            self.expect(
                partial(book.get_many, bucket, KEYS),
                [objects.get((b, key.encode())) for key in KEYS],
            )
            self.expect(
                partial(_listed, book.keys, bucket),
                sorted(k for (ob, k) in objects if ob == b),
            )
            for index_field in FIELDS:
                f = index_field.encode()
                self.expect(
                    partial(
                        _listed, book.index_query, bucket, index_field, "", "z", return_terms=True
                    ),
                    sorted(
                        (term, key)
                        for (ib, i_field, term, key) in self.built.index
                        # entries of a deleted object answer no query
                        if ib == b and i_field == f and (ib, key) in objects
                    ),
                )
        everything = sorted((b, k, v) for (b, k), v in objects.items())
        self.expect(lambda: list(book.objects()), everything)
        self.expect(lambda: sorted(book.objects(order="sqn")), everything)
        self.expect(
            lambda: [(b, k, h.size) for b, k, h in book.heads()],
            [(b, k, len(v)) for b, k, v in everything],
        )
        self.expect(lambda: list(book.buckets()), sorted({b for b, _ in objects}))
        # A delete reads its object's index entries (REVERSE keys, which no fold reads).
        gone = inkpen.Batch()
        for b, k in sorted(objects):
            gone.delete(b, k)
        try:
            book.write(gone)
        except inkpen.CorruptionError as exc:
            self.errors.append(exc)
            return
        for bucket in BUCKETS:
            for index_field in FIELDS:
                self.expect(partial(_listed, book.index_query, bucket, index_field, "", "z"), [])


def _listed(fold: Callable[..., Iterable[Any]], *args: Any, **kwargs: Any) -> list[Any]:
    """What a fold of ``book`` gives, as a list."""
    return list(fold(*args, **kwargs))


def _head_size(book: inkpen.Bookie, bucket: str, key: str) -> int | None:
    return _size(book.head(bucket, key))


def _size(head: inkpen.Head | None) -> int | None:
    return None if head is None else head.size


def check_damage(built: Built, root: Path, kind: str, key: str) -> None:
    reads = Reads(built)
    try:
        book = inkpen.open(str(root), **READ_OPTIONS)
    except inkpen.CorruptionError as exc:
        assert kind != "unused", f"damage to {key}, which nothing reads, stopped the open: {exc}"
        assert exc.object_name == key, f"opening reported {exc.object_name}, not {key}: {exc}"
        assert key in str(exc)
        return
    try:
        assert kind != "latest manifest", "a damaged latest manifest was opened"
        reads.everything(book)
    finally:
        book.abandon()
    if kind == "unused":
        assert not reads.errors, f"damage to {key}, which nothing reads, was reported"
        return
    assert reads.errors, f"damage to {key} ({kind}) went unnoticed by every read"
    for error in reads.errors:
        assert error.object_name == key, f"a read reported {error.object_name}, not {key}"


def test_the_undamaged_copy_reads_right(built: Built, tmp_path: Path) -> None:
    root = tmp_path / "db"
    shutil.copytree(built.root, root)
    reads = Reads(built)
    with inkpen.open(str(root), **READ_OPTIONS) as book:
        reads.everything(book)
    assert not reads.errors


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_byte_in_each_kind_of_object(
    built: Built, tmp_path: Path, kind: str, where: str
) -> None:
    key = built.files[kind][0]
    size = (built.root / key).stat().st_size
    offset = {"first": 0, "middle": size // 2, "last": size - 1}[where]
    root = damaged_copy(built, tmp_path, key, offset, 0x01)
    check_damage(built, root, kind, key)


@machine_settings("corruption")
@given(data=st.data())
def test_random_damage_is_reported_never_read(
    built: Built, tmp_path_factory: Any, data: Any
) -> None:
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    key = data.draw(st.sampled_from(built.files[kind]), label="object")
    size = (built.root / key).stat().st_size
    offset = data.draw(st.integers(0, size - 1), label="offset")
    mask = data.draw(st.integers(1, 255), label="mask")
    root = damaged_copy(built, tmp_path_factory.mktemp("damaged"), key, offset, mask)
    check_damage(built, root, kind, key)


@pytest.mark.parametrize("where", ["index entry", "index checksum", "second block"])
@pytest.mark.parametrize("kind", ["journal file", "segment"])
def test_a_damaged_byte_in_a_journal_block_index_or_block(
    built: Built, tmp_path: Path, kind: str, where: str
) -> None:
    key = max(built.files[kind], key=lambda name: (built.root / name).stat().st_size)
    data = (built.root / key).read_bytes()
    header = read_header(data, key)
    assert header.version == FORMAT_VERSION
    index = header.hash_offset
    second_block = (
        int.from_bytes(data[index + 24 : index + 32], "big")
        if header.hash_length > 20
        else HEADER_SIZE
    )
    offset = {
        "index entry": index + 15,  # the low byte of the first block's offset
        "index checksum": len(data) - 1,
        "second block": second_block + 20,  # inside the key of the second block's first record
    }[where]
    root = damaged_copy(built, tmp_path, key, offset, 0x04)
    check_damage(built, root, kind, key)
