"""``inkpen bench --plot FILE``: each timed phase second by second, drawn as a PNG.

For every phase the benchmark times (load, get, scan; with ``--scale`` also get16 and get_warm,
for each N) the picture shows, on one time axis per run (seconds since its first phase began, so
the close, open and settle between phases show as gaps), the operations finished in each second
as a rate (on a log scale: phases differ by orders of magnitude), and below it the p50 and p99
latency of the operations that finished in that second (from the per-second histograms the
workloads keep: :class:`~inkpen.cli.workloads.PerSecond`). The scan is timed as a whole and has
no latency line.

The series drawn are stored in the PNG itself, as JSON in a ``tEXt`` chunk named
:data:`METADATA_KEY`, so a reader of the picture can check it against the JSON lines.

matplotlib is an optional dependency, installed by the ``plot`` extra
(``pip install 'inkpen[plot]'``); :func:`require_matplotlib` says so before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .workloads import Timing

PLOT_EXTRA = "plot"
METADATA_KEY = "inkpen-bench"
"""The PNG text chunk holding the plotted series as JSON."""
RATE_LINEAR_BELOW = 10.0
"""Throughput is drawn on a log scale above this many operations per second, linear below (down
to the zero of a second in which no operation finished)."""
PHASE_COLORS = {
    "load": "#d1495b",
    "get": "#00798c",
    "get16": "#30638e",
    "get_warm": "#66a182",
    "scan": "#edae49",
}


@dataclass(frozen=True, slots=True)
class Series:
    """One phase of one run, second by second."""

    run: str
    """Which run (``""`` for a plain bench, ``"N=100,000"`` for one N of ``--scale``)."""
    phase: str
    start_s: float
    """When the phase began, in seconds since the run's first phase began."""
    seconds: float
    ops: int
    per_second: tuple[int, ...]
    """Operations finished in each second of the phase (the last one partial)."""
    p50_ms: tuple[float | None, ...]
    p99_ms: tuple[float | None, ...]
    """Latency quantiles of the operations finished in each second (None: none finished, or
    the phase records no latencies)."""

    @classmethod
    def of(cls, run: str, phase: str, timing: Timing, origin: float) -> Series:
        """``timing``'s series; ``origin`` is the ``perf_counter`` the run's time axis starts at."""

        def quantiles(q: float) -> tuple[float | None, ...]:
            if not timing.second_latencies:
                return (None,) * len(timing.per_second)
            return tuple(
                round(lat.quantile(q) * 1e3, 3) if lat.count else None
                for lat in timing.second_latencies
            )

        return cls(
            run=run,
            phase=phase,
            start_s=round(timing.started - origin, 3),
            seconds=round(timing.seconds, 3),
            ops=timing.ops,
            per_second=timing.per_second,
            p50_ms=quantiles(0.5),
            p99_ms=quantiles(0.99),
        )

    def rates(self) -> tuple[list[float], list[float]]:
        """(the middle of each second on the run's axis, operations per second in it); the
        last, partial second's rate is over its own length."""
        xs: list[float] = []
        ys: list[float] = []
        for i, count in enumerate(self.per_second):
            width = max(1e-3, min(1.0, self.seconds - i))
            xs.append(self.start_s + i + width / 2)
            ys.append(count / width)
        return xs, ys

    def to_document(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "phase": self.phase,
            "start_s": self.start_s,
            "seconds": self.seconds,
            "ops": self.ops,
            "per_second": list(self.per_second),
            "p50_ms": list(self.p50_ms),
            "p99_ms": list(self.p99_ms),
        }


def require_matplotlib() -> None:
    """Fail with the extra to install unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(
            f"--plot draws with matplotlib, which is not installed; install inkpen's "
            f"{PLOT_EXTRA!r} extra: pip install 'inkpen[{PLOT_EXTRA}]'"
        ) from None


def plot(series: Sequence[Series], path: Path, title: str) -> None:
    """Draw ``series`` into the PNG file ``path`` (the module docstring says what it shows)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = list(dict.fromkeys(s.run for s in series))
    figure = Figure(figsize=(12, 3.0 * 2 * max(1, len(runs))), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2 * max(1, len(runs)), 1, squeeze=False)
    figure.suptitle(title)
    for row, run in enumerate(runs):
        rate, latency = axes[2 * row][0], axes[2 * row + 1][0]
        latency.sharex(rate)
        timed = False
        highest = 0.0
        for part in (s for s in series if s.run == run):
            color = PHASE_COLORS.get(part.phase, "#555555")
            xs, ys = part.rates()
            marker = "." if len(xs) < 30 else None
            label = f"{part.phase}: {part.ops:,} ops in {part.seconds:g} s"
            rate.plot(xs, ys, color=color, marker=marker, label=label)
            highest = max(highest, *ys)
            for axis in (rate, latency):
                axis.axvspan(part.start_s, part.start_s + part.seconds, color=color, alpha=0.07)
            points = [
                (x, p50, p99) for x, p50, p99 in zip(xs, part.p50_ms, part.p99_ms, strict=True)
            ]
            known = [(x, p50, p99) for x, p50, p99 in points if p50 is not None and p99 is not None]
            if known:
                timed = True
                latency.plot(
                    [k[0] for k in known],
                    [k[1] for k in known],
                    color=color,
                    marker=marker,
                    label=f"{part.phase} p50",
                )
                latency.plot(
                    [k[0] for k in known],
                    [k[2] for k in known],
                    color=color,
                    marker=marker,
                    linestyle="--",
                    label=f"{part.phase} p99",
                )
        where = f" ({run})" if run else ""
        rate.set_title(f"throughput{where}", loc="left", fontsize=10)
        rate.set_ylabel("operations / s")
        # phases differ by orders of magnitude, and a second with no operation must still show
        rate.set_yscale("symlog", linthresh=RATE_LINEAR_BELOW)
        rate.set_ylim(bottom=0, top=max(RATE_LINEAR_BELOW, highest) * 2)
        rate.grid(alpha=0.3)
        rate.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        latency.set_title(
            f"latency of the operations finished each second{where}", loc="left", fontsize=10
        )
        latency.set_ylabel("ms (p50 solid, p99 dashed)")
        latency.set_xlabel("seconds since the run began")
        latency.grid(alpha=0.3, which="both")
        if timed:
            latency.set_yscale("log")
            latency.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    document = json.dumps([s.to_document() for s in series], separators=(",", ":"))
    figure.savefig(
        path, format="png", metadata={"Software": "inkpen bench", METADATA_KEY: document}
    )
