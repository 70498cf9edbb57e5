"""Create-if-absent on S3 when the answer of the first attempt is lost, on both clients.

A real TCP proxy (:mod:`support.lossy_proxy`) sits between the client (boto3 or obstore) and the
real SeaweedFS the suite starts. It forwards the chosen conditional ``PUT`` (``If-None-Match:
*``), lets the server's answer arrive, and drops the client connection instead of passing the
answer on: reset (RST) or closed (FIN). The write has landed; the client only knows that it got
no answer. Whatever the client then does (retry and meet 412, or give up), inkpen must report
its own write as a success, and a write that truly lost to someone else's as "already exists".
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

import inkpen
from inkpen.errors import AlreadyExistsError
from inkpen.objectstore import open_store
from support.engine import TINY
from support.lossy_proxy import LossyProxy
from support.seaweed import SeaweedServer

pytestmark = pytest.mark.s3

CLIENTS = ("boto3", "obstore")
DROPS = ("reset", "close")
CREATE = {"If-None-Match": "*"}


@pytest.fixture
def proxy(seaweed: SeaweedServer) -> Iterator[LossyProxy]:
    with LossyProxy(seaweed.endpoint) as running:
        yield running


@pytest.fixture
def root(make_store_url: Callable[[str], str]) -> str:
    """A fresh S3 store root (its URL straight to the server, without a client option)."""
    return make_store_url("s3")


def _via(proxy: LossyProxy, url: str, seaweed: SeaweedServer, client: str) -> str:
    return url.replace(seaweed.endpoint, proxy.endpoint) + f"&client={client}"


def _prefix(url: str) -> str:
    """``bucket/root`` of an ``s3://bucket/root?...`` URL: the start of its objects' paths."""
    return url.removeprefix("s3://").split("?", 1)[0]


@pytest.mark.parametrize("how", DROPS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_create_whose_answer_is_lost_reports_success(
    proxy: LossyProxy, seaweed: SeaweedServer, root: str, client: str, how: str
) -> None:
    lost = proxy.lose_response_of(
        "PUT", f"/{_prefix(root)}/manifest/00001", headers=CREATE, how=how
    )
    with open_store(_via(proxy, root, seaweed, client)) as store:
        store.put_if_absent("manifest/00001", b"winner", metadata={"epoch": "1"})
        assert lost.lost.is_set()
        assert lost.status == 200  # the first attempt landed; its answer never came back
        assert store.get("manifest/00001") == b"winner"
        assert store.head("manifest/00001").metadata == {"epoch": "1"}
        with pytest.raises(AlreadyExistsError):
            store.put_if_absent("manifest/00001", b"loser")
    with open_store(root) as direct:
        assert direct.get("manifest/00001") == b"winner"


@pytest.mark.parametrize("how", DROPS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_create_of_an_object_someone_else_wrote_still_says_it_exists(
    proxy: LossyProxy, seaweed: SeaweedServer, root: str, client: str, how: str
) -> None:
    with open_store(root) as other:
        other.put_if_absent("manifest/00001", b"someone else's", metadata={"epoch": "7"})
    lost = proxy.lose_response_of(
        "PUT", f"/{_prefix(root)}/manifest/00001", headers=CREATE, how=how
    )
    with open_store(_via(proxy, root, seaweed, client)) as store:
        with pytest.raises(AlreadyExistsError):
            store.put_if_absent("manifest/00001", b"ours", metadata={"epoch": "8"})
        assert lost.lost.is_set()
        assert lost.status == 412  # refused the first time too: it was never ours
        assert store.get("manifest/00001") == b"someone else's"
        assert store.head("manifest/00001").metadata == {"epoch": "7"}


@pytest.mark.parametrize("how", DROPS)
@pytest.mark.parametrize("client", CLIENTS)
def test_puts_whose_segment_answers_are_lost_are_all_readable_after_reopening(
    proxy: LossyProxy, seaweed: SeaweedServer, root: str, client: str, how: str
) -> None:
    segments = f"/{_prefix(root)}/journal/0"
    rules = [
        proxy.lose_response_of("PUT", segments, headers=CREATE, how=how, skip=skip)
        for skip in (2, 5, 9)
    ]
    rng = random.Random(20)
    model: dict[str, bytes] = {}
    with inkpen.open(_via(proxy, root, seaweed, client), **TINY) as book:
        for i in range(40):
            key = f"k{rng.randrange(25):03}"
            value = f"v{i}-".encode() * rng.randrange(1, 40)
            book.put("b", key, value)  # acknowledged: it must survive
            model[key] = value
    assert [rule.lost.is_set() for rule in rules] == [True, True, True]
    assert [rule.status for rule in rules] == [200, 200, 200]
    with inkpen.open(root + f"&client={client}", **TINY) as again:
        assert {key: again.get("b", key) for key in model} == model
        assert [k.decode() for k in again.keys("b")] == sorted(model)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_batched_delete_whose_answer_is_lost_still_tells_each_key(
    proxy: LossyProxy, seaweed: SeaweedServer, root: str, client: str
) -> None:
    """The ``DeleteObjects`` request lands and its answer is lost: each key is then either
    reported gone or named with an error that says its delete may have happened (a client that
    retries or deletes key by key finds every key gone). Then every answer is lost: no key is
    reported gone, each failure is indefinite, and every object is gone all the same."""
    keys = [f"journal/{i:05d}.jnl" for i in range(30)]
    with open_store(root) as direct:
        for key in keys:
            direct.put(key, key.encode())
    lost = proxy.lose_response_of("POST", "?delete", how="reset")
    with open_store(_via(proxy, root, seaweed, client)) as store:
        result = store.delete_many(keys[:20])
        assert lost.lost.is_set()
        assert lost.status == 200  # the deletes were made; their answer never came back
        assert all(not error.definite for error in result.failed.values())
        assert [info.key for info in store.list("journal/")] == keys[20:]
        proxy.lose_all()
        result = store.delete_many(keys[20:])
        assert set(result.failed) == set(keys[20:])
        assert all(not error.definite for error in result.failed.values())
    with open_store(root) as direct:
        assert list(direct.list("journal/")) == []
