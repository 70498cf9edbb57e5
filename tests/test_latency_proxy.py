"""The latency proxy (``inkpen.cli.latency_proxy``) in front of the real SeaweedFS.

What it must do, checked from the client's side: add its round trip to every request (lower
bounds only: a busy machine may add more, never less), let many connections proceed at once,
carry every byte in order, cap a connection's bandwidth when asked, count each kind of S3
request, and end a client's connection when the server cannot be reached.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config

from inkpen.cli.latency_proxy import RequestCounter, Tally
from inkpen.objectstore.seaweed import DUMMY_CREDENTIALS, SeaweedServer, free_loopback_ports
from support.latency_proxy import LatencyProxy, Link, ProxyProcess, counts_delta

pytestmark = [pytest.mark.s3, pytest.mark.latency]

CONCURRENT = 32
SAMPLES = 15


def s3_client(endpoint: str) -> Any:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "total_max_attempts": 1},
            max_pool_connections=CONCURRENT,
        ),
    )


@pytest.fixture
def small_object(seaweed: SeaweedServer, seaweed_bucket: str) -> str:
    key = f"proxy/{uuid.uuid4().hex}"
    seaweed.client.put_object(Bucket=seaweed_bucket, Key=key, Body=b"x" * 100)
    return key


def presigned_path(endpoint: str, bucket: str, key: str) -> str:
    """The path and query of a presigned GET of ``key`` at ``endpoint``."""
    url = s3_client(endpoint).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600
    )
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


class Getter:
    """GETs of one object on one kept-alive HTTP connection to ``endpoint``, by a presigned URL
    (so a request costs the client next to nothing)."""

    def __init__(self, endpoint: str, path: str) -> None:
        self.path = path
        host, port = urlsplit(endpoint).hostname, urlsplit(endpoint).port
        assert host is not None and port is not None
        self.connection = http.client.HTTPConnection(host, port, timeout=60)

    def get(self) -> tuple[float, float]:
        """One GET: when it started and how long it took (s)."""
        started = time.perf_counter()
        self.connection.request("GET", self.path)
        response = self.connection.getresponse()
        body = response.read()
        took = time.perf_counter() - started
        assert response.status == 200 and body == b"x" * 100, (response.status, body[:200])
        return started, took

    def close(self) -> None:
        self.connection.close()


def test_a_request_through_the_proxy_takes_its_round_trip_more_than_direct(
    seaweed: SeaweedServer, seaweed_bucket: str, small_object: str, latency_proxy: ProxyProcess
) -> None:
    round_trip = latency_proxy.link.round_trip_s
    direct = Getter(
        seaweed.endpoint, presigned_path(seaweed.endpoint, seaweed_bucket, small_object)
    )
    endpoint = latency_proxy.endpoint
    proxied = Getter(endpoint, presigned_path(endpoint, seaweed_bucket, small_object))
    try:
        # A new connection's first request also waits for the handshake's round trip.
        _, first = proxied.get()
        assert first >= 2 * round_trip
        direct.get()
        direct_times, proxied_times = [], []
        for _ in range(SAMPLES):  # interleaved, so that a drift of the machine hits both
            direct_times.append(direct.get()[1])
            proxied_times.append(proxied.get()[1])
    finally:
        direct.close()
        proxied.close()
    assert min(proxied_times) >= round_trip  # the proxy's floor, whatever the server does
    assert statistics.median(proxied_times) >= min(direct_times) + round_trip


def test_concurrent_requests_through_the_proxy_overlap(
    seaweed: SeaweedServer, seaweed_bucket: str, small_object: str
) -> None:
    """32 requests on 32 connections at once take about one round trip together, not 32 (a
    100 ms round trip: 8 of them leave the machine's own delays room, 32 would take 3.2 s)."""
    link = Link.round_trip(0.1)
    round_trip = link.round_trip_s
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []
    go = threading.Barrier(CONCURRENT)

    def client(getter: Getter) -> None:
        try:
            getter.get()  # connected, handshake paid
            go.wait()
            started, took = getter.get()
            spans.append((started, started + took))
        except BaseException as exc:
            errors.append(exc)
            go.abort()

    with LatencyProxy(seaweed.endpoint, link) as proxy:
        path = presigned_path(proxy.endpoint, seaweed_bucket, small_object)
        getters = [Getter(proxy.endpoint, path) for _ in range(CONCURRENT)]
        threads = [threading.Thread(target=client, args=(g,)) for g in getters]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for getter in getters:
                getter.close()
    assert not errors, errors[0]
    assert len(spans) == CONCURRENT
    assert all(end - start >= round_trip for start, end in spans)
    together = max(end for _, end in spans) - min(start for start, _ in spans)
    assert together < 8 * round_trip, f"{CONCURRENT} requests took {together:.3f} s together"


@pytest.fixture(params=["session", "jittery"])
def any_proxy(
    request: pytest.FixtureRequest, seaweed: SeaweedServer
) -> Iterator[LatencyProxy | ProxyProcess]:
    """The session's proxy process, and one in this process whose jitter is 20 times its delay
    and whose window is small (so bytes are held back and queued out of step)."""
    if request.param == "session":
        yield request.getfixturevalue("latency_proxy")
        return
    link = Link(one_way=0.001, jitter=0.02, window=64 * 1024, seed=7)
    with LatencyProxy(seaweed.endpoint, link) as proxy:
        yield proxy


def test_a_large_object_crosses_the_proxy_byte_for_byte(
    seaweed: SeaweedServer, seaweed_bucket: str, any_proxy: LatencyProxy | ProxyProcess
) -> None:
    data = os.urandom(12 * 1024 * 1024 + 12345)
    key = f"proxy/large-{uuid.uuid4().hex}"
    client = s3_client(any_proxy.endpoint)
    before = any_proxy.counts()
    client.put_object(Bucket=seaweed_bucket, Key=key, Body=data)
    got = client.get_object(Bucket=seaweed_bucket, Key=key)["Body"].read()
    ranged = client.get_object(Bucket=seaweed_bucket, Key=key, Range="bytes=5000000-5999999")
    part = ranged["Body"].read()
    counted = counts_delta(any_proxy.counts(), before)
    assert got == data
    assert part == data[5_000_000:6_000_000]
    assert seaweed.client.get_object(Bucket=seaweed_bucket, Key=key)["Body"].read() == data
    assert counted["puts"] == 1 and counted["gets"] == 2 and counted["ranged_gets"] == 1
    assert counted["bytes_up"] > len(data) and counted["bytes_down"] > len(data) + len(part)


def test_a_bandwidth_cap_lower_bounds_the_transfer_time(
    seaweed: SeaweedServer, seaweed_bucket: str
) -> None:
    size, rate = 512 * 1024, 1024 * 1024.0
    data = os.urandom(size)
    key = f"proxy/capped-{uuid.uuid4().hex}"
    link = Link(one_way=0.001, jitter=0.0, bytes_per_s=rate)
    with LatencyProxy(seaweed.endpoint, link) as proxy:
        client = s3_client(proxy.endpoint)
        started = time.perf_counter()
        client.put_object(Bucket=seaweed_bucket, Key=key, Body=data)
        put_s = time.perf_counter() - started
        started = time.perf_counter()
        got = client.get_object(Bucket=seaweed_bucket, Key=key)["Body"].read()
        get_s = time.perf_counter() - started
    assert got == data
    assert put_s >= size / rate and get_s >= size / rate


def test_the_proxy_counts_each_kind_of_s3_request(
    seaweed: SeaweedServer, seaweed_bucket: str
) -> None:
    prefix = f"proxy/kinds-{uuid.uuid4().hex}/"
    with LatencyProxy(seaweed.endpoint, Link(one_way=0.0, jitter=0.0)) as proxy:
        client = s3_client(proxy.endpoint)
        before = proxy.counts()
        for name in ("a", "b", "c"):
            client.put_object(Bucket=seaweed_bucket, Key=prefix + name, Body=b"v" * 10)
        client.get_object(Bucket=seaweed_bucket, Key=prefix + "a")["Body"].read()
        client.get_object(Bucket=seaweed_bucket, Key=prefix + "a", Range="bytes=0-3")["Body"].read()
        client.head_object(Bucket=seaweed_bucket, Key=prefix + "b")
        client.list_objects_v2(Bucket=seaweed_bucket, Prefix=prefix)
        client.copy_object(
            Bucket=seaweed_bucket, Key=prefix + "d", CopySource=f"{seaweed_bucket}/{prefix}c"
        )
        client.delete_object(Bucket=seaweed_bucket, Key=prefix + "d")
        keys = [{"Key": prefix + name} for name in ("a", "b", "c")]
        client.delete_objects(Bucket=seaweed_bucket, Delete={"Objects": keys})
        counted = counts_delta(proxy.counts(), before)
    wanted = {
        "requests": 10,
        "puts": 3,
        "gets": 2,
        "ranged_gets": 1,
        "heads": 1,
        "lists": 1,
        "copies": 1,
        "deletes": 1,
        "delete_batches": 1,
        "batch_deleted_keys": 3,
        "multipart": 0,
        "other": 0,
        "unparsed": 0,
    }
    assert {name: counted[name] for name in wanted} == wanted
    listed = seaweed.client.list_objects_v2(Bucket=seaweed_bucket, Prefix=prefix)
    assert listed.get("KeyCount", 0) == 0


STREAM = [
    # a body that looks like a request must not be counted as one
    (
        b"PUT /b/k1 HTTP/1.1\r\nHost: h\r\nContent-Length: 21\r\n\r\nGET /b/x HTTP/1.1\r\n\r\n",
        "puts",
    ),
    (
        b"PUT /b/k2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1a\r\nGET /b/y HTTP/1.1\r\n\r\n12345\r\n0\r\nx-trailer: 1\r\n\r\n",
        "puts",
    ),
    (
        b"POST /b?delete HTTP/1.1\r\nContent-Length: 66\r\n\r\n"
        b"<Delete><Object><Key>a</Key></Object><Object><Key>b</Key></Object>",
        "delete_batches",
    ),
    (b"GET /b/k1 HTTP/1.1\r\nRange: bytes=0-1\r\n\r\n", "gets"),
    (b"HEAD /b/k1 HTTP/1.1\r\n\r\n", "heads"),
    (b"GET /b?list-type=2&prefix=p HTTP/1.1\r\n\r\n", "lists"),
    (b"PUT /b/k3 HTTP/1.1\r\nX-Amz-Copy-Source: b/k1\r\nContent-Length: 0\r\n\r\n", "copies"),
    (b"DELETE /b/k3 HTTP/1.1\r\n\r\n", "deletes"),
]


def counted_stream(pieces: list[bytes]) -> dict[str, int]:
    tally = Tally()
    counter = RequestCounter(tally)
    for piece in pieces:
        counter.feed(piece)
    return {name: value for name, value in tally.snapshot().items() if value}


def test_request_counting_finds_every_request_however_the_stream_is_cut() -> None:
    whole = b"".join(message for message, _ in STREAM)
    wanted = {
        "requests": len(STREAM),
        "puts": 2,
        "delete_batches": 1,
        "batch_deleted_keys": 2,
        "gets": 1,
        "ranged_gets": 1,
        "heads": 1,
        "lists": 1,
        "copies": 1,
        "deletes": 1,
    }
    assert counted_stream([whole]) == wanted
    for cut in range(1, len(whole)):
        assert counted_stream([whole[:cut], whole[cut:]]) == wanted, cut
    assert counted_stream([whole[i : i + 1] for i in range(len(whole))]) == wanted


def test_a_stream_that_is_not_http_is_relayed_uncounted() -> None:
    assert counted_stream([b"\x16\x03\x01 not an http request line\r\n\r\n"]) == {"unparsed": 1}


def test_a_client_of_an_unreachable_server_sees_its_connection_end() -> None:
    (port,) = free_loopback_ports(1)  # nothing listens there
    with (
        LatencyProxy(f"http://127.0.0.1:{port}", Link(one_way=0.001)) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock,
    ):
        sock.sendall(b"GET /b/k HTTP/1.1\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):  # a reset ends it too
            assert sock.recv(1024) == b""
