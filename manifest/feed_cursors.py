"""Feed cursors: named change-feed positions kept in the manifest, holding the journal.

A :class:`~inkpen.manifest.model.FeedCursor` says "this consumer has read every change up to SQN
``sqn``". Its protocol, all by CAS update of the manifest (any process, with or without a writer):

* **create** ``(name, sqn=0, lifetime=None, owner=None)``: adds the cursor; a name already
  present is a :class:`~inkpen.errors.UsageError` (advance or delete it instead). With a lifetime
  the cursor expires ``lifetime`` seconds after its creation or its last advance. ``owner`` is
  free text saying who made it (``inkpen feed list`` shows it).
* **advance** ``(name, sqn)``: moves it forward (the same SQN only renews its expiry). A cursor
  never moves back: compaction may already have dropped what lies below its old position. An
  expired cursor cannot be advanced (compaction may have acted on its expiry): create it again.
* **delete** ``(name)``: removes it; a missing name is :class:`~inkpen.errors.NotFoundError`.
* **hold** ``(name, sqn, lifetime, owner, advance)``: what a long-running consumer (the Spark
  stream) does on each step, in one update: renew a live cursor with ``lifetime`` (and with
  ``advance`` move it forward to ``sqn``), or create it at ``sqn`` when it is missing or
  expired. The answer says which (:class:`Held`): after ``created`` / ``recreated`` on a resume,
  compaction may have dropped changes above ``sqn`` while there was no live cursor, and the
  consumer must check before it reads on.

Journal compaction keeps every journal entry above the lowest live cursor
(:meth:`~inkpen.manifest.model.Manifest.feed_floor`): the Inker's clerk judges entries against
``min(ledger snapshot SQN, floor)``, and its commit refuses (and retries) when the manifest it
commits onto holds a live cursor below the floor it judged with, so a cursor created while a
compaction runs is honoured too. GC deletes only files no active manifest names and segments
already rolled into journal files, so it never removes an entry the latest journal holds.

Every change is confirmed in the latest manifest
(:meth:`~inkpen.manifest.store.ManifestStore.update_landed`): a version written below the latest
(a slot the writer's GC collected between this process's read and its create) records a cursor
nobody sees, which would hold back no compaction; such a change is made again from the latest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Literal

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


def check_owner(owner: object) -> str | None:
    if owner is None:
        return None
    if not isinstance(owner, str) or len(owner) > 4 * MAX_NAME or not owner.isprintable():
        raise UsageError(
            f"a feed cursor's owner is printable text of at most {4 * MAX_NAME} characters, "
            f"got {owner!r}"
        )
    return owner


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
    owner: str | None = None,
) -> FeedCursor:
    """Add the cursor ``name`` at ``sqn`` (see the module docstring); answers it.

    ``exist_ok``: a live cursor of that name is answered as it is (an expired one is replaced).
    """
    check_name(name)
    check_sqn(sqn)
    life = check_lifetime(lifetime)
    check_owner(owner)
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
        return _with(versioned.manifest, _new(name, sqn, now, life, owner))

    result = manifests.update_landed(
        change,
        lambda latest: latest.feed_cursor(name) is not None,
        event="feed.cursor_landed_below_latest",
        subject=f"feed cursor {name!r} (created)",
        cursor=name,
        what="created",
    )
    cursor = _found(result, name, url)
    log.info(
        "feed.cursor_created", url=url, cursor=name, sqn=cursor.sqn, lifetime=life, owner=owner
    )
    return cursor


def _new(name: str, sqn: int, now: float, life: float | None, owner: str | None) -> FeedCursor:
    expire = None if life is None else now + life
    return FeedCursor(name, sqn, now, expire, life, owner=owner, advance_time=now)


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
        moved = replace(found, sqn=sqn, expire_time=expire, advance_time=now)
        return _with(versioned.manifest, moved)

    def landed(latest: Manifest) -> bool:
        present = latest.feed_cursor(name)
        return present is not None and present.sqn >= sqn

    result = manifests.update_landed(
        change,
        landed,
        event="feed.cursor_landed_below_latest",
        subject=f"feed cursor {name!r} (advanced to {sqn})",
        cursor=name,
        what="advanced",
    )
    log.debug("feed.cursor_advanced", url=url, cursor=name, sqn=sqn)
    return _found(result, name, url)


HoldOutcome = Literal["created", "recreated", "renewed"]


@dataclass(frozen=True, slots=True)
class Held:
    """What :func:`hold_feed_cursor` did: the cursor as it is now, and how it got there."""

    cursor: FeedCursor
    outcome: HoldOutcome
    """``created`` (there was none), ``recreated`` (it had expired; ``lapsed`` is the old one)
    or ``renewed`` (it was live)."""
    lapsed: FeedCursor | None = None


def hold_feed_cursor(
    manifests: ManifestStore,
    name: str,
    sqn: int,
    *,
    lifetime: float | None,
    owner: str | None = None,
    advance: bool = False,
) -> Held:
    """Keep the cursor ``name`` live for a consumer that may still read every change above ``sqn``.

    One CAS update: a live cursor gets ``lifetime`` from now (and, with ``advance``, moves
    forward to ``sqn``; it never moves back, so a cursor another consumer moved past ``sqn``
    stays where it is); a missing or expired one is created at ``sqn`` with ``lifetime`` and
    ``owner``. A live cursor keeps its owner (or takes ``owner`` when it has none).
    """
    check_name(name)
    check_sqn(sqn)
    life = check_lifetime(lifetime)
    check_owner(owner)
    url = manifests.url
    done: list[Held] = []

    def change(versioned: VersionedManifest) -> Manifest:
        now = time.time()
        done.clear()
        found = versioned.manifest.feed_cursor(name)
        if found is None or not found.is_live(now):
            made = _new(name, sqn, now, life, owner)
            outcome: HoldOutcome = "created" if found is None else "recreated"
            done.append(Held(made, outcome, found))
            return _with(versioned.manifest, made)
        kept = replace(
            found,
            sqn=max(found.sqn, sqn) if advance else found.sqn,
            expire_time=None if life is None else now + life,
            lifetime=life,
            owner=found.owner if found.owner is not None else owner,
            advance_time=now,
        )
        done.append(Held(kept, "renewed"))
        return _with(versioned.manifest, kept)

    def landed(latest: Manifest) -> bool:
        present = latest.feed_cursor(name)
        wanted = done[0].cursor.advance_time
        return present is not None and (wanted is None or (present.advance_time or 0.0) >= wanted)

    manifests.update_landed(
        change,
        landed,
        event="feed.cursor_landed_below_latest",
        subject=f"feed cursor {name!r} (held)",
        cursor=name,
        what="held",
    )
    held = done[0]
    if held.outcome == "renewed":
        log.debug("feed.cursor_renewed", url=url, cursor=name, sqn=held.cursor.sqn)
    else:
        log.info(
            "feed.cursor_held",
            url=url,
            cursor=name,
            sqn=sqn,
            outcome=held.outcome,
            lifetime=life,
            owner=owner,
            lapsed_at=None if held.lapsed is None else held.lapsed.expire_time,
        )
    return held


def delete_feed_cursor(manifests: ManifestStore, name: str) -> None:
    """Remove the cursor ``name``; :class:`NotFoundError` when there is none."""
    check_name(name)
    url = manifests.url

    def change(versioned: VersionedManifest) -> Manifest:
        _found(versioned, name, url)
        m = versioned.manifest
        return replace(m, feed_cursors=tuple(c for c in m.feed_cursors if c.name != name))

    manifests.update_landed(
        change,
        lambda latest: latest.feed_cursor(name) is None,
        event="feed.cursor_landed_below_latest",
        subject=f"feed cursor {name!r} (deleted)",
        cursor=name,
        what="deleted",
    )
    log.info("feed.cursor_deleted", url=url, cursor=name)


__all__ = [
    "Held",
    "HoldOutcome",
    "advance_feed_cursor",
    "create_feed_cursor",
    "delete_feed_cursor",
    "hold_feed_cursor",
    "list_feed_cursors",
]
