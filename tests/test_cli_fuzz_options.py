"""Every option and argument of the command that takes a number, a duration or a name, found by
walking the click command tree, fed extreme values.

A number or a duration out of range is bad usage: exit status 2 with one error line, before
anything is opened. A name is refused with exit status 2 (the database unchanged), or names
nothing (exit status 1), or is used (exit status 0); never an unexpected error. A new command
or option is fuzzed as soon as it is added to the group.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import inkpen
from inkpen.cli import main
from inkpen.cli.durations import Duration

NUMBERS = [
    "18446744073709551616",
    "9223372036854775808",
    "-1",
    "100000000000000000000000",
    "1e30",
    "nan",
    "inf",
    "-inf",
    "",
    "x",
    "9" * 5000,
]
NAMES = ["", "x" * 100_000, "\x01\x7f", "hex:zz", "hex:" + "ff" * 70_000, " "]

LOCATIONS = {"url", "dest", "backup_url", "clone_url", "parent", "url_a", "url_b", "against"}
"""Arguments naming a store: given valid ones here (store URLs have tests of their own)."""
NUMERIC_NAMES = {"count"}
"""Options typed as text that hold numbers (``bench --n``, a comma-separated list)."""
SKIPPED_NAMES = {
    ("bench", "root"): "a directory bench writes into; valid values run a benchmark",
    ("bench", "endpoint"): "an S3 endpoint; valid values run a benchmark",
    ("bench", "bucket"): "an S3 bucket; valid values run a benchmark",
    ("bench", "workloads"): "valid values run a benchmark",
}
"""Text options not fuzzed with names, and why (their numbers still are)."""


def _commands() -> Iterator[tuple[tuple[str, ...], click.Command]]:
    def walk(group: click.Group, prefix: tuple[str, ...]) -> Iterator[Any]:
        context = click.Context(group)
        for name in sorted(group.list_commands(context)):
            command = group.get_command(context, name)
            assert command is not None
            if isinstance(command, click.Group):
                yield from walk(command, (*prefix, name))
            else:
                yield (*prefix, name), command

    yield from walk(main, ())


def _kind(param: click.Parameter) -> str | None:
    if isinstance(param, click.Option) and (param.is_flag or param.count):
        return None
    if param.name in LOCATIONS:
        return None
    kind = param.type
    if param.name in NUMERIC_NAMES or isinstance(
        kind, Duration | click.types.IntParamType | click.types.FloatParamType
    ):
        return "number"
    if isinstance(kind, click.types.StringParamType):
        return "name"
    return None


CASES = [
    (path, param.name, kind)
    for path, command in _commands()
    for param in command.params
    if param.name is not None and (kind := _kind(param)) is not None
]


def _valid(name: str, where: Path) -> str:
    values = {
        "url": str(where / "db"),
        "parent": str(where / "db"),
        "backup_url": str(where / "db"),
        "url_a": str(where / "db"),
        "url_b": str(where / "db"),
        "dest": str(where / "elsewhere"),
        "clone_url": str(where / "elsewhere"),
        "bucket": "b",
        "key": "k",
        "name": "cursor",
        "sqn": "5",
    }
    if name not in values:
        pytest.fail(f"no valid value for the required argument {name!r}: add one to _valid")
    return values[name]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def where(tmp_path: Path) -> Path:
    with inkpen.open(str(tmp_path / "db")) as book:
        book.put("b", "k", b"v")
        book.create_feed_cursor("cursor", 1)
    return tmp_path


def test_the_walk_finds_the_numbers_and_names() -> None:
    found = {(path, name): kind for path, name, kind in CASES}
    assert found[("feed", "advance"), "sqn"] == "number"
    assert found[("ls",), "limit"] == "number"
    assert found[("gc",), "min_age"] == "number"
    assert found[("bench",), "count"] == "number"
    assert found[("feed", "create"), "name"] == "name"
    # Files a command writes (lsm --html, bench --plot) are paths, not names: fed these names
    # they would be created in the current directory. test_lsm_html.py and test_cli_bench.py
    # give them destinations that cannot be written.
    assert (("lsm",), "html") not in found and (("bench",), "plot") not in found


@pytest.mark.parametrize(
    ("path", "fuzzed", "kind"), CASES, ids=[f"{' '.join(p)}:{n}" for p, n, _ in CASES]
)
def test_extreme_values_are_usage_errors_or_used(
    where: Path, path: tuple[str, ...], fuzzed: str, kind: str
) -> None:
    if kind == "name" and (path[0], fuzzed) in SKIPPED_NAMES:
        pytest.skip(SKIPPED_NAMES[path[0], fuzzed])
    command: click.Command = main
    for part in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), part)
        assert found is not None
        command = found
    runner = CliRunner()
    for value in NUMBERS if kind == "number" else NAMES:
        args: list[str] = []
        options: list[str] = []
        for param in command.params:
            if param.name == fuzzed:
                given = value
            elif isinstance(param, click.Argument) and param.required:
                given = _valid(param.name or "", where)
            else:
                continue
            if isinstance(param, click.Option):
                options += [param.opts[0], given]
            else:
                args.append(given)
        before = _tree(where)
        result = runner.invoke(main, [*path, *args, *options])
        shown = f"inkpen {' '.join(path)} {fuzzed}={value[:40]!r}: {result.output[-400:]}"
        assert "unexpected" not in result.output, shown
        assert "Traceback" not in result.output, shown
        if kind == "number":
            assert result.exit_code == 2, shown
        else:
            assert result.exit_code in (0, 1, 2), shown
        if result.exit_code == 2:
            assert _tree(where) == before, shown
