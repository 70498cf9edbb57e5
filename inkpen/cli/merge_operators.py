"""``inkpen merge-operators URL [--forget NAME]``: the merge operators a database records.

A database records the name of every merge operator a landed merge used, and a writer must then
be opened with an operator of each name. Listing only reads the manifest. ``--forget NAME`` is
one compare-and-swap manifest update (``inkpen.forget_merge_operator``) that bumps no epoch; it
is refused while a writer holds the database (its writer checkpoint is in the manifest), since
that writer may go on merging with the name.

Given a sharded data set, the listing names each shard's operators (one line per shard, or one
``--shard I``) and ``--forget`` retires the name in every shard that records it.
"""

from __future__ import annotations

import click

from inkpen.operations import forget_merge_operator

from . import render
from .data_sets import each_shard, shard_option, target
from .targets import database, latest_manifest


@click.command("merge-operators")
@click.argument("url")
@click.option(
    "--forget",
    "name",
    default=None,
    metavar="NAME",
    help="Retire the recorded merge operator NAME (refused while a writer is open).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the recorded names as JSON.")
@shard_option
def merge_operators_command(url: str, name: str | None, as_json: bool, shard: int | None) -> None:
    """List the merge operators the database records, or retire one with --forget.

    A writer (inkpen.open) must be given an operator of every recorded name. Stored values are
    already folded, so forgetting a name loses nothing: afterwards the database opens without
    that operator (a later merge with it records it again). --forget is refused while a writer
    holds the database; it never fences one. Given a sharded data set: each shard's names,
    and --forget retires the name in every shard recording it (--shard I: one shard).

    \b
    Example:
      inkpen merge-operators ./.inkpen-demo/db
      inkpen merge-operators ./.inkpen-demo/db --forget counter
    """
    chosen = target(url, shard)
    if name is not None:
        forget_merge_operator(chosen.url, name)
        if not as_json:
            click.echo(f"forgot merge operator {name}")
    if chosen.shards is not None:

        def recorded(shard_url: str) -> list[str]:
            with database(shard_url) as manifests:
                return list(latest_manifest(manifests).manifest.merge_operators)

        per_shard = each_shard("merge-operators", url, chosen.shards, recorded, quick=True)
        if as_json:
            render.echo_json([{"shard": i, "names": names} for i, names in enumerate(per_shard)])
        elif name is None:
            for i, shard_names in enumerate(per_shard):
                click.echo(f"shard {i}\t{', '.join(shard_names) or 'no merge operators recorded'}")
        return
    with database(chosen.url) as manifests:
        names = latest_manifest(manifests).manifest.merge_operators
    if as_json:
        render.echo_json(list(names))
    elif name is None:
        for recorded_name in names:
            click.echo(recorded_name)
        if not names:
            click.echo("no merge operators recorded")
