"""A Reader reads only files its checkpoint pins, and says so when the pin lapsed.

Each test puts another party's step exactly where a Reader's protocol once left a gap: a flush
between the checkpoint's segment listing and its CAS, a lease refresh landing after the expiry
it extended, a writer judging a checkpoint by a stale manifest, a checkpoint dropped under a
Reader. Every file a Reader reads is pinned by its checkpoint at that moment; a file that
vanished because the pin lapsed is reported as a lapsed lease, never as corruption.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import inkpen
from inkpen.objectstore import open_store
from support.hooks import HookedStore

QUIET = {
    "ledger_cache_entries": 10_000,
    "l0_cache_entries": 10_000,
    "fold_segments": 10_000,
    "fold_bytes": 64 * 1024 * 1024,
    "gc_min_age": 0.0,
    "delete_poll_interval": 0.05,
}
"""Nothing flushes or folds unless the test says so."""


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def url(request: pytest.FixtureRequest, make_store_url: Callable[[str], str]) -> str:
    return make_store_url(request.param)


def test_a_flush_between_listing_segments_and_the_checkpoint_is_covered(url: str) -> None:
    model = {f"k{i}": b"old" for i in range(5)}
    with inkpen.open(url, **QUIET) as book:
        for key, value in model.items():
            book.put("r", key, value)
        store = HookedStore(open_store(url))

        def writer_moves_on() -> None:
            # Lands after the Reader listed the journal and before its checkpoint's CAS: the
            # flushed ledger names SQNs of segments that listing never saw.
            for key, value in {"k0": b"new", "late": b"late"}.items():
                book.put("r", key, value)
                model[key] = value
            book.flush()

        store.after_list("journal/", writer_moves_on)
        with inkpen.open_reader(store, checkpoint_lifetime=60.0) as reader:
            assert store.fired == ["journal/"]
            seen = {key.decode(): value for _, key, value in reader.objects("r")}
            assert seen == model
            assert reader.get("r", "late") == b"late"
        store.close()
