"""The SeaweedFS server the S3 tests run against (it lives in :mod:`inkpen.objectstore.seaweed`,
which the benchmarks share)."""

from __future__ import annotations

from inkpen.objectstore.seaweed import (
    DUMMY_CREDENTIALS,
    SeaweedServer,
    SeaweedUnavailable,
    find_weed,
    free_loopback_ports,
    start_seaweed,
)

__all__ = [
    "DUMMY_CREDENTIALS",
    "SeaweedServer",
    "SeaweedUnavailable",
    "find_weed",
    "free_loopback_ports",
    "start_seaweed",
]
