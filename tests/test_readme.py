"""The documentation runs as written: every ```python block of README.md, each in a fresh
directory of its own; the example in ``inkpen.objectstore.seaweed``'s docstring; and the README's
command table names every command ``inkpen`` has.

Blocks are self-contained. The only setup a test supplies is what the README itself says a block
needs: a Spark block runs in a process whose Spark session is started (the suite's, which the
block's ``SparkSession.builder.getOrCreate()`` picks up). What a block leaves behind is then
checked against what the README says it does.
"""

from __future__ import annotations

import inspect
import os
import re
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import inkpen
import inkpen.cli
import inkpen.objectstore.seaweed
from inkpen.objectstore.seaweed import DUMMY_CREDENTIALS

pytest_plugins = ("support.spark",)

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Block:
    line: int
    code: str

    @property
    def needs_spark(self) -> bool:
        return "pyspark" in self.code


def python_blocks(text: str) -> list[Block]:
    """The ```python blocks of a Markdown text, with the line each starts on."""
    return [Block(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in FENCE.finditer(text)]


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def run_block(block: Block, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a block as a script would run it, in the current directory; answers its globals."""
    scope: dict[str, Any] = {"__name__": "__main__", **(namespace or {})}
    exec(compile(block.code, f"{README}:{block.line}", "exec"), scope)
    return scope


def objects(url: str) -> dict[tuple[bytes, bytes], bytes]:
    with inkpen.open_reader(url) as reader:
        return {(b, k): v for b, k, v in reader.objects()}


# -- what each block says it does ------------------------------------------------------------

PRINTS: dict[str, list[str]] = {
    "def increment(": ["b'1'"],
    "def transfer(": ["[b'70', b'30']"],
    'merge_operators={"add": add, "append": append}': ["b'3'"],
    "inkpen.prometheus.register(book, registry)": [
        "1 1 1",
        """['inkpen_puts_total{database="myapp-db"} 1.0']""",
    ],
    'shards.create("myapp-set"': ["[b'alice', b'bob']", "1"],
}
"""A text only one block has -> the lines that block prints (as its comments say)."""


def check_api(tmp: Path, scope: dict[str, Any], out: str) -> None:
    with inkpen.open_reader(str(tmp / "myapp-db")) as reader:
        assert reader.get("users", "alice") is None  # deleted at the end
        assert list(reader.index_query("users", "email_bin", "a", "b")) == []
        assert reader.get("sessions", "s1") == b"..."
        head = reader.head("sessions", "s1")
        assert head is not None and head.expires_at is not None  # the ttl
        assert head.expires_at - head.last_modified == pytest.approx(3600, abs=1)


def check_batch(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert objects(str(tmp / "myapp-db")) == {
        (b"accounts", b"alice"): b"90",
        (b"accounts", b"bob"): b"110",
    }


def check_increment(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert out.splitlines() == PRINTS["def increment("]
    # "safe however many threads race": the README's own function, from 8 threads at once
    increment: Callable[[inkpen.Bookie, str, str], None] = scope["increment"]
    with inkpen.open(str(tmp / "myapp-db")) as book:
        start = threading.Barrier(8)

        def hammer() -> None:
            start.wait()
            for _ in range(25):
                increment(book, "counters", "visits")

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert book.get("counters", "visits") == b"201"


def check_transfer(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert out.splitlines() == PRINTS["def transfer("]
    # the README's own function, retried, from 8 threads at once: no money appears or vanishes
    transfer: Callable[[inkpen.Bookie, str, str, int], None] = scope["transfer"]
    with inkpen.open(str(tmp / "myapp-db")) as book:
        start = threading.Barrier(8)
        failures: list[BaseException] = []

        def hammer(n: int) -> None:
            start.wait()
            src, dst = ("alice", "bob") if n % 2 else ("bob", "alice")
            for _ in range(10):
                try:
                    inkpen.retrying(lambda: transfer(book, src, dst, 1))  # the defaults
                except ValueError:
                    pass  # not enough money: nothing written
                except BaseException as exc:
                    failures.append(exc)

        threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert sum(int(v or b"0") for v in book.get_many("accounts", ["alice", "bob"])) == 100


def check_merge(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert out.splitlines() == PRINTS['merge_operators={"add": add, "append": append}']
    url = str(tmp / "merge-db")
    assert objects(url) == {
        (b"counters", b"visits"): b"3",
        (b"log", b"l1"): b"a",
        (b"log", b"l2"): b"x",
    }
    with pytest.raises(inkpen.UsageError, match="merge_operators"):
        inkpen.open(url)  # "refuses to open that database for writing without an operator"
    operators = {"add": scope["add"], "append": scope["append"]}
    with inkpen.open(url, merge_operators=operators) as book:
        book.merge("counters", "visits", b"4", operator="add")
        assert book.get("counters", "visits") == b"7"


def check_asyncio(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert objects(str(tmp / "myapp-db")) == {(b"users", b"alice"): b"..."}
    assert objects(str(tmp / "myapp-backup")) == {(b"users", b"alice"): b"..."}


def check_spark(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert scope["url"] == str(tmp / "spark-db")
    assert objects(scope["url"]) == {
        (b"users", b"alice"): b"...",
        (b"users", b"mallory"): b"...",
        (b"logs", b"l1"): b"...",
    }
    picked = scope["df"].filter("bucket = X'7573657273' AND key >= X'6d'").collect()
    assert [bytes(r.key) for r in picked] == [b"mallory"]
    assert [(r.key, bytes(r.value)) for r in scope["users"].collect()] == [("alice", b"...")]
    from inkpen.shards import shard_of, shard_url

    sharded = str(tmp / "spark-set")
    found = sorted((r.shard, bytes(r.bucket), bytes(r.key)) for r in scope["per_shard"].collect())
    wanted = {(b"users", b"alice"), (b"users", b"mallory"), (b"logs", b"l1")}
    assert found == sorted((shard_of(b, k, 4), b, k) for b, k in wanted)
    for shard in range(4):
        mine = {(b, k) for b, k in wanted if shard_of(b, k, 4) == shard}
        assert set(objects(shard_url(sharded, shard))) == mine
        with inkpen.open_reader(shard_url(sharded, shard)) as reader:
            assert reader.last_sqn == len(mine)  # the second save added nothing: its load_id
    report = scope["resharded"]
    assert (report.objects, report.source_shards, report.shards) == (3, 4, 8)
    eight = str(tmp / "spark-set-8")
    for shard in range(8):
        mine = {(b, k) for b, k in wanted if shard_of(b, k, 8) == shard}
        assert set(objects(shard_url(eight, shard))) == mine
    shown = out.split("\n\n")  # what the two show() calls print: mallory (binary), alice
    assert "|[6D 61 6C 6C" in shown[0] and "|alice|" in shown[1]


def check_metrics(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert out.splitlines() == PRINTS["inkpen.prometheus.register(book, registry)"]
    assert objects(str(tmp / "myapp-db")) == {(b"users", b"alice"): b"..."}


def check_shards(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert out.splitlines() == PRINTS['shards.create("myapp-set"']
    url = str(tmp / "myapp-set")
    assert inkpen.shards.read_descriptor(url).shards == 4
    held = {}
    for index in range(4):
        for (bucket, key), value in objects(inkpen.shards.shard_url(url, index)).items():
            assert inkpen.shards.shard_of(bucket, key, 4) == index
            held[(bucket, key)] = value
    assert held == {
        (b"users", b"alice"): b"v2",
        (b"users", b"bob"): b"...",
        (b"counters", b"visits"): b"1",
    }


def check_shards_api(tmp: Path, scope: dict[str, Any], out: str) -> None:
    assert out.splitlines() == [
        "8",
        "9 [0, 1, 2, 3]",
        "4",
        "b'... edited'",
        "[('events-hot', 4), ('events-nightly', 4), ('events', 4)]",
    ]
    wanted = {f"e{i}".encode(): b"..." for i in range(8)}
    wanted[b"e1"] = b"... edited"
    wanted[b"e9"] = b"after the snapshot"
    for copy in ("events", "events-nightly", "events-hot"):  # the checkpoint came after e9
        with inkpen.shards.open_reader(str(tmp / copy)) as reader:
            assert {k: v for _b, k, v in reader.objects()} == wanted, copy
    assert not (tmp / "events-restored").exists()  # restored, then destroyed
    assert [cp.name for cp in inkpen.shards.list_checkpoints(str(tmp / "events"))] == ["nightly"]


CHECKS: dict[str, Callable[[Path, dict[str, Any], str], None]] = {
    'book.put("sessions", "s1"': check_api,
    "batch = inkpen.Batch()": check_batch,
    "def increment(": check_increment,
    "def transfer(": check_transfer,
    'merge_operators={"add": add, "append": append}': check_merge,
    "async with inkpen.aio.open(": check_asyncio,
    'spark.read.format("inkpen")': check_spark,
    "inkpen.prometheus.register(book, registry)": check_metrics,
    'shards.create("myapp-set"': check_shards,
    'shards.create("events"': check_shards_api,
}
"""A text only one block has -> what that block must have done."""


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(
            b, id=f"README.md:{b.line}", marks=[pytest.mark.spark] if b.needs_spark else []
        )
        for b in BLOCKS
    ],
)
def test_every_python_block_runs_as_written(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if block.needs_spark:  # the README: Spark blocks run in a job with a session
        request.getfixturevalue("spark")
    monkeypatch.chdir(tmp_path)
    scope = run_block(block)
    out = capsys.readouterr().out
    for marker, check in CHECKS.items():
        if marker in block.code:
            check(tmp_path, scope, out)


def test_the_blocks_print_what_they_say_when_run_in_order_in_one_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reader who runs the blocks one after another, where the databases of the earlier ones
    are still there (most share ``myapp-db``), sees what each block's comments say it prints."""
    monkeypatch.chdir(tmp_path)
    seen: dict[str, list[str]] = {}
    for block in BLOCKS:
        if block.needs_spark:
            continue
        run_block(block)
        out = capsys.readouterr().out
        for marker in PRINTS:
            if marker in block.code:
                seen[marker] = out.splitlines()
    assert seen == PRINTS


def test_each_check_names_exactly_one_block() -> None:
    """So a block that goes or changes what it does fails here, not silently."""
    assert len(BLOCKS) >= len(CHECKS)
    for marker in CHECKS:
        assert sum(marker in b.code for b in BLOCKS) == 1, marker
    assert set(PRINTS) <= set(CHECKS)
    assert [b.needs_spark for b in BLOCKS].count(True) == 1


def test_the_block_extraction_finds_fenced_python_only() -> None:
    text = "x\n```python\na = 1\n```\n```sh\nls\n```\n\n```python\nb = 2\nc = 3\n```\n"
    assert python_blocks(text) == [Block(3, "a = 1\n"), Block(10, "b = 2\nc = 3\n")]


# -- the seaweed docstring ---------------------------------------------------------------------


def docstring_example(doc: str) -> str:
    """The literal block after the first ``::`` of a docstring, dedented."""
    _, _, after = doc.partition("::\n")
    lines: list[str] = []
    for line in after.splitlines():
        if line.strip() and not line.startswith(" "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines)).strip() + "\n"


@pytest.mark.s3
def test_the_seaweed_docstring_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = inkpen.objectstore.seaweed.__doc__
    assert doc is not None
    code = docstring_example(doc)
    assert code.startswith("import os\n") and "server.stop()" in code
    for name in DUMMY_CREDENTIALS:  # the example sets them; put them back afterwards
        monkeypatch.setenv(name, os.environ.get(name, "placeholder"))
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, inkpen.objectstore.seaweed.__file__, "exec"), scope)
    assert capsys.readouterr().out.splitlines() == ["b'...'"]
    server = scope["server"]
    assert server.process.poll() is not None  # stopped
    assert not server.directory.exists()  # and its files removed
    assert list(tmp_path.iterdir()) == []


# -- the command table and the API the README names --------------------------------------------


def test_the_command_table_names_every_command() -> None:
    section = README.read_text(encoding="utf-8").split("## The command line", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)", section, re.MULTILINE)
    assert sorted(rows) == sorted(inkpen.cli.COMMANDS)


def test_destroy_is_hard_unless_told_as_the_readme_says() -> None:
    text = README.read_text(encoding="utf-8")
    assert "`inkpen.destroy(url)` removes one now" in text
    soft = inspect.signature(inkpen.destroy).parameters["soft"]
    assert soft.default is False and soft.kind is inspect.Parameter.KEYWORD_ONLY
