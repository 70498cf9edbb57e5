"""Resharding on a real local Spark session: a database or a data set copied into a data set of
another shard count, against the oracle of what the source holds (values, index entries, TTLs,
last-modified times), each key in the shard ``shard_of`` names; reruns after a failed commit;
the verification catching a destination that differs; refusals that change nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import inkpen
import inkpen.pipeline
import inkpen.shards
from inkpen.errors import InkpenError, NotFoundError, UsageError
from inkpen.manifest.model import Manifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.pipeline.reshard import (
    ReshardMismatchError,
    check_reshard,
    commit,
    copy,
    create_destination,
    load_id_of,
    pin_sources,
)
from inkpen.shards import shard_of, shard_url
from support.cli import inkpen_command

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark

FIELDS = ("color_bin", "size_int")
Object = tuple[bytes, float, float | None, frozenset[tuple[bytes, bytes]]]
"""value, last_modified, expires_at, index entries (field, term)."""
State = dict[tuple[bytes, bytes], Object]
"""(bucket, key) -> what the store holds of it."""


def write(book: inkpen.Bookie | inkpen.shards.ShardedBookie, n: int, tag: str) -> None:
    """``n`` changes over three buckets: puts with index entries and long TTLs, overwrites,
    deletes, and objects whose index entries outlive their last put's (a ttl put, then a put
    without one)."""
    for i in range(n):
        bucket, key = f"b{i % 3}", f"k{i % (n - n // 4):05d}"
        if i % 11 == 10:
            book.delete(bucket, key)
            continue
        indexes = [("add", FIELDS[i % 2], f"t{i % 7}")] if i % 3 else []
        ttl = 7200.0 + i if i % 5 == 0 else None
        book.put(bucket, key, f"{tag}{i}".encode() * (1 + i % 4), indexes=indexes, ttl=ttl)
    for i in range(0, n // 10, 3):  # ttl'd entries, then a put without a ttl keeps them
        book.put("b9", f"mixed{i}", b"first", indexes=[("add", FIELDS[0], "early")], ttl=9000.0)
        book.put("b9", f"mixed{i}", b"second", indexes=[("add", FIELDS[1], "late")])


def state_of(reader: inkpen.Reader) -> State:
    found: State = {}
    for bucket, key, head in reader.heads():
        value = reader.get(bucket, key)
        assert value is not None
        found[(bucket, key)] = (value, head.last_modified, head.expires_at, frozenset())
    for bucket in reader.buckets():
        for field in FIELDS:
            for term, key in reader.index_query(bucket, field, b"", b"\xff" * 8, return_terms=True):
                value, modified, expires, entries = found[(bucket, key)]
                entries = entries | {(field.encode(), term)}
                found[(bucket, key)] = (value, modified, expires, entries)
    return found


def database_state(url: str) -> State:
    with inkpen.open_reader(url) as reader:
        return state_of(reader)


def data_set_state(url: str, shards: int) -> State:
    """What the data set holds; every key must sit in the shard shard_of names."""
    found: State = {}
    assert inkpen.shards.read_descriptor(url).shards == shards
    for shard in range(shards):
        held = database_state(shard_url(url, shard))
        for bucket, key in held:
            assert shard_of(bucket, key, shards) == shard, (bucket, key, shard)
        assert not found.keys() & held.keys()
        found.update(held)
    return found


def manifest(url: str) -> tuple[int, Manifest]:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return latest.id, latest.manifest
    finally:
        store.close()


def test_a_database_resharded_into_three_shards_holds_what_it_held(
    spark: SparkSession, make_store_url: Callable[[str], str], durable_kind: str
) -> None:
    source, dest = make_store_url(durable_kind), make_store_url(durable_kind)
    with inkpen.open(source) as book:
        write(book, 400, "v")
    model = database_state(source)
    assert any(o[2] is not None for o in model.values())  # TTLs
    assert sum(len(o[3]) for o in model.values()) > 100  # index entries
    mixed = model[(b"b9", b"mixed0")]
    assert mixed[0] == b"second" and mixed[2] is None and len(mixed[3]) == 2
    report = inkpen.pipeline.reshard(spark, source, dest, shards=3)
    assert report.objects == len(model)
    assert report.index_entries == sum(len(o[3]) for o in model.values())
    assert report.value_bytes == sum(len(o[0]) for o in model.values())
    assert (report.source_is_data_set, report.source_shards) == (False, 1)
    assert report.committed == (0, 1, 2) and report.resumed == ()
    assert data_set_state(dest, 3) == model
    with inkpen.shards.open(dest) as sharded:  # the handle reads it as every client does
        assert sharded.get("b9", "mixed0") == b"second"
    assert database_state(source) == model  # the source is unchanged ...
    _, held = manifest(source)
    assert held.checkpoint(report.load_id) is None  # ... and its pin is gone


def test_three_shards_to_five_keeps_indexes_ttls_and_times(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, dest = str(tmp_path / "three"), str(tmp_path / "five")
    inkpen.shards.create(source, shards=3)
    with inkpen.shards.open(source) as book:
        write(book, 300, "w")
    model = data_set_state(source, 3)
    report = inkpen.pipeline.reshard(spark, source, dest, shards=5)
    assert (report.source_is_data_set, report.source_shards, report.shards) == (True, 3, 5)
    assert report.objects == len(model) and report.committed == (0, 1, 2, 3, 4)
    assert data_set_state(dest, 5) == model
    # each object is one put, and one more per other expiry among its index entries (each
    # mixed one has two; an overwrite without a ttl leaves entries of an earlier ttl put too)
    mixed = sum(1 for bucket, key in model if bucket == b"b9")
    assert report.rows_loaded >= len(model) + mixed
    rows = 0
    for shard in range(5):
        with inkpen.open_reader(shard_url(dest, shard)) as reader:
            rows += reader.last_sqn
    assert rows == report.rows_loaded
    # the same reshard again finds every shard done: it commits nothing and verifies again
    ids = [manifest(shard_url(dest, i))[1].ledger for i in range(5)]
    again = inkpen.pipeline.reshard(spark, source, dest, shards=5)
    assert again.committed == () and again.resumed == (0, 1, 2, 3, 4)
    assert again.rows_loaded == 0 and again.objects == len(model)
    assert [manifest(shard_url(dest, i))[1].ledger for i in range(5)] == ids


def test_a_rerun_after_a_failed_commit_finishes_at_the_same_checkpoints_without_doubles(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, dest = str(tmp_path / "db"), str(tmp_path / "set")
    with inkpen.open(source) as book:
        write(book, 300, "x")
    model = database_state(source)
    plan = check_reshard(source, dest, shards=3)
    pins = pin_sources(plan, 3600.0)
    targets = create_destination(plan)
    copied = copy(spark, plan, pins, targets)
    # shard 1's commit fails: a file its tasks wrote is gone (as if GC had taken it)
    gone = next(c.parts[1].files[0] for c in copied if 1 in c.parts)
    store = open_store(shard_url(dest, 1))
    try:
        store.delete(gone)
    finally:
        store.close()
    with pytest.raises(InkpenError, match=r"committed shard\(s\) 0, 2 but not 1.*rerun"):
        commit(plan, targets, copied)
    pins.close(delete=False)  # the failed run stops; its checkpoint stays for the rerun
    first = {i: manifest(shard_url(dest, i))[1].ledger for i in (0, 2)}
    with inkpen.open(source) as book:  # the source moves on meanwhile
        book.put("b0", "after", b"not in the copy")
        book.delete(*next(iter(model)))
    report = inkpen.pipeline.reshard(spark, source, dest, shards=3)
    assert report.committed == (1,) and report.resumed == (0, 2)
    assert {i: manifest(shard_url(dest, i))[1].ledger for i in (0, 2)} == first  # untouched
    assert data_set_state(dest, 3) == model  # the state the first run pinned, whole
    for shard in range(3):  # one load per shard, each row once: SQNs 1..rows
        _, held = manifest(shard_url(dest, shard))
        assert [r.load_id for r in held.loads] == [plan.load_id]
        with inkpen.open_reader(shard_url(dest, shard)) as reader:
            assert reader.last_sqn == held.loads[0].rows == held.loads[0].last_sqn
    _, after = manifest(source)
    assert after.checkpoint(plan.load_id) is None


def test_the_verification_finds_a_destination_that_differs(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, dest = str(tmp_path / "db"), str(tmp_path / "set")
    with inkpen.open(source) as book:
        write(book, 200, "y")
    model = database_state(source)
    inkpen.pipeline.reshard(spark, source, dest, shards=2)
    (bucket, key), (value, *_rest) = next((k, o) for k, o in model.items() if o[2] is None)
    home = shard_url(dest, shard_of(bucket, key, 2))
    with inkpen.open(home) as book:  # the same value, now with a ttl (and a new time)
        book.put(bucket, key, value, ttl=99999.0)
    with pytest.raises(ReshardMismatchError, match="every object and value is the same"):
        inkpen.pipeline.reshard(spark, source, dest, shards=2)
    with inkpen.open(home) as book:  # another value
        book.put(bucket, key, b"changed")
    with pytest.raises(
        ReshardMismatchError,
        match=rf"1 tictac segment\(s\) differ \(different: bucket {bucket!r} key {key!r}\)",
    ):
        inkpen.pipeline.reshard(spark, source, dest, shards=2)
    wrong = next(k for k in (f"z{i}" for i in range(100)) if shard_of("b0", k, 2) == 0)
    with inkpen.open(shard_url(dest, 1)) as book:  # a key in a shard it does not route to
        book.put("b0", wrong, b"lost")
    with pytest.raises(ReshardMismatchError) as caught:
        inkpen.pipeline.reshard(spark, source, dest, shards=2)
    message = str(caught.value)
    assert f"bucket b'b0' key {wrong.encode()!r} in shard 1" in message
    assert f"the source holds {len(model):,} objects and the destination {len(model) + 1:,}" in (
        message
    )
    assert database_state(source) == model


def test_refusals_change_nothing(spark: SparkSession, tmp_path: Path) -> None:
    source = str(tmp_path / "db")
    with inkpen.open(source) as book:
        book.put("b", "k", b"v")
    plain = str(tmp_path / "plain")
    with inkpen.open(plain) as book:
        book.put("b", "k", b"v")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    other_count = str(tmp_path / "four")
    inkpen.shards.create(other_count, shards=4)
    used = str(tmp_path / "used")
    inkpen.shards.create(used, shards=2)
    with inkpen.open(shard_url(used, 1)) as book:
        book.put("b", "x", b"someone else's")
    head_only = str(tmp_path / "heads")
    with inkpen.open(head_only, head_only="with_lookup") as book:
        book.mput([("add", "b", "k", "s", b"v")])
    empty_dest = str(tmp_path / "fresh")
    before = manifest(source)[0]
    cases: list[tuple[str, str, object, type[Exception], str]] = [
        (source, empty_dest, 0, UsageError, "whole number from 1 to 4096; got 0"),
        (source, empty_dest, -1, UsageError, "whole number from 1 to 4096"),
        (source, empty_dest, 4097, UsageError, "whole number from 1 to 4096"),
        (source, empty_dest, True, UsageError, "whole number from 1 to 4096"),
        (source, source, 2, UsageError, "onto itself"),
        (source, str(tmp_path / "db" / "inside"), 2, UsageError, "onto itself"),
        (source, plain, 2, UsageError, "holds an inkpen database"),
        (source, str(foreign), 2, UsageError, "holds objects that are not an inkpen data set"),
        (source, other_count, 2, UsageError, "a data set of 4 shards, not 2"),
        (source, used, 2, UsageError, "shard 1 holds objects this reshard did not write"),
        (str(tmp_path / "none"), empty_dest, 2, NotFoundError, "directory does not exist"),
        (head_only, empty_dest, 2, UsageError, "head-only store"),
    ]
    for src, dst, shards, error, words in cases:
        with pytest.raises(error, match=words):
            inkpen.pipeline.reshard(spark, src, dst, shards=shards)  # type: ignore[arg-type]
    assert manifest(source)[0] == before  # no checkpoint was pinned
    assert not Path(empty_dest).exists() and not (tmp_path / "none").exists()
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    assert database_state(shard_url(used, 0)) == {}
    assert inkpen.shards.read_descriptor(other_count).shards == 4
    with pytest.raises(UsageError, match="checkpoint_lifetime must be"):
        inkpen.pipeline.reshard(spark, source, empty_dest, shards=2, checkpoint_lifetime=5)
    assert load_id_of(source, empty_dest, 2) == load_id_of(
        f"file://{tmp_path}/db/", str(tmp_path / "x" / ".." / "fresh"), 2
    )  # one reshard whatever the spelling of its locations


def test_the_command_reshards_and_refuses_before_starting_spark(tmp_path: Path) -> None:
    source, dest = str(tmp_path / "db"), str(tmp_path / "set")
    with inkpen.open(source) as book:
        write(book, 60, "c")
    model = database_state(source)
    refused = inkpen_command("reshard", source, source, "--shards", "2")
    assert refused.code == 2 and "onto itself" in refused.stderr, refused.explain()
    refused = inkpen_command("reshard", source, dest, "--shards", "0")
    assert refused.code == 2 and "whole number from 1 to 4096" in refused.stderr
    assert "Spark" not in refused.stderr and not Path(dest).exists()
    ran = inkpen_command("reshard", source, dest, "--shards", "2", "--master", "local[2]", "--json")
    assert ran.code == 0, ran.explain()
    report = json.loads(ran.out)
    assert report["objects"] == len(model) and report["committed"] == [0, 1]
    assert data_set_state(dest, 2) == model
