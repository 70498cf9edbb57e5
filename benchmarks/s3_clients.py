"""boto3 (botocore, inkpen's S3 client) against obstore (the Rust object_store crate) on SeaweedFS.

    pip install obstore && python benchmarks/s3_clients.py [--requests 300] [--threads 1,16]

Starts a SeaweedFS server on loopback (``inkpen.objectstore.seaweed``), then for each client and
each thread count sends the requests inkpen's S3 store makes: a small GET (1 KiB object), a
ranged GET (4 KiB out of a 256 KiB object), a small PUT (1 KiB, overwrite), a conditional PUT
(``If-None-Match: *`` on a fresh key), a LIST of a prefix holding 1,000 keys, and a DELETE.
Prints per-request latency (p50 and p99, ms) and the CPU time of this process per request (us;
process time, so it counts obstore's runtime threads as well as Python's; SeaweedFS runs in its
own process and is not counted). The boto3 client is the one ``S3Store`` builds (adaptive
retries, 64 pooled connections); obstore's is configured alike (path-style, HTTP allowed).

Before timing, it checks what inkpen's store protocol needs of obstore against this server:
create-if-absent refused with ``AlreadyExistsError``, user metadata written and read back,
listing after a key (S3 ``StartAfter``), a ranged GET past the end, copy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError as ObAlreadyExists
from obstore.store import S3Store as ObS3Store

from inkpen.objectstore.s3 import S3Store
from inkpen.objectstore.seaweed import DUMMY_CREDENTIALS, start_seaweed

SMALL = os.urandom(1024)
LARGE = os.urandom(256 * 1024)
LIST_KEYS = 1000


class Boto:
    """The botocore client inkpen's ``S3Store`` uses, called as it calls it."""

    name = "boto3"

    def __init__(self, endpoint: str, bucket: str) -> None:
        self.store = S3Store(bucket, "", {"endpoint": endpoint})
        self.client = self.store.client
        self.bucket = bucket

    def get(self, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        response = self.client.get_object(
            Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}"
        )
        return bytes(response["Body"].read())

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data, Metadata={})

    def put_if_absent(self, key: str, data: bytes) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=data,
            Metadata={"inkpen-put-id": uuid.uuid4().hex},
            IfNoneMatch="*",
        )

    def list(self, prefix: str) -> int:
        response = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1000)
        return len(response.get("Contents", ()))

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def close(self) -> None:
        self.store.close()


class Ob:
    """obstore's S3 store, configured as inkpen's boto3 client is."""

    name = "obstore"

    def __init__(self, endpoint: str, bucket: str) -> None:
        self.store = ObS3Store(
            bucket,
            endpoint=endpoint,
            region="us-east-1",
            access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            virtual_hosted_style_request=False,
            client_options={"allow_http": True, "pool_max_idle_per_host": "64"},
        )

    def get(self, key: str) -> bytes:
        return bytes(obstore.get(self.store, key).bytes())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return bytes(obstore.get_range(self.store, key, start=start, end=end))

    def put(self, key: str, data: bytes) -> None:
        obstore.put(self.store, key, data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        obstore.put(
            self.store,
            key,
            data,
            mode="create",
            attributes={"inkpen-put-id": uuid.uuid4().hex},
        )

    def list(self, prefix: str) -> int:
        return sum(len(chunk) for chunk in obstore.list(self.store, prefix, chunk_size=1000))

    def delete(self, key: str) -> None:
        obstore.delete(self.store, key)

    def close(self) -> None:
        pass


def check_obstore(ob: Ob, boto: Boto) -> list[str]:
    """What inkpen's ObjectStore protocol needs, tried against this server; returns findings."""
    found: list[str] = []
    key = f"check/{uuid.uuid4().hex}"
    ob.put_if_absent(key, b"first")
    try:
        ob.put_if_absent(key, b"second")
        found.append("create-if-absent over an existing key: ACCEPTED (overwrote)")
    except ObAlreadyExists:
        found.append("create-if-absent over an existing key: AlreadyExistsError")
    except Exception as exc:
        found.append(f"create-if-absent over an existing key: {type(exc).__name__}: {exc}")
    found.append(f"  bytes after the refused create: {ob.get(key)!r}")
    meta = boto.client.head_object(Bucket=boto.bucket, Key=key).get("Metadata", {})
    found.append(f"  user metadata written by obstore, as boto3 reads it: {meta}")
    result = obstore.get(ob.store, key, options={"head": True})
    found.append(f"  attributes obstore reads back (GET with head=True): {result.attributes}")
    info = obstore.head(ob.store, key)
    found.append(f"  obstore head(): {sorted(info)} (no user metadata field)")
    for name in ("a", "b", "c"):
        ob.put(f"check-list/{name}", b"x")
    after = [
        m["path"] for c in obstore.list(ob.store, "check-list/", offset="check-list/a") for m in c
    ]
    found.append(f"  list after check-list/a: {after}")
    try:
        got = ob.get_range(key, 100, 200)
        found.append(f"  ranged GET past the end: {got!r}")
    except Exception as exc:
        found.append(f"  ranged GET past the end: {type(exc).__name__} (inkpen wants b'')")
    obstore.copy(ob.store, key, key + "-copy")
    found.append(f"  copy: {ob.get(key + '-copy')!r}")
    return found


def run(op: Callable[[int], object], count: int, threads: int) -> tuple[list[float], float]:
    """Call ``op(i)`` for i in range(count) from ``threads`` threads; per-call latencies (s)
    and the process CPU seconds spent."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        mine = latencies[t]
        barrier.wait()
        for i in range(t, count, threads):
            started = time.perf_counter()
            op(i)
            mine.append(time.perf_counter() - started)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    cpu = time.process_time()
    barrier.wait()
    for thread in pool:
        thread.join()
    return [x for part in latencies for x in part], time.process_time() - cpu


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench(client: Any, requests: int, threads: int) -> None:
    run_id = uuid.uuid4().hex[:8]
    lists = max(16, requests // 10)
    ops: list[tuple[str, Callable[[int], object], int]] = [
        ("GET 1 KiB", lambda i: client.get(f"bench/small/{i % 64}"), requests),
        (
            "GET 4 KiB range",
            lambda i: client.get_range(
                "bench/large", (i * 4096) % (252 * 1024), (i * 4096) % (252 * 1024) + 4096
            ),
            requests,
        ),
        ("PUT 1 KiB", lambda i: client.put(f"bench/put/{run_id}/{i}", SMALL), requests),
        (
            "PUT if-none-match",
            lambda i: client.put_if_absent(f"bench/cas/{run_id}/{i}", SMALL),
            requests,
        ),
        ("LIST 1,000 keys", lambda i: client.list("bench/list/"), lists),
        ("DELETE", lambda i: client.delete(f"bench/put/{run_id}/{i}"), requests),
    ]
    for name, op, count in ops:
        op(count + 1)  # warm the connection pool and any lazy set-up (a key not timed)
        latencies, cpu = run(op, count, threads)
        if name == "LIST 1,000 keys":
            assert client.list("bench/list/") == LIST_KEYS
        print(
            f"{client.name:8s} threads={threads:<3d} {name:18s} n={count:<5d} "
            f"p50 {pct(latencies, 0.5) * 1e3:7.2f} ms  p99 {pct(latencies, 0.99) * 1e3:7.2f} ms  "
            f"mean {statistics.fmean(latencies) * 1e3:7.2f} ms  "
            f"cpu {cpu / count * 1e6:7.0f} us/req",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--threads", default="1,16")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    os.environ.update(DUMMY_CREDENTIALS)
    server = start_seaweed(Path(tempfile.mkdtemp(prefix="inkpen-s3-bench-")))
    try:
        bucket = server.new_bucket()
        boto, ob = Boto(server.endpoint, bucket), Ob(server.endpoint, bucket)
        print(f"obstore {obstore.__version__}, SeaweedFS at {server.endpoint}")
        for line in check_obstore(ob, boto):
            print(line)
        for i in range(64):
            boto.put(f"bench/small/{i}", SMALL)
        boto.put("bench/large", LARGE)
        for i in range(LIST_KEYS):
            boto.put(f"bench/list/{i:05d}", b"x")
        for _ in range(args.rounds):
            for threads in (int(t) for t in args.threads.split(",")):
                for client in (boto, ob):
                    bench(client, args.requests, threads)
        boto.close()
        ob.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
