"""Anti-entropy folds: tictac trees of a key range, built from the ledger alone.

:func:`build_tree` folds the live heads of a range (metadata only, no journal reads) into an
:class:`~inkpen.formats.tictac.TicTacTree`; with a :class:`~inkpen.actors.read.path.HeadFilter`
(``segments``, last-modified range) only the keys it keeps are added, so the tree of a few
segments is cheap to compare. The heads of differing segments come from
:func:`~inkpen.actors.read.path.fold_heads` with the same filter.
"""

from __future__ import annotations

from collections.abc import Iterator

from inkpen.formats.keys import Tag
from inkpen.formats.tictac import TicTacTree

from .path import HeadFilter, ViewSource, filtered_heads, object_bounds


def build_tree(
    source: ViewSource,
    bucket: bytes | None,
    start: bytes | None,
    end: bytes | None,
    now_ms: int,
    kept: HeadFilter,
    *,
    tag: Tag = Tag.OBJECT,
) -> Iterator[TicTacTree]:
    """Yield one tree of the live keys of the range that ``kept`` keeps (a fold of one item)."""
    cache, ledger, _ = source.views()
    lo, hi = object_bounds(bucket, start, end, tag=tag)
    tree = TicTacTree()
    tree.add_all(
        (key[1:], value[3]) for key, value in filtered_heads(cache, ledger, lo, hi, now_ms, kept)
    )
    yield tree
