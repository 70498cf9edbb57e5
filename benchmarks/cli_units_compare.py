"""The command line's durations, sizes and spans against pytimeparse2, humanize and rich.

    pip install humanize pytimeparse2 && python benchmarks/cli_units_compare.py

Prints, for a set of inputs, what inkpen's ``parse_duration`` and pytimeparse2 make of them, the
sizes inkpen, humanize (binary and decimal) and rich show, the spans inkpen and humanize show,
then ns per call (best of three rounds of 20,000 calls).
"""

from __future__ import annotations

import datetime
import timeit
from collections.abc import Callable

import humanize
import pytimeparse2
from rich.filesize import decimal

from inkpen.cli import render
from inkpen.cli.durations import parse_duration

DURATIONS = ["90", "90s", "15m", "2h", "7d", "1h30m", "1.5h", "never", "", "5 minutes"]
DURATIONS += ["1h 30m", "2w", "-5", "1:30", "10x", "1d2h", " 2H ", "1e3", "nan", "inf"]
SIZES = [0, 1, 512, 1023, 1024, 1536, 10**6, 3 * 2**20 + 200_000, 5 * 2**30, 2**50, 2**60]
SPANS = [0.4, 45, 725, 12000, 187200, 10**7]


def main() -> None:
    for given in DURATIONS:
        try:
            mine: object = parse_duration(given)
        except ValueError as exc:
            mine = f"error: {str(exc)[:50]}"
        print(f"{given!r:12} inkpen={mine!r:60.60} pytimeparse2={pytimeparse2.parse(given)!r}")
    for count in SIZES:
        print(
            f"{count:>20} inkpen={render.size(count):14} "
            f"humanize(binary)={humanize.naturalsize(count, binary=True):12} "
            f"humanize={humanize.naturalsize(count):10} rich={decimal(count)}"
        )
    for seconds in SPANS:
        delta = datetime.timedelta(seconds=seconds)
        print(
            f"{seconds:>10} inkpen={render.span(seconds):10} "
            f"humanize={humanize.naturaldelta(delta):12} "
            f"precisedelta={humanize.precisedelta(delta)}"
        )
    calls: list[tuple[str, Callable[[], object]]] = [
        ("inkpen parse_duration('1h30m')", lambda: parse_duration("1h30m")),
        ("pytimeparse2.parse('1h30m')", lambda: pytimeparse2.parse("1h30m")),
        ("inkpen size(3.2 MiB)", lambda: render.size(3_355_443)),
        ("humanize.naturalsize(binary)", lambda: humanize.naturalsize(3_355_443, binary=True)),
        ("rich filesize.decimal", lambda: decimal(3_355_443)),
        ("inkpen span(12000)", lambda: render.span(12000)),
        ("humanize.precisedelta(12000)", lambda: humanize.precisedelta(12000)),
    ]
    for name, call in calls:
        best = min(timeit.repeat(call, number=20_000, repeat=3)) / 20_000
        print(f"{name:32} {best * 1e9:8.0f} ns/call")


if __name__ == "__main__":
    main()
