"""``inkpen checkpoint create|list|refresh|delete``: durable pins on a database's state.

A checkpoint keeps one manifest version and every file it names from GC until it expires, so
``inkpen.open_reader(url, checkpoint=ID)``, ``inkpen get/ls --checkpoint ID`` and the Spark reader
can read exactly that state from any process. These commands go through the manifest layer: each
is one compare-and-swap manifest update (``list`` only reads), and none bumps the writer epoch, so
a live writer keeps running and simply builds its next manifest update on top of the change.

Given a sharded data set's URL they act on data-set checkpoints: one checkpoint in every shard
under one id (:mod:`inkpen._shard_sets`), made, listed, refreshed and deleted together;
``--shard I`` acts on shard I's own checkpoints instead, as on a database.
"""

from __future__ import annotations

import time
from typing import Any

import click

from inkpen import shards
from inkpen.errors import NotFoundError, UsageError
from inkpen.manifest.checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    list_checkpoints,
    refresh_checkpoint,
)
from inkpen.manifest.store import ManifestStore

from . import render
from .data_sets import Target, shard_option, target
from .durations import Duration
from .info import checkpoint_rows, checkpoint_summary
from .targets import database

DEFAULT_LIFETIME = "1h"


def data_set_summary(found: shards.DataSetCheckpoint, now: float) -> dict[str, Any]:
    """One data-set checkpoint as a JSON-friendly dict."""
    return {
        "id": found.id,
        "name": found.name,
        "shards": [index for index, _cp in found.checkpoints],
        "complete": found.complete,
        "create_time": found.create_time,
        "expire_time": found.expire_time,
        "live": found.is_live(now),
    }


def data_set_rows(found: list[dict[str, Any]], count: int, now: float) -> list[str]:
    """Data-set checkpoint summaries as an aligned table (no lines for none)."""
    if not found:
        return []
    rows = [["id", "name", "shards", "created", "expires"]]
    for cp in found:
        held = f"{len(cp['shards'])} of {count}" + ("" if cp["complete"] else " (INCOMPLETE)")
        rows.append(
            [
                cp["id"],
                cp["name"] or "-",
                held,
                render.timestamp(cp["create_time"]),
                render.expiry(cp["expire_time"], now),
            ]
        )
    return render.table(rows)


def _chosen(url: str, shard: int | None) -> Target:
    """A database, a shard (``--shard``) or a whole data set (its data-set checkpoints)."""
    return target(url, shard)


@click.group("checkpoint")
def checkpoint_group() -> None:
    """Create, list, refresh and delete checkpoints (never fences a live writer)."""


@checkpoint_group.command("create")
@click.argument("url")
@click.option(
    "--lifetime",
    type=Duration(allow_never=True),
    default=DEFAULT_LIFETIME,
    show_default=True,
    help="How long the checkpoint lives (90s, 15m, 2h, 7d) or 'never' (delete it yourself).",
)
@click.option("--name", default=None, help="A name to find the checkpoint by.")
@click.option("--source", default=None, help="Pin the same state as this live checkpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint as JSON.")
@shard_option
def create(
    url: str,
    lifetime: float | None,
    name: str | None,
    source: str | None,
    as_json: bool,
    shard: int | None,
) -> None:
    """Pin the database's latest state (or a source checkpoint's) and print the checkpoint id.

    The checkpoint covers every write acknowledged before it, including writes a live writer
    has not rolled yet. Given a sharded data set, makes a data-set checkpoint: one in every
    shard, under one id (not one cut across the shards: each covers what its shard
    acknowledged before it).

    \b
    Example:
      inkpen checkpoint create ./.inkpen-demo/db --lifetime 2h --name nightly-export
    """
    chosen = _chosen(url, shard)
    if chosen.shards is not None:
        if source is not None:
            raise UsageError(
                "--source names one database's checkpoint; a data set's checkpoints are made "
                "from each shard's latest state: leave --source out, or add --shard I"
            )
        made_set = shards.create_checkpoint(url, lifetime, name=name)
        if as_json:
            render.echo_json(data_set_summary(made_set, time.time()))
            return
        click.echo(made_set.id)
        click.echo(
            f"pins each of the {made_set.shards} shards, expires "
            f"{render.expiry(made_set.expire_time, time.time())}",
            err=True,
        )
        return
    url = chosen.url
    with database(url) as manifests:
        made = create_checkpoint(manifests, lifetime=lifetime, name=name, source=source)
    if as_json:
        render.echo_json(checkpoint_summary(made, time.time()))
        return
    click.echo(made.id)
    click.echo(
        f"pins manifest {made.manifest_id}, expires {render.expiry(made.expire_time, time.time())}",
        err=True,
    )


@checkpoint_group.command("list")
@click.argument("url")
@click.option("--all", "show_all", is_flag=True, help="Include expired checkpoints.")
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoints as JSON.")
@shard_option
def list_command(url: str, show_all: bool, as_json: bool, shard: int | None) -> None:
    """List the database's live checkpoints (writers', readers', clones' and named ones).

    Reads only; writes nothing. Given a sharded data set, lists its data-set checkpoints (one
    per shard under one id); --shard I lists shard I's own checkpoints.

    \b
    Example:
      inkpen checkpoint list ./.inkpen-demo/db --all
    """
    now = time.time()
    chosen = _chosen(url, shard)
    if chosen.shards is not None:
        every = [data_set_summary(cp, now) for cp in shards.list_checkpoints(url)]
        listed = every if show_all else [cp for cp in every if cp["live"]]
        if as_json:
            render.echo_json(listed)
        elif listed:
            click.echo("\n".join(data_set_rows(listed, len(chosen.shards), now)))
        else:
            click.echo(
                "no live data-set checkpoints" if not show_all else "no data-set checkpoints"
            )
        return
    url = chosen.url
    with database(url, live=False) as manifests:
        found = [checkpoint_summary(cp, now) for cp in list_checkpoints(manifests)]
    shown = found if show_all else [cp for cp in found if cp["live"]]
    if as_json:
        render.echo_json(shown)
    elif shown:
        click.echo("\n".join(checkpoint_rows(shown, now)))
    else:
        click.echo("no live checkpoints" if not show_all else "no checkpoints")


def _one_of(given: str | None, name: str | None) -> str:
    if (given is None) == (name is None):
        raise click.UsageError("name the checkpoint by its ID or with --name NAME (one of them)")
    chosen = given if given is not None else name
    assert chosen is not None
    return chosen


def _resolve(manifests: ManifestStore, given: str | None, name: str | None) -> str:
    """The id of the checkpoint named by ID (an id, or a name given at create) or --name."""
    url = manifests.url
    if (given is None) == (name is None):
        raise click.UsageError("name the checkpoint by its ID or with --name NAME (one of them)")
    found = list_checkpoints(manifests)
    if given is not None and any(cp.id == given for cp in found):
        return given
    wanted = given if given is not None else name
    named = [cp for cp in found if cp.name == wanted]
    if len(named) == 1:
        return named[0].id
    if named:
        ids = ", ".join(cp.id for cp in named)
        raise UsageError(
            f"{len(named)} checkpoints in {url} are named {wanted!r} ({ids}): give one ID"
        )
    raise NotFoundError(
        f"no checkpoint with the id or name {wanted!r} in {url}; `inkpen checkpoint list {url}` "
        "lists them"
    )


@checkpoint_group.command("refresh")
@click.argument("url")
@click.argument("checkpoint_id", metavar="ID", required=False)
@click.option("--name", default=None, help="The checkpoint's name (instead of ID).")
@click.option(
    "--lifetime",
    type=Duration(allow_never=True),
    default=DEFAULT_LIFETIME,
    show_default=True,
    help="The new lifetime, from now, or 'never'.",
)
@shard_option
def refresh(
    url: str,
    checkpoint_id: str | None,
    name: str | None,
    lifetime: float | None,
    shard: int | None,
) -> None:
    """Move a live checkpoint's expiry to now + --lifetime.

    An expired checkpoint cannot be refreshed (GC may already have removed what it pinned):
    create a new one. Given a sharded data set, refreshes a data-set checkpoint in every shard.

    \b
    Example:
      inkpen checkpoint refresh ./.inkpen-demo/db 2b7c0d9e-... --lifetime 30m
      inkpen checkpoint refresh ./.inkpen-demo/db --name nightly-export --lifetime 2h
    """
    chosen = _chosen(url, shard)
    if chosen.shards is not None:
        done_set = shards.refresh_checkpoint(url, _one_of(checkpoint_id, name), lifetime)
        click.echo(
            f"data-set checkpoint {done_set.id} ({len(done_set.checkpoints)} shards) expires "
            f"{render.expiry(done_set.expire_time, time.time())}"
        )
        return
    url = chosen.url
    with database(url) as manifests:
        found = _resolve(manifests, checkpoint_id, name)
        done = refresh_checkpoint(manifests, found, lifetime=lifetime)
    click.echo(f"checkpoint {done.id} expires {render.expiry(done.expire_time, time.time())}")


@checkpoint_group.command("delete")
@click.argument("url")
@click.argument("checkpoint_id", metavar="ID", required=False)
@click.option("--name", default=None, help="The checkpoint's name (instead of ID).")
@shard_option
def delete(url: str, checkpoint_id: str | None, name: str | None, shard: int | None) -> None:
    """Delete a checkpoint; GC may then remove what only it pinned.

    Delete a writer checkpoint only once its writer has stopped: a live writer's snapshots
    read the files it pins. A crashed writer leaves one behind, which blocks a hard destroy.
    Given a sharded data set, deletes a data-set checkpoint from every shard.

    \b
    Example:
      inkpen checkpoint delete ./.inkpen-demo/db 2b7c0d9e-...
      inkpen checkpoint delete ./.inkpen-demo/db --name nightly-export
    """
    chosen = _chosen(url, shard)
    if chosen.shards is not None:
        gone = shards.delete_checkpoint(url, _one_of(checkpoint_id, name))
        click.echo(f"deleted data-set checkpoint {gone.id} from {len(gone.checkpoints)} shards")
        return
    url = chosen.url
    with database(url, live=False) as manifests:
        found = _resolve(manifests, checkpoint_id, name)
        delete_checkpoint(manifests, found)
    click.echo(f"deleted checkpoint {found}")
