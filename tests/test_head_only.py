"""head_only stores (Leveled's head_only mode): mput batches, lookups and folds against a model,
journal trimming (on request and on its own), recovery after SIGKILL, and modes that cannot be
switched."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import inkpen
from inkpen import TicTacTree
from inkpen.errors import UsageError
from inkpen.formats.keys import content_hash
from inkpen.manifest.model import Manifest, VersionedManifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.cli import inkpen_command, ok
from support.engine import TINY
from support.head_only_writer import apply, batch
from support.waiting import wait_until

WRITER = Path(__file__).parent / "support" / "head_only_writer.py"
Model = dict[tuple[str, str, str], bytes]


def random_batches(rng: random.Random, count: int) -> list[list[tuple[Any, ...]]]:
    batches = []
    for _ in range(count):
        specs: list[tuple[Any, ...]] = []
        for _ in range(rng.randint(1, 8)):
            bucket, key, subkey = (
                rng.choice("ab"),
                f"k{rng.randrange(25):02d}",
                rng.choice(["", "x", "y"]),
            )
            if rng.random() < 0.3:
                specs.append(("remove", bucket, key, subkey, None))
            else:
                specs.append(("add", bucket, key, subkey, rng.randbytes(rng.randrange(0, 40))))
        batches.append(specs)
    return batches


def applied(model: Model, specs: list[tuple[Any, ...]]) -> None:
    for op, bucket, key, subkey, value in specs:
        if op == "remove":
            model.pop((bucket, key, subkey), None)
        else:
            model[(bucket, key, subkey)] = value


def folded(reader: inkpen.Bookie | inkpen.Reader | inkpen.Snapshot) -> Model:
    found: Model = {}
    for bucket, key, head in reader.heads():
        assert head.value is not None
        assert head.content_hash == content_hash(head.value) and head.size == len(head.value)
        found[(bucket.decode(), key.decode(), head.subkey.decode())] = head.value
    return found


def model_tree(model: Model) -> TicTacTree:
    tree = TicTacTree()
    for (bucket, key, subkey), value in model.items():
        tree.add(bucket, key, content_hash(value), subkey)
    return tree


def check_lookups(book: inkpen.Bookie | inkpen.Reader, model: Model) -> None:
    for bucket in "ab":
        for k in range(25):
            for subkey in ("", "x", "y"):
                found = book.head_only_get(bucket, f"k{k:02d}", subkey)
                assert found == model.get((bucket, f"k{k:02d}", subkey))


def manifest_at(url: str, manifest_id: int) -> Manifest:
    store = open_store(url)
    try:
        return ManifestStore(store).read(manifest_id)
    finally:
        store.close()


def manifest_of(url: str) -> VersionedManifest:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return latest
    finally:
        store.close()


def test_mput_lookups_folds_and_trees_match_a_model(store_url: str) -> None:
    rng = random.Random(19)
    model: Model = {}
    with inkpen.open(store_url, head_only="with_lookup", **TINY) as book:
        for specs in random_batches(rng, 60):
            book.mput(specs)
            applied(model, specs)
        check_lookups(book, model)
        assert folded(book) == model
        assert book.tictac_tree() == model_tree(model)
        only_a = {k: v for k, v in model.items() if k[0] == "a"}
        assert book.tictac_tree("a") == model_tree(only_a)
        with book.snapshot() as snap:
            book.mput([("add", "a", "after", "", b"later")])
            assert folded(snap) == model
        applied(model, [("add", "a", "after", "", b"later")])
        book.checkpoint()
    with inkpen.open_reader(store_url) as reader:
        assert folded(reader) == model
        check_lookups(reader, model)
    with inkpen.open(store_url, head_only="with_lookup", **TINY) as book:
        check_lookups(book, model)
        assert book.tictac_tree() == model_tree(model)


def test_no_lookup_mode_folds_but_refuses_lookups(store_url: str) -> None:
    with inkpen.open(store_url, head_only="no_lookup", **TINY) as book:
        book.mput([("add", "b", "k", "s", b"v"), ("add", "b", "k2", "", b"w")])
        assert folded(book) == {("b", "k", "s"): b"v", ("b", "k2", ""): b"w"}
        with pytest.raises(UsageError, match="with_lookup"):
            book.head_only_get("b", "k", "s")


def test_bad_specs_write_nothing(store_url: str) -> None:
    with inkpen.open(store_url, head_only="with_lookup", **TINY) as book:
        book.mput([("add", "b", "k", "", b"v")])
        for specs, match in (
            ([("add", "b", "k2", "", b"v"), ("put", "b", "k3", "", b"v")], "must be"),
            ([("add", "b", "k2", "", b"v"), ("add", "", "k3", "", b"v")], "bucket"),
            ([("add", "b", "k2", "", "text")], "bytes"),
            ([("add", "b", "k2", "", b"x" * 70_000)], "at most"),
            ([("add", "b", "k2")], "5-tuple"),
            ("add", "sequence"),
        ):
            with pytest.raises(UsageError, match=match):
                book.mput(specs)  # type: ignore[arg-type]
        assert folded(book) == {("b", "k", ""): b"v"}
        refused: tuple[Callable[[], None], ...] = (
            lambda: book.put("b", "k", b"v"),
            lambda: book.delete("b", "k"),
        )
        for call in refused:
            with pytest.raises(UsageError, match="mput"):
                call()


def test_switching_modes_is_refused_and_changes_nothing(
    make_store_url: Callable[[str], str],
) -> None:
    normal, head = make_store_url("local"), make_store_url("local")
    with inkpen.open(normal) as book:
        book.put("b", "k", b"v")
        with pytest.raises(UsageError, match="mput writes head-only"):
            book.mput([("add", "b", "k", "", b"v")])
        with pytest.raises(UsageError, match="compact_journal"):
            book.trim_journal()
        with pytest.raises(UsageError, match="with_lookup"):
            book.head_only_get("b", "k")
    with inkpen.open(head, head_only="no_lookup") as book:
        book.mput([("add", "b", "k", "", b"v")])
    cases = [
        (normal, {"head_only": "with_lookup"}, "not a head-only store"),
        (head, {}, "head_only='no_lookup'"),
        (head, {"head_only": "with_lookup"}, "switching modes is refused"),
    ]
    for url, options, match in cases:
        before = manifest_of(url)
        with pytest.raises(UsageError, match=match):
            inkpen.open(url, **options)
        after = manifest_of(url)
        assert after.id == before.id and after.manifest == before.manifest
    with pytest.raises(UsageError, match="head_only"):
        inkpen.open(make_store_url("local"), head_only="yes")
    with inkpen.open(normal) as book:
        assert book.get("b", "k") == b"v"
    with inkpen.open(head, head_only="no_lookup") as book:
        assert folded(book) == {("b", "k", ""): b"v"}


def test_trim_journal_drops_persisted_files_and_keeps_the_rest(store_url: str) -> None:
    model: Model = {}
    options = {**TINY, "roll_segments": 2}
    book = inkpen.open(store_url, head_only="with_lookup", **options)
    try:
        for specs in random_batches(random.Random(5), 40):
            book.mput(specs)
            applied(model, specs)
        book.flush()
        files_before = manifest_of(store_url).manifest.journal.files
        assert files_before, "rolls wrote journal files"
        report = book.trim_journal()
        kept_above, trimmed_at = report.kept_above, report.manifest_id
        assert kept_above is not None and trimmed_at is not None
        trimmed = manifest_at(store_url, trimmed_at)
        assert kept_above <= trimmed.ledger.persisted_sqn
        # The ledger persists more and rolls add files while the trim runs, so judge the trim by
        # the SQN it kept above: it drops every file listed here wholly at or below that SQN and
        # keeps the others; a file at or below it in the trim's manifest came from a later roll.
        before = {f.name for f in files_before}
        assert set(report.compacted) >= {f.name for f in files_before if f.max_sqn <= kept_above}
        assert report.compacted and report.written == ()
        assert not {f.name for f in trimmed.journal.files if f.max_sqn <= kept_above} & before
        assert not set(report.compacted) & {f.name for f in trimmed.journal.files}
        check_lookups(book, model)
        # Changes after the trim live only in the journal until they are persisted: a crash now
        # must keep them.
        for specs in random_batches(random.Random(6), 10):
            book.mput(specs)
            applied(model, specs)
    finally:
        book.abandon()
    with inkpen.open(store_url, head_only="with_lookup", **options) as book:
        check_lookups(book, model)
        assert folded(book) == model


def test_the_journal_is_trimmed_on_its_own(store_url: str) -> None:
    options = {**TINY, "roll_segments": 2, "compaction_interval": 0.05}
    model: Model = {}
    with inkpen.open(store_url, head_only="with_lookup", **options) as book:
        for specs in random_batches(random.Random(7), 30):
            book.mput(specs)
            applied(model, specs)
        book.flush()
        persisted = manifest_of(store_url).manifest.ledger.persisted_sqn
        wait_until(
            lambda: (
                not any(
                    f.max_sqn <= persisted for f in manifest_of(store_url).manifest.journal.files
                )
            ),
            "the scheduled trim drops every persisted journal file",
        )
        check_lookups(book, model)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recovery_after_sigkill_keeps_every_acknowledged_batch_whole(
    seed: int, make_store_url: Callable[[str], str]
) -> None:
    url = make_store_url("local")
    kill_after = random.Random(seed).randint(20, 120)
    child = subprocess.Popen(
        [sys.executable, str(WRITER), url, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    acked = -1
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("ack "):
                acked = int(line.split()[1])
                if acked + 1 >= kill_after:
                    break
        child.send_signal(signal.SIGKILL)
        for line in child.stdout.read().splitlines():
            if line.startswith("ack "):
                acked = int(line.split()[1])
    finally:
        child.kill()
        child.wait(timeout=30)
    assert acked + 1 >= kill_after, "the writer died before the kill"
    states = []
    model: dict[tuple[str, str], bytes] = {}
    for n in range(acked + 2):  # every acknowledged batch, and perhaps the one in flight
        apply(model, batch(seed, n))
        if n >= acked:
            states.append(dict(model))
    with inkpen.open(url, head_only="with_lookup") as book:
        found = {(k.decode(), h.subkey.decode()): h.value for _, k, h in book.heads("h")}
        assert found in states, "an acknowledged batch is missing, or a batch is in part"
        for (key, subkey), value in found.items():
            assert book.head_only_get("h", key, subkey) == value


def test_copies_keep_the_mode_and_diff_compares_head_only_objects(
    durable_kind: str, make_store_url: Callable[[str], str]
) -> None:
    url, backup, restored = (
        make_store_url(durable_kind),
        make_store_url(durable_kind),
        make_store_url(durable_kind),
    )
    model: Model = {}
    with inkpen.open(url, head_only="with_lookup", **TINY) as book:
        for specs in random_batches(random.Random(11), 30):
            book.mput(specs)
            applied(model, specs)
        book.flush()
        book.trim_journal()
        hot = make_store_url(durable_kind)
        book.hot_backup()(hot)
    ok("backup", url, backup, "--no-fence")
    ok("restore", backup, restored)
    for copy in (backup, restored, hot):
        assert manifest_of(copy).manifest.head_only == "with_lookup"
        assert ok("diff", url, copy).lines == []
    with inkpen.open(restored, head_only="with_lookup") as book:
        assert folded(book) == model
        book.mput([("add", "a", "k00", "z", b"only in the restore")])
    ran = inkpen_command("diff", url, restored)
    assert ran.code == 1 and ran.lines == ["only-in-b\ta\tk00#z"], ran.explain()


@pytest.mark.parametrize("mode", ["with_lookup", "no_lookup"])
def test_object_reads_are_refused_in_a_head_only_store(store_url: str, mode: str) -> None:
    with inkpen.open(store_url, head_only=mode, **TINY) as book:
        book.mput([("add", "b", "k", "", b"v")])
        book.checkpoint()
        calls: dict[str, Callable[[Any], Any]] = {
            "get": lambda reads: reads.get("b", "k"),
            "get_many": lambda reads: reads.get_many("b", ["k"]),
            "objects": lambda reads: list(reads.objects("b")),
        }
        with book.snapshot() as snap, inkpen.open_reader(store_url) as reader:
            for handle in (book, snap, reader):
                for what, call in calls.items():
                    with pytest.raises(
                        UsageError, match=rf"^{what} is not available.*head_only_get"
                    ):
                        call(handle)
        assert folded(book) == {("b", "k", ""): b"v"}
