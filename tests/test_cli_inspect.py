"""The commands that only look: info, lsm, manifest, ls, get, checkpoint, verify, on local and S3.

One database per store kind serves every test here: a writer filled it with tiny files (several
ledger levels, many journal files) and then stopped as a crash would, leaving unrolled segments
and its writer checkpoint behind. Each command runs as a separate process.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from inkpen.manifest.model import KIND_WRITER
from support.cli import (
    BINARY_KEY,
    BINARY_VALUE,
    CITIES,
    error_line,
    fails,
    latest_manifest,
    ok,
    populate,
)


class Db:
    """The shared database: its URL and what it holds."""

    def __init__(self, url: str, model: dict[bytes, bytes]) -> None:
        self.url = url
        self.model = model


@pytest.fixture(scope="module")
def dbs() -> dict[str, Db]:
    """The module's databases by store kind, each built by the first test that asks for it."""
    return {}


@pytest.fixture
def db(
    durable_kind: str,
    dbs: dict[str, Db],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Db:
    """The database of this run's kind, shared by every test of the module."""
    if durable_kind not in dbs:
        if durable_kind == "local":
            url = str(tmp_path_factory.mktemp("cli-inspect") / "db")
        else:
            endpoint = request.getfixturevalue("seaweed").endpoint
            bucket = request.getfixturevalue("seaweed_bucket")
            url = f"s3://{bucket}/cli-inspect-{uuid.uuid4().hex[:8]}?endpoint={endpoint}"
        dbs[durable_kind] = Db(url, populate(url, crash=True))
    return dbs[durable_kind]


def test_info_reports_the_latest_manifest(db: Db) -> None:
    figures = json.loads(ok("info", db.url, "--json").out)
    manifest_id, manifest = latest_manifest(db.url)
    assert figures["manifest_id"] >= manifest_id - 2  # reader checkpoints of other tests
    assert figures["ledger"]["files"] == manifest.sst_count() > 1
    assert len(figures["ledger"]["levels"]) == len(manifest.ledger.levels) > 1
    assert figures["journal"]["files"] == len(manifest.journal.files) > 1
    assert figures["journal"]["segments"] >= 1, "the crashed writer left segments unrolled"
    assert figures["writer_epoch"] == manifest.writer_epoch >= 1
    kinds = {cp["kind"] for cp in figures["checkpoints"] if cp["live"]}
    assert KIND_WRITER in kinds, "the crashed writer's checkpoint is still there"

    text = ok("info", db.url).out
    assert f"epochs        writer {manifest.writer_epoch}" in text
    assert "L1" in text and "segments      " in text
    assert re.search(r"^\s+\S{36}\s+writer\s", text, re.MULTILINE), text


def test_lsm_draws_the_latest_manifest(db: Db) -> None:
    before_id, _ = latest_manifest(db.url)
    found = json.loads(ok("lsm", db.url, "--json").out)
    manifest_id, manifest = latest_manifest(db.url)
    assert found["manifest_id"] == manifest_id == before_id, "lsm wrote a manifest"
    assert [len(level["ssts"]) for level in found["levels"]] == [
        len(level) for level in manifest.ledger.levels
    ]
    files = found["journal"]["file_list"]
    assert [f["name"] for f in files] == [f.name for f in manifest.journal.files]
    assert all(f["live_bytes"] + f["dead_bytes"] == f["size"] for f in files), "sampled each file"
    assert found["journal"]["segments"] >= 1
    assert found["writer_epoch"] == manifest.writer_epoch
    assert KIND_WRITER in {cp["kind"] for cp in found["checkpoints"]}
    text = ok("lsm", db.url).out
    assert "L1 " in text and "journal       " in text


def test_manifest_prints_versions_as_text_and_json(db: Db) -> None:
    ids = [int(line) for line in ok("manifest", db.url, "--list").lines]
    assert ids == sorted(ids) and ids
    document = json.loads(ok("manifest", db.url, "--json").out)
    assert document["id"] >= ids[-1]
    _, manifest = latest_manifest(db.url)
    names = {s["name"] for level in document["ledger"]["levels"] for s in level}
    assert names == {s.name for s in manifest.ledger.ssts()}
    first_sst = document["ledger"]["levels"][-1][0]
    assert bytes.fromhex(first_sst["first_key"])[:1] in (b"i", b"o")  # bytes shown as hex

    older = json.loads(ok("manifest", db.url, "--id", str(ids[0]), "--json").out)
    assert older["id"] == ids[0]
    text = ok("manifest", db.url).out
    assert "ledger: persisted SQN" in text and "object users/user" in text

    missing = fails(1, "manifest", db.url, "--id", "99999999")
    assert "manifest 99999999 does not exist" in error_line(missing)
    assert "--list" in error_line(missing)


def test_ls_lists_buckets_keys_heads_and_index_entries(db: Db) -> None:
    assert ok("ls", db.url).lines == ["files", "users"]
    keys = ok("ls", db.url, "users").lines
    assert [k.encode() for k in keys] == sorted(db.model)
    assert "user0007" not in keys
    ranged = ok("ls", db.url, "users", "--start", "user0005", "--end", "user0010").lines
    assert ranged == ["user0005", "user0006", "user0008", "user0009", "user0010"]
    assert ok("ls", db.url, "users", "--limit", "3").lines == ["user0000", "user0001", "user0002"]

    long_lines = ok("ls", db.url, "users", "-l", "--start", "user0012", "--end", "user0012").lines
    (line,) = long_lines
    size, _sqn, *_, key = line.split()
    assert key == "user0012" and int(size) == len(db.model[b"user0012"])

    oslo = ok("ls", db.url, "users", "--index", "city_bin", "--start", "Oslo", "--end", "Oslo")
    expected = [f"Oslo\t{k.decode()}" for k in sorted(db.model) if int(k[4:]) % 3 == 0]
    assert oslo.lines == expected
    every = ok("ls", db.url, "users", "--index", "city_bin").lines
    assert len(every) == len(db.model)
    assert {line.split("\t")[0] for line in every} == set(CITIES)

    assert ok("ls", db.url, "files").lines == ["hex:" + BINARY_KEY.hex()]


def test_get_prints_values_and_heads(db: Db) -> None:
    assert ok("get", db.url, "users", "user0042").stdout == db.model[b"user0042"]
    assert ok("get", db.url, "files", "hex:" + BINARY_KEY.hex()).stdout == BINARY_VALUE
    head = ok("get", db.url, "users", "user0042", "--head").out
    assert f"size           {len(db.model[b'user0042'])}" in head
    assert "sqn            43" in head

    gone = fails(1, "get", db.url, "users", "user0007")
    assert error_line(gone) == f"Error: no object users/user0007 in {db.url}"
    fails(1, "get", db.url, "users", "user0007", "--head")


def test_get_writes_the_value_to_a_file(db: Db, tmp_path: Path) -> None:
    target = tmp_path / "value.bin"
    ran = ok("get", db.url, "files", "hex:" + BINARY_KEY.hex(), "-o", str(target))
    assert ran.stdout == b""
    assert target.read_bytes() == BINARY_VALUE


def test_checkpoint_create_list_read_refresh_delete(db: Db) -> None:
    made = ok("checkpoint", "create", db.url, "--name", "export", "--lifetime", "2h")
    (checkpoint_id,) = made.lines
    assert "pins manifest" in made.stderr and "expires in 1h 59m" in made.stderr

    listed = json.loads(ok("checkpoint", "list", db.url, "--json").out)
    mine = next(cp for cp in listed if cp["id"] == checkpoint_id)
    assert mine["name"] == "export" and mine["live"]
    assert 7100 < mine["expire_time"] - mine["create_time"] <= 7200
    assert checkpoint_id in ok("checkpoint", "list", db.url).out

    at = ok("ls", db.url, "users", "--checkpoint", checkpoint_id, "--limit", "2")
    assert at.lines == ["user0000", "user0001"]

    refreshed = ok("checkpoint", "refresh", db.url, checkpoint_id, "--lifetime", "never")
    assert refreshed.out.strip() == f"checkpoint {checkpoint_id} expires never"
    listed = json.loads(ok("checkpoint", "list", db.url, "--json").out)
    assert next(cp for cp in listed if cp["id"] == checkpoint_id)["expire_time"] is None

    ok("checkpoint", "delete", db.url, checkpoint_id)
    assert checkpoint_id not in ok("checkpoint", "list", db.url, "--all").out
    again = fails(1, "checkpoint", "delete", db.url, checkpoint_id)
    assert checkpoint_id in error_line(again)
    fails(1, "ls", db.url, "users", "--checkpoint", checkpoint_id)
    fails(2, "checkpoint", "create", db.url, "--lifetime", "soon")


def test_verify_finds_every_object_intact(db: Db) -> None:
    ran = ok("verify", db.url)
    assert ran.lines[-1].startswith("result: all ") and ran.lines[-1].endswith(" objects intact")
    assert "verify.started" in ran.stderr and "verify.finished" in ran.stderr

    report = json.loads(ok("verify", db.url, "--json").out)
    _, manifest = latest_manifest(db.url)
    checked = report["checked"]
    assert report["ok"] and report["problems"] == []
    assert checked["sst"]["objects"] == checked["sst"]["ok"] >= manifest.sst_count()
    assert checked["sst"]["units"] >= checked["sst"]["objects"]  # blocks
    assert checked["journal file"]["ok"] >= len(manifest.journal.files)
    assert checked["segment"]["ok"] >= 1
    assert checked["segment"]["units"] >= 1  # the crashed writer's unrolled records
    assert checked["manifest"]["ok"] >= 2
