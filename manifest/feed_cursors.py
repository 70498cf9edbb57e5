"""Feed cursors: named change-feed positions kept in the manifest, holding the journal.

A :class:`~inkpen.manifest.model.FeedCursor` says "this consumer has read every change up to SQN
``sqn``". Its protocol, all by CAS update of the manifest (any process, with or without a writer):

* **create** ``(name, sqn=0, lifetime=None)``: adds the cursor; a name already present is a
  :class:`~inkpen.errors.UsageError` (advance or delete it instead). With a lifetime the cursor
  expires ``lifetime`` seconds after its creation or its last advance.
* **advance** ``(name, sqn)``: moves it forward (the same SQN only renews its expiry). A cursor
  never moves back: compaction may already have dropped what lies below its old position. An
  expired cursor cannot be advanced (compaction may have acted on its expiry): create it again.
* **delete** ``(name)``: removes it; a missing name is :class:`~inkpen.errors.NotFoundError`.

Journal compaction keeps every journal entry above the lowest live cursor
(:meth:`~inkpen.manifest.model.Manifest.feed_floor`): the Inker's clerk judges entries against
``min(ledger snapshot SQN, floor)``, and its commit refuses (and retries) when the manifest it
commits onto holds a live cursor below the floor it judged with, so a cursor created while a
compaction runs is honoured too. GC deletes only files no active manifest names and segments
already rolled into journal files, so it never removes an entry the latest journal holds.
"""

from __future__ import annotations

import time
from dataclasses import replace

from inkpen.checks import MAX_NAME, check_seconds
from inkpen.checks import check_name as check_name_of
from inkpen.checks import check_sqn as check_sqn_of
from inkpen.errors import NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.model import FeedCursor, Manifest, VersionedManifest
from inkpen.manifest.store import ManifestStore

log = get_logger("inkpen.manifest.feed_cursors")


def check_name(name: object) -> str:
    return check_name_of("a feed cursor name", name, limit=MAX_NAME)


def check_sqn(sqn: object) -> int:
    return check_sqn_of("a feed cursor's sqn", sqn)


def check_lifetime(lifetime: object) -> float | None:
    if lifetime is None:
        return None
    return check_seconds("a feed cursor's lifetime", lifetime, above_minimum=True)


def _with(manifest: Manifest, cursor: FeedCursor) -> Manifest:
    kept = tuple(c for c in manifest.feed_cursors if c.name != cursor.name)
    return replace(manifest, feed_cursors=(*kept, cursor))


def _found(versioned: VersionedManifest, name: str, url: str) -> FeedCursor:
    found = versioned.manifest.feed_cursor(name)
    if found is None:
        raise NotFoundError(
            f"no feed cursor {name!r} in {url}; list them with `inkpen feed list URL`", key=name
        )
    return found


def list_feed_cursors(manifests: ManifestStore) -> tuple[FeedCursor, ...]:
    """The feed cursors of the latest manifest (expired ones included: see ``is_live``)."""
    latest = manifests.latest()
    if latest is None:
        raise NotFoundError(f"no inkpen database at {manifests.url}")
    return latest.manifest.feed_cursors


def create_feed_cursor(
    manifests: ManifestStore,
    name: str,
    sqn: int = 0,
    *,
    lifetime: float | None = None,
    exist_ok: bool = False,
) -> FeedCursor:
    """Add the cursor ``name`` at ``sqn`` (see the module docstring); answers it.

    ``exist_ok``: a live cursor of that name is answered as it is (an expired one is replaced).
    """
    check_name(name)
    check_sqn(sqn)
    life = check_lifetime(lifetime)
    url = manifests.url

    def change(versioned: VersionedManifest) -> Manifest | None:
        now = time.time()
        present = versioned.manifest.feed_cursor(name)
        if present is not None and (present.is_live(now) or not exist_ok):
            if exist_ok:
                return None
            raise UsageError(
                f"feed cursor {name!r} already exists in {url} (at SQN {present.sqn}); advance "
                "or delete it"
            )
        cursor = FeedCursor(name, sqn, now, None if life is None else now + life, life)
        return _with(versioned.manifest, cursor)

    result = manifests.update(change)
    cursor = _found(result, name, url)
    log.info("feed.cursor_created", url=url, cursor=name, sqn=cursor.sqn, lifetime=life)
    return cursor


def advance_feed_cursor(manifests: ManifestStore, name: str, sqn: int) -> FeedCursor:
    """Move the cursor ``name`` forward to ``sqn`` and renew its expiry; answers it."""
    check_name(name)
    check_sqn(sqn)
    url = manifests.url

    def change(versioned: VersionedManifest) -> Manifest:
        now = time.time()
        found = _found(versioned, name, url)
        if not found.is_live(now):
            raise UsageError(
                f"feed cursor {name!r} expired at {found.expire_time}; compaction may have "
                "dropped what it held: delete it and create it again"
            )
        if sqn < found.sqn:
            raise UsageError(
                f"feed cursor {name!r} is at SQN {found.sqn}; it cannot move back to {sqn} "
                "(compaction may already have dropped the changes in between)"
            )
        expire = None if found.lifetime is None else now + found.lifetime
        return _with(versioned.manifest, replace(found, sqn=sqn, expire_time=expire))

    result = manifests.update(change)
    log.debug("feed.cursor_advanced", url=url, cursor=name, sqn=sqn)
    return _found(result, name, url)


def delete_feed_cursor(manifests: ManifestStore, name: str) -> None:
    """Remove the cursor ``name``; :class:`NotFoundError` when there is none."""
    check_name(name)
    url = manifests.url

    def change(versioned: VersionedManifest) -> Manifest:
        _found(versioned, name, url)
        m = versioned.manifest
        return replace(m, feed_cursors=tuple(c for c in m.feed_cursors if c.name != name))

    manifests.update(change)
    log.info("feed.cursor_deleted", url=url, cursor=name)


__all__ = [
    "advance_feed_cursor",
    "create_feed_cursor",
    "delete_feed_cursor",
    "list_feed_cursors",
]
