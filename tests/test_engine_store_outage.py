"""A put while the store is down: the error names the store and the cause, and ``put_timeout``
bounds how long a put waits for a store that does not answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import pytest

import inkpen
import inkpen.aio
from inkpen.errors import StoreError
from inkpen.objectstore import open_store
from support.waiting import wait_until

CAUSE = (
    "S3 put_if_absent of 'journal/x' at bucket b, prefix p, endpoint http://127.0.0.1:9 "
    "could not connect: Connection refused"
)


class OutageStore:
    """A store whose journal segment writes fail (``down``) or hang (``hang``) when told."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.down = threading.Event()
        self.hang = threading.Event()
        self.released = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        if key.startswith("journal/") and not key.startswith("journal/compacted/"):
            if self.down.is_set():
                raise StoreError(CAUSE, definite=True, key=key)
            if self.hang.is_set():
                self.released.wait(120)
        self._inner.put_if_absent(key, data, metadata=metadata)


@pytest.fixture
def outage(store_url: str) -> Any:
    store = OutageStore(open_store(store_url))
    yield store
    store.released.set()
    store._inner.close()


def test_a_refused_segment_write_names_the_store_and_its_cause(outage: OutageStore) -> None:
    with inkpen.open(outage) as book:
        book.put("b", "before", b"1")
        outage.down.set()
        with pytest.raises(StoreError) as failed:
            book.put("b", "k", b"lost")
        message = str(failed.value)
        assert failed.value.definite
        assert "endpoint http://127.0.0.1:9" in message and "Connection refused" in message
        assert "was not written to" in message and "did not happen" in message
        assert book.get("b", "k") is None
        outage.down.clear()
        book.put("b", "k", b"after")  # the writer goes on once the store is back
        assert book.get("b", "k") == b"after"


def test_put_timeout_bounds_the_wait_and_the_write_may_still_land(
    outage: OutageStore,
) -> None:
    with pytest.raises(inkpen.UsageError):
        inkpen.open(outage, put_timeout=-1)
    with inkpen.open(outage, put_timeout=0.3) as book:
        outage.hang.set()
        with pytest.raises(StoreError, match=r"put_timeout=0\.3s") as failed:
            book.put("b", "k", b"late")
        assert not failed.value.definite
        outage.hang.clear()
        outage.released.set()
        wait_until(lambda: book.get("b", "k") == b"late", "the late write to land")


def test_async_put_timeout(outage: OutageStore) -> None:
    async def main() -> None:
        async with inkpen.aio.open(outage, put_timeout=0.3) as book:
            outage.hang.set()
            with pytest.raises(StoreError, match=r"put_timeout=0\.3s"):
                await book.put("b", "k", b"late")
            outage.hang.clear()
            outage.released.set()
            await book.put("b", "k2", b"next")
            assert await book.get("b", "k") == b"late"

    asyncio.run(main())
