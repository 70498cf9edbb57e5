"""The manifest model and key layout: invariants, document round trips, lenient reading."""

from __future__ import annotations

import pickle
import re
import time

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.errors import CorruptionError, UsageError
from inkpen.formats.manifest_codec import encode_manifest
from inkpen.manifest import paths
from inkpen.manifest.model import (
    Checkpoint,
    CloneParent,
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
    decode,
    encode,
)


def sst(name: str, first: bytes, last: bytes, *, root: str | None = None) -> SstDescriptor:
    return SstDescriptor(name, first, last, 1, 5, 100, 3, 1, root=root)


def jfile(name: str, low: int, high: int, **kw: object) -> JournalFileDescriptor:
    return JournalFileDescriptor(name, low, high, 50, high - low + 1, **kw)  # type: ignore[arg-type]


# -- strategies ----------------------------------------------------------------------------------

keys = st.binary(min_size=1, max_size=8)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    roots = st.sampled_from([None, "memory://parent", "s3://bucket/db"])
    level0 = tuple(
        SstDescriptor(
            f"ledger/{i:025x}.sst",
            a,
            max(a, b),
            1,
            9,
            10,
            2,
            0,
            draw(st.integers(0, 5)),
            draw(roots),
        )
        for i, (a, b) in enumerate(draw(st.lists(st.tuples(keys, keys), max_size=4)))
    )
    bounds = sorted(set(draw(st.lists(keys, max_size=8))))
    deeper = tuple(
        SstDescriptor(f"ledger/{100 + i:025x}.sst", k, k, 1, 1, 10, 1, 0)
        for i, k in enumerate(bounds)
    )
    sqns = sorted(set(draw(st.lists(st.integers(1, 10_000), max_size=6))))
    files = tuple(
        JournalFileDescriptor(
            f"journal/compacted/{i:025x}.jnl",
            s,
            s,
            10,
            1,
            in_ledger=draw(st.booleans()),
            root=draw(roots),
        )
        for i, s in enumerate(sqns)
    )
    rolled = draw(st.integers(0, 50))
    checkpoints = tuple(
        Checkpoint(
            f"cp-{i}",
            draw(st.integers(1, 100)),
            draw(st.floats(0, 2e9)),
            draw(st.none() | st.floats(0, 2e9)),
            draw(st.none() | st.text(max_size=5)),
            draw(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)),
        )
        for i in range(draw(st.integers(0, 3)))
    )
    return Manifest(
        writer_epoch=draw(st.integers(0, 2**40)),
        compactor_epoch=draw(st.integers(0, 9)),
        journal=JournalState(files, rolled, rolled + 1 + draw(st.integers(0, 9))),
        ledger=LedgerState((level0, deeper), draw(st.integers(0, 2**40))),
        checkpoints=checkpoints,
        parent=draw(st.none() | st.just(CloneParent("memory://parent", "cp-p"))),
        initialized=draw(st.booleans()),
        destroyed_at=draw(st.none() | st.floats(0, 2e9)),
    )


@settings(max_examples=150, deadline=None)
@given(manifests())
def test_encode_decode_round_trip(manifest: Manifest) -> None:
    assert decode(encode(manifest), "manifest/x") == manifest


@settings(max_examples=50, deadline=None)
@given(manifests())
def test_values_pickle(manifest: Manifest) -> None:
    assert pickle.loads(pickle.dumps(manifest)) == manifest


def test_referenced_objects_and_counts() -> None:
    ledger = LedgerState(((sst("ledger/a.sst", b"a", b"z"),), (sst("ledger/b.sst", b"a", b"c"),)))
    journal = JournalState((jfile("journal/compacted/j.jnl", 1, 10, root="memory://p"),), 3, 5)
    manifest = Manifest(journal=journal, ledger=ledger)
    assert manifest.referenced_objects() == {
        (None, "ledger/a.sst"),
        (None, "ledger/b.sst"),
        ("memory://p", "journal/compacted/j.jnl"),
    }
    assert manifest.sst_count() == 2
    assert list(journal.unrolled_segments()) == [4]


def test_checkpoint_liveness_and_manifest_questions() -> None:
    now = time.time()
    forever = Checkpoint("a", 1, now, None, metadata={"kind": "writer", "epoch": "2"})
    short = Checkpoint("b", 1, now, now + 10, metadata={"kind": "reader"})
    manifest = Manifest(checkpoints=(forever, short))
    assert forever.is_live(now + 1e9)
    assert short.is_live(now + 9.9) and not short.is_live(now + 10)
    assert manifest.live_checkpoints(now + 11) == (forever,)
    assert manifest.checkpoint("b") == short and manifest.checkpoint("zz") is None
    assert manifest.without_checkpoints_of_kind("writer").checkpoints == (short,)
    assert manifest.without_checkpoint("b").checkpoints == (forever,)
    replaced = manifest.with_checkpoint(Checkpoint("b", 2, now))
    assert [cp.manifest_id for cp in replaced.checkpoints] == [1, 2]
    assert forever.kind == "writer"


def test_checkpoint_metadata_is_read_only_and_copied() -> None:
    source = {"kind": "reader"}
    cp = Checkpoint("a", 1, 0.0, metadata=source)
    source["kind"] = "writer"
    assert cp.kind == "reader"
    with pytest.raises(TypeError):
        cp.metadata["kind"] = "clone"  # type: ignore[index]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: sst("x", b"b", b"a"), "first_key sorts after last_key"),
        (lambda: SstDescriptor("x", b"a", b"b", 5, 4, 1, 1, 0), "min_sqn 5 > max_sqn 4"),
        (lambda: SstDescriptor("x", b"a", b"b", 1, 4, -1, 1, 0), "size must be an int"),
        (lambda: SstDescriptor("", b"a", b"b", 1, 4, 1, 1, 0), "non-empty"),
        (lambda: jfile("j", 5, 4), "min_sqn 5 > max_sqn 4"),
        (
            lambda: JournalState((jfile("a", 1, 10), jfile("b", 10, 20))),
            "out of order or overlap",
        ),
        (lambda: JournalState((), 5, 5), "next_segment 5 must be above last_rolled_segment 5"),
        (lambda: JournalState((), 0, 0), "next_segment must be an int >= 1"),
        (
            lambda: LedgerState(((), (sst("a", b"a", b"m"), sst("b", b"m", b"z")))),
            "overlap or are out of order",
        ),
        (lambda: LedgerState((), -1), "persisted_sqn"),
        (lambda: Checkpoint("a", 0, 0.0), "manifest_id must be an int >= 1"),
        (lambda: Checkpoint("a", 1, float("nan")), "finite number"),
        (lambda: Checkpoint("a", 1, 0.0, metadata={"k": 1}), "str to str"),  # type: ignore[dict-item]
        (lambda: Manifest(format_version=2), "format_version must be 1..1"),
        (lambda: Manifest(writer_epoch=-1), "writer_epoch"),
        (
            lambda: Manifest(checkpoints=(Checkpoint("a", 1, 0.0), Checkpoint("a", 2, 0.0))),
            "appears twice",
        ),
        (lambda: CloneParent("", "x"), "store URL"),
    ],
)
def test_invalid_values_are_refused(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match=re.escape(message)):
        build()


def test_l0_may_overlap() -> None:
    level0 = (sst("a", b"a", b"z"), sst("b", b"c", b"d"))
    assert LedgerState((level0,)).levels[0] == level0


def test_decode_ignores_unknown_fields_and_defaults_missing_ones() -> None:
    document = {
        "writer_epoch": 7,
        "future_field": {"anything": [1, 2]},
        "journal": {"last_rolled_segment": 3, "next_segment": 9, "future": True},
        "checkpoints": [{"id": "c", "manifest_id": 2, "create_time": 1.0, "extra": 1}],
    }
    manifest = decode(encode_manifest(document), "manifest/x")
    assert manifest.writer_epoch == 7
    assert manifest.journal == JournalState((), 3, 9)
    assert manifest.ledger == LedgerState()
    assert manifest.checkpoints == (Checkpoint("c", 2, 1.0),)
    assert manifest.initialized and manifest.destroyed_at is None and manifest.parent is None


@pytest.mark.parametrize(
    "document",
    [
        {"journal": {"last_rolled_segment": 5, "next_segment": 2}},
        {"checkpoints": [{"manifest_id": 2}]},
        {"ledger": {"levels": [[{"name": "x"}]]}},
        {"journal": [1, 2]},
        {"writer_epoch": "seven"},
        {"writer_compaction": "sideways"},
    ],
)
def test_decode_refuses_invalid_documents(document: dict[str, object]) -> None:
    with pytest.raises(CorruptionError, match="manifest document is invalid"):
        decode(encode_manifest(document), "manifest/00000000000000000003.manifest")


def test_decode_refuses_damaged_bytes() -> None:
    data = bytearray(encode(Manifest(writer_epoch=3)))
    data[12] ^= 0xFF
    with pytest.raises(CorruptionError, match="checksum"):
        decode(bytes(data), "manifest/x")
    raw = msgpack.packb({"writer_epoch": 1})
    with pytest.raises(CorruptionError):
        decode(raw, "manifest/x")


# -- paths ---------------------------------------------------------------------------------------


def test_keys_and_parsers() -> None:
    assert paths.manifest_key(42) == "manifest/00000000000000000042.manifest"
    assert paths.segment_key(187) == "journal/00000000000000000187.jnl"
    assert paths.parse_manifest_key(paths.manifest_key(42)) == 42
    assert paths.parse_segment_key(paths.segment_key(187)) == 187
    assert paths.parse_manifest_key("manifest/42.manifest") is None
    assert paths.parse_segment_key("journal/compacted/00000000000000000001.jnl") is None
    assert paths.parse_segment_key(paths.manifest_key(1)) is None
    file_id = paths.new_file_id(now=1_700_000_000.123)
    assert re.fullmatch(r"[0-9a-f]{25}", file_id)
    assert paths.file_id_time(file_id) == pytest.approx(1_700_000_000.123, abs=0.001)
    assert paths.sst_key(file_id) == f"ledger/{file_id}.sst"
    assert paths.journal_file_key(file_id) == f"journal/compacted/{file_id}.jnl"
    assert paths.is_sst_key(paths.sst_key(file_id))
    assert paths.is_journal_file_key(paths.journal_file_key(file_id))
    assert not paths.is_sst_key(paths.journal_file_key(file_id))


def test_file_ids_sort_by_time_and_do_not_collide() -> None:
    ids = [paths.new_file_id(now=1_700_000_000 + i) for i in range(50)]
    assert ids == sorted(ids)
    assert len({paths.new_file_id(now=1.0) for _ in range(1000)}) == 1000


@pytest.mark.parametrize("bad", [0, -1, 10**20, True, "3", 1.5])
def test_bad_ids_are_refused(bad: object) -> None:
    with pytest.raises(UsageError, match="from 1 to"):
        paths.manifest_key(bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="from 1 to"):
        paths.segment_key(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "ABC", "0" * 24, "../etc", 5])
def test_bad_file_ids_are_refused(bad: object) -> None:
    with pytest.raises(UsageError, match="25 lower-case hex digits"):
        paths.sst_key(bad)  # type: ignore[arg-type]


def test_journal_state_reads_the_key_written_before_segments_rolled() -> None:
    """Manifests written before "fold" was renamed "roll" name the field ``last_folded_segment``."""
    old = {"files": [], "last_folded_segment": 7, "next_segment": 9}
    state = JournalState.from_document(old)
    assert state.last_rolled_segment == 7
    assert state.to_document()["last_rolled_segment"] == 7
    assert "last_folded_segment" not in state.to_document()


def test_writer_compaction_defaults_to_internal_and_round_trips() -> None:
    """Manifests written before the writer's compaction mode was recorded read as internal."""
    old = decode(encode_manifest({"writer_epoch": 4}), "manifest/x")
    assert old.writer_compaction == "internal"
    external = Manifest(writer_epoch=4, writer_compaction="external")
    assert decode(encode(external), "manifest/x").writer_compaction == "external"
    assert external.to_document()["writer_compaction"] == "external"
    with pytest.raises(UsageError, match="writer_compaction"):
        Manifest(writer_compaction="none")


def test_feed_cursor_owner_and_advance_time_round_trip_and_old_documents_decode() -> None:
    from inkpen.manifest.model import FeedCursor

    cursors = (
        FeedCursor("new", 7, 1.0, 4.0, 3.0, owner="spark stream on h", advance_time=1.0),
        FeedCursor("plain", 0, 2.0),
    )
    manifest = Manifest(feed_cursors=cursors)
    assert decode(encode(manifest), "manifest/x").feed_cursors == cursors
    # a manifest written before cursors recorded an owner and their last advance
    document = {
        "feed_cursors": [
            {"name": "old", "sqn": 5, "create_time": 1.0, "expire_time": None, "lifetime": None}
        ]
    }
    (old,) = decode(encode_manifest(document), "manifest/x").feed_cursors
    assert old == FeedCursor("old", 5, 1.0)
    assert old.owner is None and old.advance_time is None
    with pytest.raises(CorruptionError, match="manifest document is invalid"):
        bad = {"feed_cursors": [{"name": "x", "sqn": 1, "create_time": 1.0, "owner": 5}]}
        decode(encode_manifest(bad), "manifest/x")
