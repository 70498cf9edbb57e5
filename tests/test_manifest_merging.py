"""The pure manifest changes the writer and the compactor commit (manifest/merging.py): each is
a delta applied to whatever manifest is latest, so neither role's commit undoes the other's."""

from __future__ import annotations

import dataclasses

import pytest

from inkpen.errors import FencedError
from inkpen.manifest.levels import LevelError
from inkpen.manifest.merging import (
    ManifestConflict,
    add_l0,
    check_compactor,
    replace_journal_files,
    replace_ssts,
)
from inkpen.manifest.model import (
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
)


def sst(name: str, first: str, last: str, sqn: int = 1) -> SstDescriptor:
    return SstDescriptor(
        name=f"ledger/{name}.sst",
        first_key=first.encode(),
        last_key=last.encode(),
        min_sqn=sqn,
        max_sqn=sqn,
        size=100,
        entry_count=1,
        tombstone_count=0,
    )


def jnl(name: str, lo: int, hi: int) -> JournalFileDescriptor:
    return JournalFileDescriptor(
        name=f"journal/compacted/{name}.jnl", min_sqn=lo, max_sqn=hi, size=10, entry_count=1
    )


def names(manifest: Manifest) -> list[list[str]]:
    return [[d.name.split("/")[-1] for d in level] for level in manifest.ledger.levels]


def test_writer_l0_lands_on_top_of_a_compactor_merge() -> None:
    base = Manifest(ledger=LedgerState(levels=((sst("a", "a", "m"), sst("b", "c", "z")),)))
    merged = replace_ssts(base, ["ledger/a.sst", "ledger/b.sst"], 1, [sst("c", "a", "z")])
    assert names(merged) == [[], ["c.sst"]]
    written = add_l0(merged, sst("d", "b", "d", sqn=9), persisted_sqn=9)
    assert names(written) == [["d.sst"], ["c.sst"]]
    assert written.ledger.persisted_sqn == 9
    assert add_l0(written, sst("e", "x", "y"), persisted_sqn=3).ledger.persisted_sqn == 9


def test_compactor_merge_keeps_l0_files_the_writer_added_meanwhile() -> None:
    base = Manifest(ledger=LedgerState(levels=((sst("a", "a", "m"),),)))
    newer = add_l0(base, sst("n", "a", "b", sqn=5), persisted_sqn=5)
    merged = replace_ssts(newer, ["ledger/a.sst"], 1, [sst("c", "a", "m")])
    assert names(merged) == [["n.sst"], ["c.sst"]]


def test_a_replaced_file_that_is_gone_is_a_conflict_and_overlap_is_refused() -> None:
    base = Manifest(ledger=LedgerState(levels=((), (sst("a", "a", "m"),))))
    with pytest.raises(ManifestConflict, match=r"ledger/zz\.sst"):
        replace_ssts(base, ["ledger/zz.sst"], 1, [sst("c", "a", "b")])
    with pytest.raises(LevelError, match="overlap"):
        replace_ssts(base, [], 1, [sst("c", "b", "c")])
    emptied = replace_ssts(base, ["ledger/a.sst"], 2, [sst("c", "a", "m")])
    assert names(emptied) == [[], [], ["c.sst"]]


def test_journal_files_are_replaced_by_name_in_sqn_order() -> None:
    base = Manifest(journal=JournalState(files=(jnl("a", 1, 5), jnl("b", 6, 9))))
    rolled = dataclasses.replace(
        base,
        journal=dataclasses.replace(base.journal, files=(*base.journal.files, jnl("r", 10, 12))),
    )
    done = replace_journal_files(rolled, ["journal/compacted/a.jnl"], [jnl("c", 2, 4)])
    assert [d.name.split("/")[-1] for d in done.journal.files] == ["c.jnl", "b.jnl", "r.jnl"]
    with pytest.raises(ManifestConflict):
        replace_journal_files(done, ["journal/compacted/a.jnl"], [])


def test_check_compactor_fences_a_superseded_epoch() -> None:
    check_compactor(Manifest(compactor_epoch=3), 3)
    with pytest.raises(FencedError, match="compactor epoch 4"):
        check_compactor(Manifest(compactor_epoch=4), 3)
