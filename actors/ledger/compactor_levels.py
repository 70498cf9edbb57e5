"""The writer's side of external compaction: adopting the levels a compactor committed.

With ``compaction="external"`` the Penciller runs no merges; a compactor process replaces files
in the manifest (:mod:`inkpen.actors.engine.compactor`). The Penciller learns of it from the
manifests it commits (each L0 commit merges into the latest manifest, :func:`~inkpen.manifest.
merging.add_l0`) and from a poll (:data:`WATCH_INTERVAL`), and then *adopts* the manifest's
levels: :func:`adopt` answers the new levels (files the Penciller already holds keep their
handles, the others are opened) and the files the compactor replaced, which the Penciller sets
to delete_pending at that manifest's id, so a snapshot that still reads them keeps them.

Pure apart from ``open_missing``; no actors here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inkpen.actors.kernel.views import SstHandle
from inkpen.manifest.levels import Levels
from inkpen.manifest.model import SstDescriptor

WATCH_INTERVAL = 0.5
"""Seconds between the Penciller's looks at the manifest for a compactor's commits."""

WATCH_INTERVAL_HELD = 0.1
"""The same while L0 is full and writers are held back waiting for a compactor."""


def same_files(current: Levels[SstHandle], wanted: Sequence[Sequence[SstDescriptor]]) -> bool:
    """Whether ``current`` holds exactly ``wanted``'s files, level by level, in order."""
    mine = [[h.name for h in level] for level in current.files]
    theirs = [[d.name for d in level] for level in wanted]
    while theirs and not theirs[-1]:
        theirs.pop()
    return mine == theirs


def adopt(
    current: Levels[SstHandle],
    wanted: Sequence[Sequence[SstDescriptor]],
    open_missing: Callable[[list[SstDescriptor]], Sequence[SstHandle]],
    known: Sequence[SstHandle] = (),
) -> tuple[Levels[SstHandle], list[SstHandle]]:
    """The levels of ``wanted`` (a manifest's ``ledger.levels``) as handles, and the handles of
    ``current`` it no longer holds. ``known``: handles not in ``current`` yet (a just-written L0
    file); everything else is opened with ``open_missing``."""
    handles = {h.name: h for h in current.all_files()}
    handles.update((h.name, h) for h in known)
    missing = [d for level in wanted for d in level if d.name not in handles]
    if missing:
        handles.update((h.name, h) for h in open_missing(missing))
    levels = Levels(tuple(tuple(handles[d.name] for d in level) for level in wanted))
    named = {d.name for level in wanted for d in level}
    held = {h.name: h for h in (*current.all_files(), *known)}
    dropped = [h for name, h in held.items() if name not in named]
    return levels, dropped
