"""Hypothesis profiles of the engine's state machines and property tests.

Two profiles, chosen with the environment variable ``INKPEN_HYPOTHESIS_PROFILE``:

- ``inkpen-ci`` (the default): a bounded budget, derandomized (the same examples on every run, so
  a failure in CI fails again locally with the same command), no example database;
- ``inkpen-deep``: ten to twenty times the examples and twice the steps, random seeds and the
  example database, for long local runs. A failure prints its seed; rerun it with
  ``pytest --hypothesis-seed=SEED`` (and the same profile) to replay it.

Either way a failure prints the shrunk sequence of steps and a ``@reproduce_failure`` blob.
Each machine asks :func:`machine_settings` for its own budget, so a slow store (SeaweedFS)
runs fewer examples than memory; the rest of the suite runs under the profile as it is
(``conftest.py`` loads it), with Hypothesis' own example counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings

PROFILE_VARIABLE = "INKPEN_HYPOTHESIS_PROFILE"
DEEP_PROFILE = "inkpen-deep"
"""Under this profile the suite also lifts pytest-timeout's per-test limit (``conftest.py``)."""


@dataclass(frozen=True, slots=True)
class Budget:
    examples: int
    steps: int


_BUDGETS: dict[str, dict[str, Budget]] = {
    "inkpen-ci": {
        "memory": Budget(80, 50),
        "external": Budget(20, 40),
        "faulty": Budget(40, 50),
        "pipelined": Budget(30, 50),
        "pipelined_faulty": Budget(20, 50),
        "local": Budget(25, 40),
        "s3": Budget(20, 40),
        "s3-latency": Budget(6, 30),
        "crash": Budget(2, 1),
        "corruption": Budget(25, 1),
        "shards": Budget(12, 30),
    },
    DEEP_PROFILE: {
        "memory": Budget(800, 100),
        "external": Budget(200, 80),
        "faulty": Budget(600, 100),
        "pipelined": Budget(300, 100),
        "pipelined_faulty": Budget(300, 100),
        "local": Budget(120, 60),
        "s3": Budget(60, 50),
        "s3-latency": Budget(40, 50),
        "crash": Budget(20, 1),
        "corruption": Budget(400, 1),
        "shards": Budget(150, 60),
    },
}

_COMMON: dict[str, Any] = {
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": (
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ),
}

settings.register_profile("inkpen-ci", derandomize=True, database=None, **_COMMON)
settings.register_profile(DEEP_PROFILE, derandomize=False, **_COMMON)


def profile_name() -> str:
    name = os.environ.get(PROFILE_VARIABLE, "inkpen-ci")
    if not name.startswith("inkpen-"):
        name = f"inkpen-{name}"
    if name not in _BUDGETS:
        known = ", ".join(sorted(n.removeprefix("inkpen-") for n in _BUDGETS))
        raise ValueError(f"{PROFILE_VARIABLE}={name!r} is unknown; choose one of: {known}")
    return name


def budget(kind: str) -> Budget:
    """The example and step budget of ``kind`` under the selected profile."""
    return _BUDGETS[profile_name()][kind]


def machine_settings(kind: str) -> settings:
    """Settings for the state machine (or property test) of ``kind`` under the profile."""
    chosen = budget(kind)
    return settings(
        settings.get_profile(profile_name()),
        max_examples=chosen.examples,
        stateful_step_count=chosen.steps,
    )
