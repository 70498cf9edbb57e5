"""Feed cursors: named change-feed positions kept in the manifest, holding the journal.

A :class:`~inkpen.manifest.model.FeedCursor` says "this consumer has read every change up to SQN
``sqn``". Its protocol, all by CAS update of the manifest (any process, with or without a writer):

* **create** ``(name, sqn=0, lifetime=None, owner=None)``: adds the cursor; a name already
  present is a :class:`~inkpen.errors.UsageError` (advance or delete it instead). With a lifetime
  the cursor expires ``lifetime`` seconds after its creation or its last advance. ``owner`` is
  free text saying who made it (``inkpen feed list`` shows it).
* **advance** ``(name, sqn)``: moves it to ``sqn`` and renews its expiry (the same SQN only
  renews). Forward it may go up to the database's last SQN. Back it may go only over changes the
  journal still holds whole (compaction may have dropped, and rolls left to the ledger, what lay
  below the old position): otherwise :class:`~inkpen.errors.FeedGapError` names the first SQN it
  does not hold. An expired cursor cannot be advanced (compaction may have acted on its
  expiry): create it again.

Both are checked against a :class:`FeedHistory`, the database's change history as the process
making the change sees it (the writer: its own; another process: a Reader's lease on the latest
state, whose segments hold every acknowledged write). A cursor above its last SQN is a
:class:`~inkpen.errors.UsageError` naming that SQN. A move back is checked by reading the journal
over the range, then made by a CAS update that finds the same journal files over that range
(else it is checked again): once it has landed, a compaction, roll or re-roll that judged
against the old position refuses its commit (see below), so nothing it held is let go of.
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
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from inkpen.checks import MAX_NAME, check_seconds
from inkpen.checks import check_name as check_name_of
from inkpen.checks import check_sqn as check_sqn_of
from inkpen.errors import FeedGapError, InkpenError, NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.model import FeedCursor, Manifest, VersionedManifest
from inkpen.manifest.store import ManifestStore

log = get_logger("inkpen.manifest.feed_cursors")

MAX_CHECKS = 8
"""How many times a move back is checked again because the journal changed under it."""


@dataclass(frozen=True, slots=True)
class NotHeld:
    """What a journal holds of the SQNs in ``(since, upto]``: the first and the last of them it
    does not hold whole (None, None: it holds them all), and the journal files it read them in."""

    first: int | None
    last: int | None
    files: frozenset[str]


class FeedHistory(Protocol):
    """The change history a cursor is checked against, as one process sees it."""

    def last_sqn(self) -> int:
        """The database's last SQN: that of the newest change acknowledged to a writer's caller
        (every write acknowledged before this question was asked counts)."""
        ...

    def not_held(self, since: int, upto: int) -> NotHeld:
        """Which changes in ``(since, upto]`` the journal does not hold whole: absent (dropped by
        compaction), only their key changes, or a put whose value left the journal for the
        ledger (gone with its next write). Read from views taken now."""
        ...


def not_held_in(
    present: Iterable[tuple[int, bool]], since: int, upto: int
) -> tuple[int | None, int | None]:
    """The first and last SQN in ``(since, upto]`` not held whole, from ``present``: each SQN a
    journal holds, ascending, with whether its change is there whole (None, None: all are)."""
    first: int | None = None
    last: int | None = None
    expected = since + 1
    for sqn, whole in present:
        if sqn <= since:
            continue
        if sqn > upto:
            break
        if sqn != expected or not whole:
            first = expected if first is None else first
            last = sqn if not whole else sqn - 1
        expected = sqn + 1
    if expected <= upto:  # the journal ends below ``upto``
        first = expected if first is None else first
        last = upto
    return first, last


def files_over(manifest: Manifest, since: int, upto: int) -> frozenset[str]:
    """The journal files of ``manifest`` that hold SQNs in ``(since, upto]``."""
    return frozenset(
        f.name for f in manifest.journal.files if f.max_sqn > since and f.min_sqn <= upto
    )


def _past_the_end(name: str, sqn: int, last: int, url: str) -> UsageError:
    return UsageError(
        f"feed cursor {name!r} cannot be at SQN {sqn}: the last SQN of {url} is {last}, so no "
        f"consumer can have read up to {sqn}; give an SQN from 0 to {last}"
    )


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
    history: FeedHistory | None = None,
) -> FeedCursor:
    """Add the cursor ``name`` at ``sqn`` (see the module docstring); answers it.

    ``exist_ok``: a live cursor of that name is answered as it is (an expired one is replaced).
    ``history``: refuse an ``sqn`` above its last SQN (None: unchecked, for callers that know
    ``sqn`` was read from the database).
    """
    check_name(name)
    check_sqn(sqn)
    life = check_lifetime(lifetime)
    check_owner(owner)
    url = manifests.url
    if history is not None:
        last = history.last_sqn()
        if sqn > last:
            raise _past_the_end(name, sqn, last, url)

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


class _CheckAgain(Exception):
    """Inside a move back's CAS: the journal over the range is not the one checked."""

    def __init__(self, upto: int) -> None:
        super().__init__(upto)
        self.upto = upto


def advance_feed_cursor(
    manifests: ManifestStore, name: str, sqn: int, *, history: FeedHistory | None = None
) -> FeedCursor:
    """Move the cursor ``name`` to ``sqn`` and renew its expiry; answers it.

    Without ``history`` only forward (a move back is a :class:`UsageError`); with it, up to its
    last SQN, and back over changes the journal still holds whole (see the module docstring).
    """
    check_name(name)
    check_sqn(sqn)
    url = manifests.url
    last = None if history is None else history.last_sqn()
    if last is not None and sqn > last:
        raise _past_the_end(name, sqn, last, url)
    checked: list[tuple[int, frozenset[str]]] = []
    """The range ``(sqn, upto]`` found held, with the journal files that hold it."""
    stamp: list[float] = []

    def change(versioned: VersionedManifest) -> Manifest:
        now = time.time()
        found = _found(versioned, name, url)
        if not found.is_live(now):
            raise UsageError(
                f"feed cursor {name!r} expired at {found.expire_time}; compaction may have "
                "dropped what it held: delete it and create it again"
            )
        if sqn < found.sqn:
            if history is None or last is None:
                raise UsageError(
                    f"feed cursor {name!r} is at SQN {found.sqn}; it cannot move back to {sqn} "
                    "(compaction may already have dropped the changes in between)"
                )
            upto = min(found.sqn, last)  # above the last SQN there is nothing to hold
            held = files_over(versioned.manifest, sqn, upto)
            if upto > sqn and checked != [(upto, held)]:
                raise _CheckAgain(upto)
        expire = None if found.lifetime is None else now + found.lifetime
        moved = replace(found, sqn=sqn, expire_time=expire, advance_time=now)
        stamp[:] = [now] if sqn < found.sqn else []
        return _with(versioned.manifest, moved)

    def landed(latest: Manifest) -> bool:
        present = latest.feed_cursor(name)
        if present is None:
            return False
        if stamp:  # moved back: the latest shows this move, or a later change made on top
            return (present.advance_time or 0.0) >= stamp[0]
        return present.sqn >= sqn

    for _ in range(MAX_CHECKS):
        try:
            result = manifests.update_landed(
                change,
                landed,
                event="feed.cursor_landed_below_latest",
                subject=f"feed cursor {name!r} (moved to {sqn})",
                cursor=name,
                what="advanced",
            )
            break
        except _CheckAgain as again:
            assert history is not None
            found = history.not_held(sqn, again.upto)
            if found.first is not None:
                raise FeedGapError(
                    f"feed cursor {name!r} cannot move back to SQN {sqn}: the journal no "
                    f"longer holds the change at SQN {found.first} whole (journal compaction "
                    "dropped it, or its value left the journal for the ledger, where its next "
                    f"write replaces it); it can move back to SQN {found.last} at the lowest",
                    sqn=found.first,
                ) from None
            checked[:] = [(again.upto, found.files)]
    else:
        raise InkpenError(
            f"feed cursor {name!r} was not moved back to SQN {sqn}: the journal files over "
            f"that range changed {MAX_CHECKS} times while it was checked; try again"
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
    "FeedHistory",
    "Held",
    "HoldOutcome",
    "NotHeld",
    "advance_feed_cursor",
    "create_feed_cursor",
    "delete_feed_cursor",
    "hold_feed_cursor",
    "list_feed_cursors",
]
