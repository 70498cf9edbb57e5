"""``inkpen merge-operators URL [--forget NAME]``: the merge operators a database records.

A database records the name of every merge operator a landed merge used, and a writer must then
be opened with an operator of each name. Listing only reads the manifest. ``--forget NAME`` is
one compare-and-swap manifest update (``inkpen.forget_merge_operator``) that bumps no epoch; it
is refused while a writer holds the database (its writer checkpoint is in the manifest), since
that writer may go on merging with the name.
"""

from __future__ import annotations

import click

from inkpen.operations import forget_merge_operator

from . import render
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
def merge_operators_command(url: str, name: str | None, as_json: bool) -> None:
    """List the merge operators the database records, or retire one with --forget.

    A writer (inkpen.open) must be given an operator of every recorded name. Stored values are
    already folded, so forgetting a name loses nothing: afterwards the database opens without
    that operator (a later merge with it records it again). --forget is refused while a writer
    holds the database; it never fences one.

    \b
    Example:
      inkpen merge-operators ./.inkpen-demo/db
      inkpen merge-operators ./.inkpen-demo/db --forget counter
    """
    with database(url) as manifests:
        if name is not None:
            forget_merge_operator(manifests.store, name)
            if not as_json:
                click.echo(f"forgot merge operator {name}")
        names = latest_manifest(manifests).manifest.merge_operators
    if as_json:
        render.echo_json(list(names))
    elif name is None:
        for recorded in names:
            click.echo(recorded)
        if not names:
            click.echo("no merge operators recorded")
