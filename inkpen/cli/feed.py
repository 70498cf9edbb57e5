"""``inkpen feed list|create|delete|advance``: named change-feed cursors.

A feed cursor records how far a consumer of the change feed has read (an SQN); while it lives,
journal compaction keeps every change above the lowest live cursor. Each command is one
compare-and-swap manifest update (``list`` only reads) through the manifest layer; none bumps the
writer epoch, so a live writer keeps running and builds its next manifest update on top.
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

from inkpen.manifest.feed_cursors import (
    advance_feed_cursor,
    create_feed_cursor,
    delete_feed_cursor,
    list_feed_cursors,
)
from inkpen.manifest.feed_history import StoredHistory
from inkpen.manifest.model import FeedCursor

from . import render
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
def list_command(url: str, as_json: bool) -> None:
    """List the database's feed cursors, expired ones included. Reads only.

    Each line: name, SQN, live or EXPIRED and when it expires, its age (since it was created)
    and when it was last advanced or renewed, and its owner (who created it; "-" when the
    database recorded none).

    \b
    Example:
      inkpen feed list ./.inkpen-demo/db
    """
    now = time.time()
    with database(url, live=False) as manifests:
        found = [cursor_summary(c, now) for c in list_feed_cursors(manifests)]
    if as_json:
        render.echo_json(found)
    elif found:
        for row in found:
            state = "live" if row["live"] else "EXPIRED"
            click.echo(
                f"{row['name']}\tsqn {row['sqn']}\t{state}, expires "
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
def create(url: str, name: str, sqn: int, lifetime: float | None, owner: str | None) -> None:
    """Create a feed cursor NAME at --sqn (at most the database's last SQN).

    \b
    Example:
      inkpen feed create ./.inkpen-demo/db exporter --sqn 0 --lifetime 7d --owner nightly-export
    """
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
def advance(url: str, name: str, sqn: int) -> None:
    """Move feed cursor NAME to SQN, renewing its lifetime.

    Forward up to the database's last SQN; back only over changes the journal still holds whole
    (exit 1 naming the first SQN it does not hold). The last SQN is that of the newest write
    acknowledged when the command starts, read from the segments a live writer has stored.

    \b
    Example:
      inkpen feed advance ./.inkpen-demo/db exporter 1200
    """
    with database(url) as manifests, StoredHistory(manifests.store) as history:
        done = advance_feed_cursor(manifests, name, sqn, history=history)
    click.echo(f"feed cursor {done.name} at sqn {done.sqn}")


@feed_group.command("delete")
@click.argument("url")
@click.argument("name")
def delete(url: str, name: str) -> None:
    """Delete feed cursor NAME; compaction may then drop the changes only it held.

    \b
    Example:
      inkpen feed delete ./.inkpen-demo/db exporter
    """
    with database(url, live=False) as manifests:
        delete_feed_cursor(manifests, name)
    click.echo(f"deleted feed cursor {name}")
