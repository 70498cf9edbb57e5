"""inkpen's errors keep their class, message and attributes across a pickle round trip
(they cross process boundaries: compute workers, Spark tasks)."""

from __future__ import annotations

import pickle

import pytest

from inkpen.errors import (
    AlreadyExistsError,
    CheckpointLapsedError,
    CorruptionError,
    FencedError,
    NotFoundError,
    StoreError,
    UsageError,
)


@pytest.mark.parametrize(
    "error",
    [
        StoreError("timed out", definite=False, key="journal/1.jnl"),
        StoreError("refused", definite=True),
        NotFoundError("no such object", key="ledger/x.sst"),
        AlreadyExistsError("taken", key="manifest/2.manifest"),
        CheckpointLapsedError("checkpoint c1 lapsed", key="c1"),
        CorruptionError("ledger/x.sst", "block checksum mismatch", offset=4096),
        UsageError("bucket must not be empty"),
        FencedError("a newer writer opened the database"),
    ],
)
def test_errors_survive_pickling(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    for attribute in ("definite", "key", "object_name", "offset", "detail"):
        assert getattr(copy, attribute, None) == getattr(error, attribute, None)
