"""``inkpen feed list|create|delete|advance``: named change-feed cursors.

A feed cursor records how far a consumer of the change feed has read (an SQN); while it lives,
journal compaction keeps every change above the lowest live cursor. Each command is one
compare-and-swap manifest update (``list`` only reads) through the manifest layer; none bumps the
writer epoch, so a live writer keeps running and builds its next manifest update on top.

A sharded data set's SQNs are per shard, so its consumer keeps a cursor per shard, all under one
name: given a data set's URL, ``list`` lists every shard's cursors, ``create`` makes the cursor
in every shard (at SQN 0: another SQN belongs to one shard, so it needs ``--shard I``),
``delete`` removes it from every shard holding it, and ``advance`` needs ``--shard I``.

``create`` and ``advance`` check the SQN against the history the store holds (the latest
manifest and the segments a live writer has stored after it, so every acknowledged write counts),
read without writing (:mod:`inkpen.manifest.feed_history`).
"""

from __future__ import annotations

import getpass
import socket
import time
from typing import Any

import click

from inkpen.errors import NotFoundError
from inkpen.manifest.feed_cursors import (
    advance_feed_cursor,
    create_feed_cursor,
    delete_feed_cursor,
    list_feed_cursors,
)
from inkpen.manifest.feed_history import StoredHistory
from inkpen.manifest.model import FeedCursor

from . import render
from .data_sets import each_shard, refused, shard_option, target
from .durations import Duration
from .params import SQN
from .targets import database


def cursor_summary(cursor: FeedCursor, now: float) -> dict[str, Any]:
    """One feed cursor as a JSON-friendly dict."""
    advanced = cursor.create_time if cursor.advance_time is None else cursor.advance_time
    return {
        "name": cursor.name,
        "sqn": cursor.sqn,
        "owner": cursor.owner,
        "created": cursor.create_time,
        "age": max(0.0, now - cursor.create_time),
        "advanced": advanced,
        "expires": cursor.expire_time,
        "lifetime": cursor.lifetime,
        "live": cursor.is_live(now),
    }


def _default_owner() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"inkpen feed create by {user} on {socket.gethostname()}"


@click.group("feed")
def feed_group() -> None:
    """List, create, advance and delete feed cursors (never fences a live writer)."""


@feed_group.command("list")
@click.argument("url")
@click.option("--json", "as_json", is_flag=True, help="Print the cursors as JSON.")
@shard_option
def list_command(url: str, as_json: bool, shard: int | None) -> None:
    """List the database's feed cursors, expired ones included. Reads only.

    Each line: name, SQN, live or EXPIRED and when it expires, its age (since it was created)
    and when it was last advanced or renewed, and its owner (who created it; "-" when the
    database recorded none). Given a sharded data set, every shard's cursors, each line
    beginning with its shard.

    \b
    Example:
      inkpen feed list ./.inkpen-demo/db
    """
    now = time.time()
    chosen = target(url, shard)
    if chosen.shards is not None:

        def listed(shard_url: str) -> list[dict[str, Any]]:
            with database(shard_url, live=False) as manifests:
                return [cursor_summary(c, now) for c in list_feed_cursors(manifests)]

        per_shard = each_shard("feed", url, chosen.shards, listed, quick=True)
        found = [{"shard": i, **row} for i, rows in enumerate(per_shard) for row in rows]
    else:
        with database(chosen.url, live=False) as manifests:
            found = [cursor_summary(c, now) for c in list_feed_cursors(manifests)]
    if as_json:
        render.echo_json(found)
    elif found:
        for row in found:
            state = "live" if row["live"] else "EXPIRED"
            where = f"shard {row['shard']}\t" if "shard" in row else ""
            click.echo(
                f"{where}{row['name']}\tsqn {row['sqn']}\t{state}, expires "
                f"{render.expiry(row['expires'], now)}\tage {render.span(row['age'])}, "
                f"advanced {render.span(max(0.0, now - row['advanced']))} ago\t"
                f"owner {row['owner'] or '-'}"
            )
    else:
        click.echo("no feed cursors")


@feed_group.command("create")
@click.argument("url")
@click.argument("name")
@click.option(
    "--sqn",
    type=SQN,
    default=0,
    show_default=True,
    help="The SQN the consumer has read up to.",
)
@click.option(
    "--lifetime",
    type=Duration(allow_never=True),
    default=None,
    help="Expire this long after creation or the last advance (90s, 15m, 2h, 7d); default never.",
)
@click.option(
    "--owner",
    default=None,
    help="Who holds the cursor, shown by `feed list` (default: this user and host).",
)
@shard_option
def create(
    url: str, name: str, sqn: int, lifetime: float | None, owner: str | None, shard: int | None
) -> None:
    """Create a feed cursor NAME at --sqn (at most the database's last SQN).

    Given a sharded data set, creates NAME in every shard at SQN 0 (SQNs are per shard: for
    another SQN, name the shard with --shard I).

    \b
    Example:
      inkpen feed create ./.inkpen-demo/db exporter --sqn 0 --lifetime 7d --owner nightly-export
    """
    chosen = target(url, shard)
    if chosen.shards is not None:
        if sqn != 0:
            raise refused(
                url,
                len(chosen.shards),
                f"SQNs are per shard, so --sqn {sqn} belongs to one: add --shard I, or create "
                "the cursor at SQN 0 in every shard",
            )
        holder = owner or _default_owner()

        def made_in(shard_url: str) -> FeedCursor:
            with database(shard_url) as manifests, StoredHistory(manifests.store) as history:
                return create_feed_cursor(
                    manifests, name, 0, lifetime=lifetime, owner=holder, history=history
                )

        made_all = each_shard("feed", url, chosen.shards, made_in, quick=True)
        click.echo(
            f"feed cursor {name} at sqn 0 in each of the {len(made_all)} shards, expires "
            f"{render.expiry(made_all[0].expire_time, time.time())}"
        )
        return
    url = chosen.url
    with database(url) as manifests, StoredHistory(manifests.store) as history:
        made = create_feed_cursor(
            manifests,
            name,
            sqn,
            lifetime=lifetime,
            owner=owner or _default_owner(),
            history=history,
        )
    click.echo(
        f"feed cursor {made.name} at sqn {made.sqn}, expires "
        f"{render.expiry(made.expire_time, time.time())}"
    )


@feed_group.command("advance")
@click.argument("url")
@click.argument("name")
@click.argument("sqn", type=SQN)
@shard_option
def advance(url: str, name: str, sqn: int, shard: int | None) -> None:
    """Move feed cursor NAME to SQN, renewing its lifetime.

    Forward up to the database's last SQN; back only over changes the journal still holds whole
    (exit 1 naming the first SQN it does not hold). The last SQN is that of the newest write
    acknowledged when the command starts, read from the segments a live writer has stored.

    A sharded data set's SQNs are per shard: name the shard whose cursor moves with --shard I.

    \b
    Example:
      inkpen feed advance ./.inkpen-demo/db exporter 1200
    """
    chosen = target(url, shard)
    if chosen.shards is not None:
        raise refused(
            url,
            len(chosen.shards),
            f"SQNs are per shard: run `inkpen feed advance {url} {name} {sqn} --shard I` for "
            "the shard whose feed the SQN is in",
        )
    url = chosen.url
    with database(url) as manifests, StoredHistory(manifests.store) as history:
        done = advance_feed_cursor(manifests, name, sqn, history=history)
    click.echo(f"feed cursor {done.name} at sqn {done.sqn}")


@feed_group.command("delete")
@click.argument("url")
@click.argument("name")
@shard_option
def delete(url: str, name: str, shard: int | None) -> None:
    """Delete feed cursor NAME; compaction may then drop the changes only it held.

    Given a sharded data set, deletes NAME from every shard that holds it.

    \b
    Example:
      inkpen feed delete ./.inkpen-demo/db exporter
    """
    chosen = target(url, shard)
    if chosen.shards is not None:

        def gone_from(shard_url: str) -> bool:
            with database(shard_url, live=False) as manifests:
                try:
                    delete_feed_cursor(manifests, name)
                except NotFoundError:
                    return False
                return True

        deleted = sum(each_shard("feed", url, chosen.shards, gone_from, quick=True))
        if not deleted:
            raise NotFoundError(f"no feed cursor {name!r} in any shard of {url}")
        click.echo(f"deleted feed cursor {name} from {deleted} shards")
        return
    url = chosen.url
    with database(url, live=False) as manifests:
        delete_feed_cursor(manifests, name)
    click.echo(f"deleted feed cursor {name}")
