"""The latency tier: SeaweedFS behind the latency proxy, as the tests use it.

The relay itself is :mod:`inkpen.cli.latency_proxy` (``inkpen bench --latency-ms`` needs it in
an installed package; it relays bytes to a server it is given and serves nothing itself). The
suite runs it in a child process in front of the session's SeaweedFS (the ``latency_proxy``
fixture of ``conftest.py``) at ``--latency-ms`` per round trip (default 25), and a test asks
for a store behind it as the store kind :data:`LATENCY_KIND`.

Two markers sort the tier: ``latency`` on every test that runs through the proxy, and
``latency_tier`` on those that run only with ``--latency-tier`` (``conftest.py`` deselects them
otherwise), so that the default run keeps a small, bounded share of the tier.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from inkpen.cli.latency_proxy import (
    COUNTERS,
    LatencyProxy,
    Link,
    ProxyProcess,
    counts_delta,
)

LATENCY_KIND = "s3-latency"
"""The store kind of a root on SeaweedFS behind the latency proxy (``make_store_url``)."""
DEFAULT_ROUND_TRIP_MS = 25.0
TIER_OPTION = "--latency-tier"
ROUND_TRIP_OPTION = "--latency-ms"


STORE_KIND_PARAMS = [
    pytest.param("memory", id="memory"),
    pytest.param("local", id="local"),
    pytest.param("s3", id="s3", marks=pytest.mark.s3),
]
"""The kinds ``conftest.py``'s ``store_kind`` runs a test on."""
DURABLE_KIND_PARAMS = STORE_KIND_PARAMS[1:]
"""The kinds another process can open too (``durable_kind``)."""


def with_latency(kinds: Sequence[pytest.ParameterSet], *, tier: bool) -> list[pytest.ParameterSet]:
    """``kinds`` and :data:`LATENCY_KIND` (:func:`latency_param`): parametrize ``store_kind`` or
    ``durable_kind`` with it (a module's fixture of that name, or ``@pytest.mark.parametrize``
    on one test, which overrides the fixture) to run tests behind the proxy too."""
    return [*kinds, latency_param(tier=tier)]


def latency_param(*, tier: bool) -> pytest.ParameterSet:
    """The :data:`LATENCY_KIND` parameter of a store-kind parametrised test: marked ``s3`` and
    ``latency``, and ``latency_tier`` (run only with ``--latency-tier``) when ``tier``."""
    return pytest.param(LATENCY_KIND, id=LATENCY_KIND, marks=tier_marks(tier=tier))


def tier_marks(*, tier: bool) -> list[pytest.MarkDecorator]:
    """The marks of a test that runs through the proxy (see :func:`latency_param`)."""
    marks = [pytest.mark.s3, pytest.mark.latency]
    return [*marks, pytest.mark.latency_tier] if tier else marks


__all__ = [
    "COUNTERS",
    "DEFAULT_ROUND_TRIP_MS",
    "DURABLE_KIND_PARAMS",
    "LATENCY_KIND",
    "ROUND_TRIP_OPTION",
    "STORE_KIND_PARAMS",
    "TIER_OPTION",
    "LatencyProxy",
    "Link",
    "ProxyProcess",
    "counts_delta",
    "latency_param",
    "tier_marks",
    "with_latency",
]
