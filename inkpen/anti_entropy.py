"""Anti-entropy: find what differs between two databases without reading either in full.

:func:`compare_stores` takes two read handles (Readers at checkpoints, Snapshots or Bookies, or a
sharded data set's handles, whose tree is their shards' trees merged: so a data set compares
with a database, or with a data set of another shard count) and works the way Riak's tictac AAE
does over Leveled:

1. build each side's :class:`~inkpen.TicTacTree` of the range (a fold over ledger heads only: no
   journal reads; both sides at once);
2. compare the trees: the differing segment ids;
3. fold the heads of only those segments on each side and compare them key by key: a key on one
   side only is ``only-in-a`` / ``only-in-b``, a key whose content hash or size differs is
   ``different``.

Equal trees end it after step 2. Objects are identified by bucket and key (and subkey, for
head-only objects) and compared by content hash (BLAKE2b-64 of the value) and size, as ``head``
reports them; SQNs and timestamps are not compared (a restored copy has other SQNs and the same
objects).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, Protocol

from inkpen.actors.read.path import Head
from inkpen.formats.tictac import TicTacTree

Kind = Literal["only-in-a", "only-in-b", "different"]
ONLY_IN_A: Kind = "only-in-a"
ONLY_IN_B: Kind = "only-in-b"
DIFFERENT: Kind = "different"


class Side(Protocol):
    """What :func:`compare_stores` reads of each side: its tree, and heads of some segments."""

    def tictac_tree(self, bucket: str | bytes | None = None) -> TicTacTree: ...

    def heads(
        self, bucket: str | bytes | None = None, *, segments: Iterable[int] | None = None
    ) -> Iterator[tuple[bytes, bytes, Head]]: ...


@dataclass(frozen=True, slots=True)
class Difference:
    """One key that differs: its kind, and its head on each side (None where it is absent)."""

    kind: Kind
    bucket: bytes
    key: bytes
    a: Head | None
    b: Head | None
    subkey: bytes = b""
    """The subkey of a head-only object; empty for every other object."""


@dataclass(slots=True)
class Comparison:
    """What :func:`compare_stores` found."""

    differing_segments: list[int] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    heads_read: int = 0
    """Heads folded in step 3, both sides together."""

    @property
    def same(self) -> bool:
        return not self.differences


def _heads_of(
    side: Side, bucket: bytes | str | None, segments: list[int]
) -> dict[tuple[bytes, bytes, bytes], Head]:
    return {(b, k, head.subkey): head for b, k, head in side.heads(bucket, segments=segments)}


def compare_stores(
    a: Side,
    b: Side,
    *,
    bucket: str | bytes | None = None,
    phase: Callable[[str], object] = lambda _: None,
) -> Comparison:
    """Compare two databases by trees, then by heads of the differing segments (module doc).

    ``phase`` is told each step as it starts (for progress reports).
    """
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="inkpen-diff") as pool:
        phase("building tictac trees")
        trees = [pool.submit(side.tictac_tree, bucket) for side in (a, b)]
        tree_a, tree_b = (future.result() for future in trees)
        segments = tree_a.compare(tree_b)
        found = Comparison(differing_segments=segments)
        if not segments:
            return found
        phase(f"reading heads of {len(segments)} differing segments")
        folds = [pool.submit(_heads_of, side, bucket, segments) for side in (a, b)]
        heads_a, heads_b = (future.result() for future in folds)
    found.heads_read = len(heads_a) + len(heads_b)
    for where in sorted(heads_a.keys() | heads_b.keys()):
        ha, hb = heads_a.get(where), heads_b.get(where)
        if hb is None:
            kind: Kind = ONLY_IN_A
        elif ha is None:
            kind = ONLY_IN_B
        elif ha.content_hash != hb.content_hash or ha.size != hb.size:
            kind = DIFFERENT
        else:
            continue
        found.differences.append(Difference(kind, where[0], where[1], ha, hb, where[2]))
    return found
