"""How the command reads durations and shows sizes and spans (inkpen/cli/durations.py, render.py).

The expected values are worked out by hand; sizes follow the binary (1024) ladder that
humanize's ``naturalsize(binary=True)`` also uses.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from inkpen.cli import render
from inkpen.cli.durations import Duration, parse_duration

GOOD = {
    "90": 90.0,
    "90s": 90.0,
    "15m": 900.0,
    "2h": 7200.0,
    "7d": 604800.0,
    "1h30m": 5400.0,
    "1h 30m": 5400.0,
    "1d 2h": 93600.0,
    "1.5h": 5400.0,
    " 2H ": 7200.0,
    "0": 0.0,
}
BAD = ["", "never", "10x", "2w", "1:30", "h", "1h30", "nan", "inf", "-inf", "1h -30m"]


@pytest.mark.parametrize(("given", "seconds"), GOOD.items(), ids=repr)
def test_durations_parse(given: str, seconds: float) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize("given", BAD, ids=repr)
def test_bad_durations_say_what_to_write(given: str) -> None:
    with pytest.raises(ValueError, match="is not a duration; write"):
        parse_duration(given)


@pytest.mark.parametrize("seconds", [0, 1, 45, 59, 60, 725, 3599, 12000, 86399, 187200, 10**7])
def test_every_printed_span_reads_back(seconds: int) -> None:
    """A span drops what is below its second unit, so it reads back as at most the value and
    less than one unit of that second unit below it."""
    shown = render.span(seconds)
    back = parse_duration(shown)
    unit = {"s": 1, "m": 60, "h": 3600}[shown[-1]]
    assert seconds - unit < back <= seconds, shown


def test_a_lifetime_of_nan_is_refused_with_a_clear_message() -> None:
    @click.command()
    @click.option("--lifetime", type=Duration(allow_never=True))
    def command(lifetime: float | None) -> None:
        click.echo(f"lifetime={lifetime}")

    runner = CliRunner()
    for given in ("nan", "inf"):
        result = runner.invoke(command, ["--lifetime", given])
        assert result.exit_code == 2, result.output
        assert "not a duration; write a finite number of seconds" in result.output
    assert runner.invoke(command, ["--lifetime", "never"]).output == "lifetime=None\n"
    assert runner.invoke(command, ["--lifetime", "1h 30m"]).output == "lifetime=5400.0\n"


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1_000_000, "976.6 KiB"),
        (3 * 2**20 + 200_000, "3.2 MiB"),
        (5 * 2**30, "5.0 GiB"),
        (2**50, "1.0 PiB"),
        (3 * 2**60, "3.0 EiB"),
        (2**70, "1024.0 EiB"),
    ],
)
def test_sizes(count: int, shown: str) -> None:
    assert render.size(count) == shown


def test_spans() -> None:
    assert [render.span(s) for s in (0.4, 45, 725, 12000, 187200)] == [
        "0s",
        "45s",
        "12m 5s",
        "3h 20m",
        "2d 4h",
    ]
