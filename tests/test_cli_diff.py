"""``inkpen diff``: a database against its backup, restore and clone (equal), and single changes
of each kind, on a local directory and on SeaweedFS; usage errors, trouble and damaged data."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import inkpen
from support.cli import fails, inkpen_command, latest_manifest, ok, populate
from support.engine import TINY

MakeUrl = Callable[[str], str]
Model = dict[tuple[str, str], bytes]


def expected_lines(a: Model, b: Model) -> list[str]:
    """The oracle: what ``inkpen diff`` must print for databases holding ``a`` and ``b``."""
    lines = []
    for bucket, key in sorted(a.keys() | b.keys()):
        if (bucket, key) not in b:
            lines.append(f"only-in-a\t{bucket}\t{key}")
        elif (bucket, key) not in a:
            lines.append(f"only-in-b\t{bucket}\t{key}")
        elif a[(bucket, key)] != b[(bucket, key)]:
            lines.append(f"different\t{bucket}\t{key}")
    return lines


def test_backup_restore_and_clone_equal_their_source(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url, backup, restored, cloned = (make_store_url(durable_kind) for _ in range(4))
    populate(url, crash=True)  # leaves unrolled segments: the readers must see them too
    ok("backup", url, backup, "--no-fence")
    ok("restore", backup, restored)
    ok("clone", url, cloned)
    for other in (backup, restored, cloned):
        ran = ok("diff", url, other)
        assert ran.lines == [], ran.explain()
        assert "diff.started" in ran.stderr and "diff.finished" in ran.stderr
        logged = [line for line in ran.stderr.splitlines() if "event=diff." in line]
        # diff reports phases and counts nothing: no empty total, no count of "steps"
        assert not any(f" {word}=" in line for line in logged for word in ("total", "unit")), (
            ran.stderr
        )
        finished = [line for line in logged if "event=diff.finished" in line]
        assert len(finished) == 1 and " seconds=" in finished[0] and " done=" not in finished[0]
    document = json.loads(ok("diff", restored, url, "--json").out)
    assert document["same"] is True and document["differences"] == []
    assert document["differing_segments"] == 0 and document["heads_read"] == 0


def test_single_changes_of_each_kind(durable_kind: str, make_store_url: MakeUrl) -> None:
    url_a, url_b = make_store_url(durable_kind), make_store_url(durable_kind)
    a: Model = {("users", f"user{i:03d}"): f"profile {i}".encode() for i in range(150)}
    a[("other", "x")] = b"x"
    with inkpen.open(url_a, **TINY) as book:
        for (bucket, key), value in a.items():
            book.put(bucket, key, value)
    ok("backup", url_a, url_b, "--no-fence")
    b = dict(a)
    assert ok("diff", url_a, url_b).lines == []

    def change(url: str, model: Model, bucket: str, key: str, value: bytes | None) -> None:
        with inkpen.open(url, **TINY) as book:
            if value is None:
                book.delete(bucket, key)
                del model[(bucket, key)]
            else:
                book.put(bucket, key, value)
                model[(bucket, key)] = value

    steps = [
        (url_a, a, "users", "new-in-a", b"fresh"),  # only-in-a
        (url_b, b, "users", "new-in-b", b"fresh"),  # only-in-b
        (url_a, a, "users", "user007", b"changed"),  # different
        (url_b, b, "users", "user100", None),  # deleted in b: only-in-a
        (url_a, a, "users", "user120", None),  # deleted in a: only-in-b
        (url_b, b, "users", "user007", b"changed"),  # the same change again: equal
        (url_b, b, "other", "x", b"y"),  # different, in another bucket
    ]
    for url, model, bucket, key, new_value in steps:
        change(url, model, bucket, key, new_value)
        expected = expected_lines(a, b)
        ran = inkpen_command("diff", url_a, url_b)
        assert ran.code == (1 if expected else 0), ran.explain()
        assert ran.lines == expected, ran.explain()
    assert len(expected) == 5
    users_only = [line for line in expected if "\tusers\t" in line]
    ran = inkpen_command("diff", url_b, url_a, "--bucket", "users", "--json")
    assert ran.code == 1, ran.explain()
    document = json.loads(ran.out)
    flipped = {"only-in-a": "only-in-b", "only-in-b": "only-in-a", "different": "different"}
    assert [
        f"{flipped[d['kind']]}\t{d['bucket']}\t{d['key']}" for d in document["differences"]
    ] == users_only
    assert document["same"] is False and 1 <= document["differing_segments"] <= 4


def test_usage_errors_and_trouble_exit_2(make_store_url: MakeUrl, tmp_path: Path) -> None:
    url = make_store_url("local")
    with inkpen.open(url) as book:
        book.put("b", "k", b"v")
    fails(2, "diff", url)
    fails(2, "diff", url, "memory://elsewhere")
    missing = fails(2, "diff", url, str(tmp_path / "nothing-here"))
    assert "does not exist" in missing.stderr
    assert not (tmp_path / "nothing-here").exists()
    fails(2, "diff", url, url, "--bucket", "hex:zz")


def test_damaged_data_exits_3(tmp_path: Path) -> None:
    url, copy = str(tmp_path / "db"), str(tmp_path / "copy")
    with inkpen.open(url) as book:
        for i in range(200):
            book.put("users", f"user{i:04d}", b"profile %d" % i)
    ok("backup", url, copy, "--no-fence")
    ok("restore", copy, str(tmp_path / "restored"))
    _, manifest = latest_manifest(str(tmp_path / "restored"))
    (sst,) = list(manifest.ledger.ssts())
    path = tmp_path / "restored" / sst.name
    with path.open("r+b") as f:
        f.seek(10)
        byte = f.read(1)[0]
        f.seek(10)
        f.write(bytes([byte ^ 0x10]))
    ran = fails(3, "diff", url, str(tmp_path / "restored"))
    assert sst.name in ran.stderr, ran.explain()


def test_verify_against_proves_a_backup_and_its_restore(
    durable_kind: str, make_store_url: MakeUrl
) -> None:
    url, backup, restored = (
        make_store_url(durable_kind),
        make_store_url(durable_kind),
        make_store_url(durable_kind),
    )
    populate(url, crash=False)
    ok("backup", url, backup)
    ok("restore", backup, restored)
    for copy in (backup, restored):
        ran = ok("verify", url, "--against", copy)
        assert ran.lines[-1] == f"against {copy}: the same objects", ran.explain()
    with inkpen.open(url, **TINY) as book:
        book.put("users", "user0003", b"changed after the backup")
    ran = inkpen_command("verify", url, "--against", restored, "--json")
    assert ran.code == 1, ran.explain()
    document = json.loads(ran.out)
    assert document["ok"] is True
    assert [(d["kind"], d["key"]) for d in document["against"]["differences"]] == [
        ("different", "user0003")
    ]
