"""How long a new process takes to be ready: ``import inkpen`` and ``inkpen --help``.

Each is timed in fresh interpreters (``python -c "import inkpen"``, ``python -m inkpen --help``),
``rounds`` times, and reported as the median wall seconds beside the bare interpreter's start
(``python -c pass``), so that what inkpen adds can be read off on a busy machine too. The count of
modules ``import inkpen`` leaves in ``sys.modules`` comes from one more child.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = ["measure_startup"]

_MODULES = "import sys, inkpen; print(len(sys.modules))"


def _median_seconds(argv: Sequence[str], rounds: int) -> float:
    """The median wall time of ``rounds`` runs of ``argv`` (each must exit 0)."""
    times: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_startup(rounds: int = 5) -> dict[str, float | int]:
    """``python_s`` (a bare interpreter), ``import_s`` (``import inkpen``), ``help_s``
    (``inkpen --help``), each the median of ``rounds`` fresh processes, and ``modules``."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    python = sys.executable
    modules = subprocess.run(
        [python, "-c", _MODULES], check=True, capture_output=True, text=True
    ).stdout
    return {
        "python_s": round(_median_seconds([python, "-c", "pass"], rounds), 4),
        "import_s": round(_median_seconds([python, "-c", "import inkpen"], rounds), 4),
        "help_s": round(_median_seconds([python, "-m", "inkpen.cli", "--help"], rounds), 4),
        "modules": int(modules.strip()),
    }
