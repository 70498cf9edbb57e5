"""The writer's side of external compaction for the journal: adopting compacted files.

With ``compaction="external"`` the Inker compacts nothing; a compactor process replaces journal
files in the manifest (:mod:`inkpen.actors.engine.compactor`). The Inker adopts the manifest's
journal files after each of its own commits (rolls merge into the latest manifest) and on a
timer (:data:`WATCH_INTERVAL`, reading the keeper's latest manifest, which the Penciller's watch
refreshes): :func:`adopt` answers the files to hold (known ones keep their handles, new ones
are opened) and those the compactor replaced, which the Inker sets to delete_pending.

Pure apart from ``open_missing``; no actors here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from inkpen.actors.kernel.views import JournalHandle
from inkpen.manifest.model import JournalFileDescriptor

WATCH_INTERVAL = 0.5
"""Seconds between the Inker's looks at the keeper's latest manifest."""


def adopt(
    current: Mapping[str, JournalHandle],
    wanted: Sequence[JournalFileDescriptor],
    open_missing: Callable[[list[JournalFileDescriptor]], Sequence[JournalHandle]],
) -> tuple[dict[str, JournalHandle], list[JournalHandle]]:
    """The journal files of ``wanted`` (a manifest's ``journal.files``) by name, as handles, and
    the handles of ``current`` it no longer holds."""
    files = {d.name: current[d.name] for d in wanted if d.name in current}
    missing = [d for d in wanted if d.name not in current]
    if missing:
        files.update((h.name, h) for h in open_missing(missing))
    dropped = [h for name, h in current.items() if name not in files]
    return files, dropped
