"""inkpen's bloom filter (formats/bloom.py) against rbloom, a Rust (C-ABI) bloom filter.

    pip install rbloom && python benchmarks/bloom_compare.py [--sizes 10000,100000,1000000]

For each size n: build a filter of n ledger-like keys at 10 bits per key, then probe n keys that
are in it and n keys that are not; prints ns per key to build, ns per key to probe (present and
absent), the false-positive rate over the absent keys and the filter's size in bits per key.

inkpen's filter is stored in SSTs, so its bits must not depend on the process: rbloom's default
hash is Python's ``hash``, which is salted per process for bytes, so rbloom is measured three
ways, all giving a stable filter:

- ``rbloom+blake2b``: ``hash_func`` = 128-bit BLAKE2b of the key (a Python call per key);
- ``rbloom(int)``: the item is inkpen's 64-bit ``bloom_hash(key)`` (computed in Python, as
  inkpen's read path does once per lookup) and rbloom hashes that int with ``hash(int)``, which
  is not salted;
- ``inkpen(hash)``: inkpen's own ``may_contain_hash`` on the same precomputed hashes, the like
  for like of the one above;
- ``rbloom(int,id)``: the same ints with ``hash_func`` = the identity, since rbloom refuses to
  save (``save_bytes``) a filter on Python's ``hash``: the fastest form that can be stored.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from collections.abc import Callable

import rbloom

from inkpen.formats.bloom import BloomFilter, bloom_hash

BITS_PER_KEY = 10
# rbloom sizes its array as -n ln(p) / ln(2)^2 bits: this p gives 10 bits per key.
RBLOOM_FP = math.exp(-BITS_PER_KEY * math.log(2) ** 2)


def keys(n: int, salt: str) -> list[bytes]:
    return [f"o\x00users\x00{salt}-{i:010d}\x00".encode() for i in range(n)]


def blake128(item: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(item, digest_size=16).digest(), "big", signed=True)


def identity(item: int) -> int:
    return item


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def row(name: str, n: int, build: float, hit: float, miss: float, fp: int, bits: int) -> None:
    print(
        f"{name:16s} n={n:>9,}  build {build / n * 1e9:7.0f} ns/key  "
        f"probe present {hit / n * 1e9:6.0f} ns/key  absent {miss / n * 1e9:6.0f} ns/key  "
        f"fp {fp / n:.4%}  {bits / n:.2f} bits/key"
    )


def bench(n: int) -> None:
    present, absent = keys(n, "in"), keys(n, "out")

    # inkpen, from keys (what SstBuilder does: hash then from_hashes)
    build, bf = timed(lambda: BloomFilter.build(present, BITS_PER_KEY))
    assert isinstance(bf, BloomFilter)
    blob = bf.to_bytes()
    back = BloomFilter.from_bytes(blob)
    hit, found = timed(lambda: sum(map(back.may_contain, present)))
    assert found == n
    miss, fp = timed(lambda: sum(map(back.may_contain, absent)))
    row("inkpen", n, build, hit, miss, int(fp), bf.bit_count)  # type: ignore[call-overload]

    # rbloom with a stable hash function called per key
    def build_rb() -> rbloom.Bloom:
        made = rbloom.Bloom(n, RBLOOM_FP, blake128)
        made.update(present)
        return made

    build, rb = timed(build_rb)
    assert isinstance(rb, rbloom.Bloom)
    rb_back = rbloom.Bloom.load_bytes(rb.save_bytes(), blake128)
    hit, found = timed(lambda: sum(map(rb_back.__contains__, present)))
    assert found == n
    miss, fp = timed(lambda: sum(map(rb_back.__contains__, absent)))
    row("rbloom+blake2b", n, build, hit, miss, int(fp), rb.size_in_bits)  # type: ignore[call-overload]

    # precomputed 64-bit hashes: inkpen's may_contain_hash against rbloom on ints
    present_h = list(map(bloom_hash, present))
    absent_h = list(map(bloom_hash, absent))
    build, bfh = timed(lambda: BloomFilter.from_hashes(present_h, BITS_PER_KEY))
    assert isinstance(bfh, BloomFilter)
    hit, _ = timed(lambda: sum(map(bfh.may_contain_hash, present_h)))
    miss, fp = timed(lambda: sum(map(bfh.may_contain_hash, absent_h)))
    row("inkpen(hash)", n, build, hit, miss, int(fp), bfh.bit_count)  # type: ignore[call-overload]

    def build_ri() -> rbloom.Bloom:
        made = rbloom.Bloom(n, RBLOOM_FP)
        made.update(present_h)
        return made

    build, ri = timed(build_ri)
    assert isinstance(ri, rbloom.Bloom)
    hit, found = timed(lambda: sum(map(ri.__contains__, present_h)))
    assert found == n
    miss, fp = timed(lambda: sum(map(ri.__contains__, absent_h)))
    row("rbloom(int)", n, build, hit, miss, int(fp), ri.size_in_bits)  # type: ignore[call-overload]

    def build_rid() -> rbloom.Bloom:
        made = rbloom.Bloom(n, RBLOOM_FP, identity)
        made.update(present_h)
        return made

    build, rid = timed(build_rid)
    assert isinstance(rid, rbloom.Bloom)
    rid_back = rbloom.Bloom.load_bytes(rid.save_bytes(), identity)
    hit, found = timed(lambda: sum(map(rid_back.__contains__, present_h)))
    assert found == n
    miss, fp = timed(lambda: sum(map(rid_back.__contains__, absent_h)))
    row("rbloom(int,id)", n, build, hit, miss, int(fp), rid.size_in_bits)  # type: ignore[call-overload]
    hashing, _ = timed(lambda: list(map(bloom_hash, present)))
    print(f"{'':16s} (bloom_hash alone: {hashing / n * 1e9:.0f} ns/key)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    args = parser.parse_args()
    print(f"rbloom {rbloom.__version__ if hasattr(rbloom, '__version__') else '?'}")
    for n in (int(s) for s in args.sizes.split(",")):
        bench(n)


if __name__ == "__main__":
    main()
