"""Stores written by an earlier inkpen open, read and move to the current layout.

``fixtures/store-v2/db`` was written by inkpen at journal format version 2 (before the journal
left small values to the ledger): 400 changes over 250 keys of a bucket (puts of 1 to 299 bytes
and of 2 KiB, overwrites, deletes, an index entry per put) closed cleanly, then 30 more puts by
a writer that stopped without closing (their segments unrolled, above the persisted SQN).
``model.json`` holds what that inkpen read from it: every object, and the keys an index query
answered. Its ledger entries already hold the small
values, so journal compaction may leave their bodies to the ledger; the unrolled segments are
replayed by the new writer, which rolls them the new way.
"""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import inkpen
from inkpen.formats.journal import FORMAT_VERSION, iter_journal, read_header
from inkpen.manifest import ManifestStore
from inkpen.objectstore import open_store

FIXTURE = Path(__file__).parent / "fixtures" / "store-v2"


def fixture_copy(tmp_path: Path) -> tuple[str, dict[bytes, bytes], list[bytes]]:
    """A copy of the old store (tests never write the fixture), its objects and the keys of
    its index query."""
    url = str(tmp_path / "db")
    shutil.copytree(FIXTURE / "db", url)
    model = json.loads((FIXTURE / "model.json").read_text())
    objects = {k.encode(): bytes.fromhex(v) for k, v in model["objects"].items()}
    return url, objects, [k.encode() for k in model["index_size_int_00000_00099"]]


def journal_files(url: str) -> list[tuple[int, collections.Counter[str]]]:
    """(format version, record kinds) of each journal file the latest manifest names."""
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        found = []
        for descriptor in latest.manifest.journal.files:
            data = store.get(descriptor.name)
            kinds = collections.Counter(e.kind.name for e in iter_journal(data, descriptor.name))
            found.append((read_header(data, descriptor.name).version, kinds))
        return found
    finally:
        store.close()


def check(
    book: inkpen.Bookie | inkpen.Reader, model: dict[bytes, bytes], indexed: list[bytes]
) -> None:
    with book.objects("b") as rows:
        assert {k: v for _, k, v in rows} == model
    keys = sorted(model)
    assert book.get_many("b", keys) == [model[k] for k in keys]
    assert list(book.index_query("b", "size_int", "00000", "00099")) == indexed


def test_a_version_2_store_opens_reads_and_compacts_into_the_new_layout(tmp_path: Path) -> None:
    url, model, indexed = fixture_copy(tmp_path)
    before = journal_files(url)
    assert before and all(version == 2 for version, _ in before)
    with inkpen.open_reader(url) as reader:  # replays the unrolled version 2 segments
        check(reader, model, indexed)
    with inkpen.open(url) as book:
        check(book, model, indexed)
        changes = list(book.changes(gaps="skip"))
        latest = {}
        for change in changes:
            if change.kind == "put":
                assert change.value is not None
                latest[change.key] = change.value
            else:
                latest.pop(change.key, None)
        assert latest == model
        for _ in range(20):  # until no run is worth compacting
            if not book.compact_journal().compacted:
                break
        check(book, model, indexed)
    after = journal_files(url)
    assert all(version in (2, FORMAT_VERSION) for version, _ in after)
    rewritten = [kinds for version, kinds in after if version == FORMAT_VERSION]
    assert rewritten, "compaction and the roll wrote files of the current version"
    # The small values the old ledger held left the journal; the 2 KiB ones stayed in it.
    assert sum(kinds["VALUE_IN_LEDGER"] for kinds in rewritten) > 0
    assert sum(kinds["OBJECT"] for _, kinds in after) >= sum(
        1 for k, v in model.items() if len(v) > 1024
    )
    with inkpen.open(url) as book:
        check(book, model, indexed)
