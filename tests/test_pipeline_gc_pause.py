"""The collector pause of Spark tasks: off inside, restored after, on between a read's batches."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from inkpen.pipeline.gc_pause import paused, paused_between


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_restores_the_state_it_found_even_on_errors() -> None:
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block found it off and left it off
    assert gc.isenabled()
    with pytest.raises(ValueError), paused():
        raise ValueError("boom")
    assert gc.isenabled()
    gc.disable()
    with paused():
        pass
    assert not gc.isenabled()  # off before, off after


def test_batches_are_made_paused_and_handed_over_with_the_collector_on() -> None:
    seen: list[bool] = []

    def batches() -> Iterator[int]:
        for i in range(3):
            seen.append(gc.isenabled())
            yield i

    taken = []
    for item in paused_between(batches()):
        taken.append((item, gc.isenabled()))
    assert taken == [(0, True), (1, True), (2, True)]
    assert seen == [False, False, False]
    abandoned = paused_between(batches())
    assert next(abandoned) == 0
    assert gc.isenabled()  # an iterator left half read holds nothing off
    del abandoned
    assert gc.isenabled()
