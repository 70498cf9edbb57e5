"""The S3 store on obstore (the default client) against the real SeaweedFS the suite starts.

The whole conformance suite (``test_objectstore.py``) runs on it by default, and on boto3 with
``INKPEN_S3_CLIENT=boto3``; these cases run in every suite run, naming both clients:
choosing the client, reading what the other client wrote,
inkpen's string prefixes over object_store's segment listing, the create-if-absent race and its
read-back, and the errors a user meets first.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import obstore
import pytest
from obstore.store import S3Store as RawS3Store

import inkpen
from inkpen.errors import AlreadyExistsError, StoreError, UsageError
from inkpen.objectstore import open_store
from inkpen.objectstore.base import PUT_ID_METADATA_KEY
from inkpen.objectstore.s3 import S3Store
from inkpen.objectstore.s3_obstore import ObstoreS3Store, map_obstore_error
from support.seaweed import SeaweedServer, free_loopback_ports

pytestmark = pytest.mark.s3
RACERS = 8


@pytest.fixture
def urls(make_store_url: Callable[[str], str]) -> tuple[str, str]:
    """One fresh S3 root, as a boto3 URL and as an obstore URL."""
    url = make_store_url("s3")
    return url + "&client=boto3", url + "&client=obstore"


def test_the_url_option_picks_the_client(
    urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    boto_url, ob_url = urls
    with open_store(boto_url) as boto, open_store(ob_url) as ob:
        assert isinstance(boto, S3Store)
        assert isinstance(ob, ObstoreS3Store)
        assert "client=obstore" in ob.url
    plain = boto_url.replace("&client=boto3", "")
    monkeypatch.delenv("INKPEN_S3_CLIENT", raising=False)
    with open_store(plain) as default:
        assert isinstance(default, ObstoreS3Store)  # obstore is the default client
    monkeypatch.setenv("INKPEN_S3_CLIENT", "boto3")
    with open_store(plain) as chosen:
        assert isinstance(chosen, S3Store)
    with pytest.raises(UsageError, match="client='curl' must be one of boto3, obstore"):
        open_store(boto_url.replace("client=boto3", "client=curl"))


def test_each_client_reads_what_the_other_wrote(urls: tuple[str, str]) -> None:
    boto_url, ob_url = urls
    with open_store(boto_url) as boto, open_store(ob_url) as ob:
        boto.put_if_absent("a/one", b"from boto3", metadata={"colour": "blue"})
        ob.put_if_absent("a/two", b"from obstore", metadata={"shape": "round"})
        for store in (boto, ob):
            assert store.get("a/one") == b"from boto3"
            assert store.get("a/two") == b"from obstore"
            assert store.get_range("a/two", 5, 100) == b"obstore"
            assert store.head("a/one").metadata == {"colour": "blue"}
            assert store.head("a/two").metadata == {"shape": "round"}
            assert store.head("a/two").size == len(b"from obstore")
            assert [i.key for i in store.list("a/")] == ["a/one", "a/two"]
        with pytest.raises(AlreadyExistsError):
            ob.put_if_absent("a/one", b"again")
        with pytest.raises(AlreadyExistsError):
            boto.put_if_absent("a/two", b"again")
        assert ob.get("a/one") == b"from boto3"
        assert boto.get("a/two") == b"from obstore"


def test_string_prefixes_list_as_on_boto3(urls: tuple[str, str]) -> None:
    """object_store lists by path segment; inkpen's prefixes are plain string prefixes.

    No key here is also the directory of another: SeaweedFS's ``StartAfter`` skips the keys
    under such a key (``a/b`` hides ``a/b/x``), whichever client asks."""
    boto_url, ob_url = urls
    keys = ["a/a", "a/b", "a/ba", "a/bb/c", "a/bc/x/y", "a/c", "b", "ba/x", "bb"]
    with open_store(boto_url) as boto, open_store(ob_url) as ob:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda key: boto.put(key, key.encode()), keys))
        for prefix in ("", "a", "a/", "a/b", "a/bc/", "a/bc/x", "b", "ba/", "c", "a/bz"):
            expected = sorted(k for k in keys if k.startswith(prefix))
            assert [i.key for i in ob.list(prefix)] == expected, prefix
            assert [i.key for i in boto.list(prefix)] == expected, prefix
            walked: list[str] = []
            token: str | None = None
            while True:
                page = ob.list_page(prefix, token=token, limit=2)
                assert len(page.objects) <= 2
                walked.extend(i.key for i in page.objects)
                if page.next_token is None:
                    break
                token = page.next_token
            assert walked == expected, prefix


def test_create_if_absent_race_has_exactly_one_winner(urls: tuple[str, str]) -> None:
    _, ob_url = urls
    with open_store(ob_url) as store:
        for round_ in range(3):
            key = f"race/{round_}"
            barrier = threading.Barrier(RACERS, timeout=60)
            outcomes: list[str] = []

            def race(
                i: int,
                key: str = key,
                barrier: threading.Barrier = barrier,
                outcomes: list[str] = outcomes,
            ) -> None:
                barrier.wait()
                try:
                    store.put_if_absent(key, f"racer {i}".encode())
                    outcomes.append(f"racer {i}")
                except AlreadyExistsError:
                    outcomes.append("refused")

            with ThreadPoolExecutor(max_workers=RACERS) as pool:
                list(pool.map(race, range(RACERS)))
            winners = [o for o in outcomes if o != "refused"]
            assert len(winners) == 1, outcomes
            assert store.get(key) == winners[0].encode()


def test_a_refused_create_that_finds_its_own_put_id_succeeds(
    urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """object_store retries by itself: when an earlier attempt of the same call landed, the
    retry is refused, and the store must recognise its own put id and report success."""
    boto_url, ob_url = urls
    put_id = uuid.uuid4()
    with open_store(boto_url) as boto, open_store(ob_url) as ob:
        assert isinstance(boto, S3Store)
        # What the first attempt left: the object, carrying this call's put id.
        boto.client.put_object(
            Bucket=boto.bucket,
            Key=f"{boto.prefix}/cas",
            Body=b"ours",
            Metadata={PUT_ID_METADATA_KEY: put_id.hex},
        )
        monkeypatch.setattr("inkpen.objectstore.s3_obstore.uuid.uuid4", lambda: put_id)
        ob.put_if_absent("cas", b"ours")
        monkeypatch.undo()
        assert ob.get("cas") == b"ours"
        with pytest.raises(AlreadyExistsError):
            ob.put_if_absent("cas", b"someone else")


def test_missing_bucket_and_unreachable_endpoint(seaweed: SeaweedServer) -> None:
    with pytest.raises(UsageError, match=r"does not exist.*create it"):
        open_store(f"s3://no-such-bucket-here/db?endpoint={seaweed.endpoint}&client=obstore")
    (port,) = free_loopback_ports(1)
    endpoint = f"http://127.0.0.1:{port}"
    with pytest.raises(StoreError) as caught:
        open_store(f"s3://bucket/db?endpoint={endpoint}&max_attempts=1&client=obstore")
    assert caught.value.definite is True
    assert endpoint in str(caught.value)


def test_a_database_on_obstore_reopens_on_boto3(urls: tuple[str, str]) -> None:
    boto_url, ob_url = urls
    model = {f"k{i:03d}".encode(): f"v{i}".encode() * 20 for i in range(200)}
    with inkpen.open(ob_url) as book:
        for key, value in model.items():
            book.put(b"b", key, value)
        assert book.get(b"b", b"k007") == model[b"k007"]
    with inkpen.open(boto_url) as book:
        assert {key: book.get(b"b", key) for key in model} == model


def test_a_write_that_could_not_connect_after_a_retry_may_have_landed() -> None:
    """object_store reports only its last attempt's failure: a refused connection after a
    retry may hide an earlier attempt that was sent whole and lost its answer, so a write
    failing so is of unknown outcome; with no retry, or for a read, it is definite."""
    (port,) = free_loopback_ports(1)

    def refused(retries: int) -> Exception:
        raw = RawS3Store(
            "bucket",
            endpoint=f"http://127.0.0.1:{port}",
            region="us-east-1",
            access_key_id="key",
            secret_access_key="secret",
            client_options={"allow_http": True},
            retry_config={
                "max_retries": retries,
                "backoff": {"init_backoff": timedelta(milliseconds=5)},
                "retry_timeout": timedelta(seconds=30),
            },
        )
        with pytest.raises(Exception) as caught:
            obstore.put(raw, "k", b"v", mode="create")
        return caught.value

    def mapped(exc: Exception, action: str) -> StoreError:
        error = map_obstore_error(exc, action=action, key="k", where="here")
        assert isinstance(error, StoreError)
        return error

    assert mapped(refused(0), "put_if_absent").definite is True
    after_retries = refused(2)
    for action in ("put_if_absent", "put", "delete", "copy"):
        unknown = mapped(after_retries, action)
        assert unknown.definite is False and "after 2 retries" in str(unknown)
    assert mapped(after_retries, "get").definite is True
