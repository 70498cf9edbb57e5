"""The data set's descriptor, shard URLs and routing (inkpen.shards' pure functions).

The routing vectors below are fixed: any implementation of the documented hash (BLAKE2b-64 over
the length-prefixed bucket and key, big-endian, modulo N) in any language must give them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable

import pytest

import inkpen
from inkpen import shards
from inkpen.errors import CorruptionError, NotFoundError, UsageError
from inkpen.manifest.store import ManifestStore, RootState
from inkpen.objectstore import open_store

# (bucket, key, 64-bit hash, [shard for N = 1, 3, 8, 1000])
VECTORS: list[tuple[str | bytes, str | bytes, int, list[int]]] = [
    (b"users", b"alice", 0x8893DC3AB0C12EA5, [0, 1, 5, 21]),
    (b"users", b"bob", 0xF0D4B75D0C966931, [0, 0, 1, 169]),
    ("célèbre", "日本", 0xB5771D0883B9F525, [0, 2, 5, 565]),
    (b"a", b"bc", 0x7C71A240A6AA6D33, [0, 2, 3, 779]),
    (b"ab", b"c", 0x88F5E1CFB74CCC43, [0, 2, 3, 443]),
    (b"\x00", b"\xff\xff\xff", 0xCC50E416C5DF9859, [0, 1, 1, 945]),
]


@pytest.mark.parametrize(("bucket", "key", "digest", "expected"), VECTORS)
def test_routing_vectors(
    bucket: str | bytes, key: str | bytes, digest: int, expected: list[int]
) -> None:
    assert [shards.shard_of(bucket, key, n) for n in (1, 3, 8, 1000)] == expected
    b = bucket.encode() if isinstance(bucket, str) else bucket
    k = key.encode() if isinstance(key, str) else key
    spelled = len(b).to_bytes(4, "big") + b + len(k).to_bytes(4, "big") + k
    assert int.from_bytes(hashlib.blake2b(spelled, digest_size=8).digest(), "big") == digest
    assert [digest % n for n in (1, 3, 8, 1000)] == expected


def test_shards_of_many_pairs_is_shard_of_each() -> None:
    pairs = [
        (b.encode() if isinstance(b, str) else b, k.encode() if isinstance(k, str) else k)
        for b, k, _, _ in VECTORS
    ]
    pairs += [(b"b%d" % (i % 3), b"k%d" % i) for i in range(200)]
    for n in (1, 3, 8, 1000):
        assert shards.shards_of(pairs, n) == [shards.shard_of(b, k, n) for b, k in pairs]
        assert shards.shards_of(iter(pairs), n) == [shards.route_hash(b, k) % n for b, k in pairs]
    with pytest.raises(UsageError, match="shards must be an int from 1"):
        shards.shards_of(pairs, 0)


def test_str_and_bytes_route_alike_and_the_length_prefix_separates_fields() -> None:
    assert shards.shard_of("users", "alice", 1000) == shards.shard_of(b"users", b"alice", 1000)
    # "a"+"bc" and "ab"+"c" concatenate alike: the length prefixes tell them apart.
    assert shards.shard_of(b"a", b"bc", 1000) != shards.shard_of(b"ab", b"c", 1000)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: shards.shard_of("b", "k", 0), "shards must be an int from 1"),
        (lambda: shards.shard_of("b", "k", True), "shards must be an int from 1"),
        (lambda: shards.shard_of("b", "k", shards.MAX_SHARDS + 1), "shards must be an int"),
        (lambda: shards.shard_of("", "k", 3), "bucket must not be empty"),
        (lambda: shards.shard_of("b", 7, 3), "key must be str or bytes"),  # type: ignore[arg-type]
        (lambda: shards.shard_url("memory://x", -1), "a shard number is an int"),
        (lambda: shards.shard_url("memory://x", 1.0), "a shard number is an int"),  # type: ignore[arg-type]
        (lambda: shards.shard_url("", 0), "store URL must be a non-empty str"),
    ],
)
def test_bad_routing_arguments_are_usage_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        call()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("data/set", "data/set/shard-0003"),
        ("file:///srv/set", "file:///srv/set/shard-0003"),
        ("memory://space", "memory://space/shard-0003"),
        ("memory://space/a/", "memory://space/a/shard-0003"),
        ("s3://bucket", "s3://bucket/shard-0003"),
        (
            "s3://bucket/sets/a?endpoint=http://h:1",
            "s3://bucket/sets/a/shard-0003?endpoint=http://h:1",
        ),
    ],
)
def test_shard_urls(url: str, expected: str) -> None:
    assert shards.shard_url(url, 3) == expected


def test_create_writes_one_descriptor_and_every_shard(
    store_url: str,
) -> None:
    made = shards.create(store_url, shards=3)
    assert (made.version, made.shards, made.hash) == (1, 3, "blake2b64-mod")
    assert made.created is not None
    assert shards.is_data_set(store_url)
    assert shards.read_descriptor(store_url) == made
    with open_store(store_url) as root:
        fields = json.loads(root.get(shards.DESCRIPTOR_KEY))
        assert fields == {
            "format": "inkpen-data-set",
            "version": 1,
            "shards": 3,
            "hash": "blake2b64-mod",
            "created": made.created,
        }
        names = sorted({info.key.split("/", 1)[0] for info in root.list()})
        assert names == [shards.DESCRIPTOR_KEY, "shard-0000", "shard-0001", "shard-0002"]
    for i in range(3):
        with open_store(shards.shard_url(store_url, i)) as shard:
            assert ManifestStore(shard).check_root_state() is RootState.DATABASE
    # The same count again answers the existing data set, unchanged.
    assert shards.create(store_url, shards=3) == made


def test_create_refuses_another_count_and_changes_nothing(store_url: str) -> None:
    made = shards.create(store_url, shards=2)
    with pytest.raises(UsageError, match="has 2 shards, not 5"):
        shards.create(store_url, shards=5)
    assert shards.read_descriptor(store_url) == made
    assert not shards.is_data_set(shards.shard_url(store_url, 4))


def test_a_plain_database_is_not_a_data_set(store_url: str) -> None:
    with inkpen.open(store_url) as book:
        book.put("b", "k", b"v")
    with pytest.raises(UsageError, match="holds a plain inkpen database"):
        shards.create(store_url, shards=2)
    with pytest.raises(NotFoundError, match="holds a plain inkpen database"):
        shards.read_descriptor(store_url)
    assert not shards.is_data_set(store_url)
    with inkpen.open(store_url) as book:
        assert book.get("b", "k") == b"v"


def test_other_objects_are_refused(store_url: str) -> None:
    with open_store(store_url) as root:
        root.put("notes.txt", b"hello")
    with pytest.raises(UsageError, match="no data set descriptor"):
        shards.create(store_url, shards=2)
    with open_store(store_url) as root:
        assert [info.key for info in root.list()] == ["notes.txt"]


def test_a_missing_descriptor_is_refused(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("memory")
    with pytest.raises(NotFoundError, match=r"create one with inkpen.shards.create"):
        shards.read_descriptor(url)
    local = make_store_url("local")
    with pytest.raises(NotFoundError, match="the directory does not exist"):
        shards.read_descriptor(local)
    assert not shards.is_data_set(local)
    import os

    assert not os.path.exists(local)  # looking did not create it


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object with format"),
        (
            b'{"format": "inkpen-data-set", "version": 2, "shards": 3, "hash": "blake2b64-mod"}',
            "format version 2",
        ),
        (
            b'{"format": "inkpen-data-set", "version": 1, "shards": 0, "hash": "blake2b64-mod"}',
            "shard count 0",
        ),
        (
            b'{"format": "inkpen-data-set", "version": 1, "shards": 3, "hash": "crc32"}',
            "unknown hash function 'crc32'",
        ),
    ],
)
def test_a_garbage_descriptor_is_a_corruption_error(
    make_store_url: Callable[[str], str], data: bytes, message: str
) -> None:
    url = make_store_url("memory")
    with open_store(url) as root:
        root.put(shards.DESCRIPTOR_KEY, data)
    with pytest.raises(CorruptionError, match=message):
        shards.read_descriptor(url)
    with pytest.raises(CorruptionError, match=message):
        shards.create(url, shards=3)
    with open_store(url) as root:
        assert root.get(shards.DESCRIPTOR_KEY) == data  # never rewritten


def test_inkpen_open_on_a_data_set_names_shards_open(store_url: str) -> None:
    shards.create(store_url, shards=2)
    with pytest.raises(UsageError, match=r"inkpen\.shards\.open"):
        inkpen.open(store_url)
    with pytest.raises(UsageError, match=r"inkpen\.shards\.open"):
        inkpen.open_reader(store_url)


def test_racing_creators_write_one_descriptor(store_url: str) -> None:
    results: list[shards.Descriptor] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def creator() -> None:
        start.wait()
        try:
            results.append(shards.create(store_url, shards=4))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=creator) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 4
    assert len(set(results)) == 1  # every creator answers the one descriptor that landed
    assert shards.read_descriptor(store_url) == results[0]
