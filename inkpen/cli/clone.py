"""``inkpen clone``: a new database that starts from another's state and shares its files.

Through the manifest layer (:func:`inkpen.manifest.clones.create_clone`): the parent gets a
checkpoint pinning the state cloned (no writer of the parent is fenced), the clone's manifest
names the parent's files, and only unrolled journal segments are copied. Writes go to the clone.
"""

from __future__ import annotations

import click

from inkpen.manifest.clones import create_clone
from inkpen.objectstore import open_store
from inkpen.objectstore.url import check_distinct_locations

from .targets import checked_url, existing_store


@click.command()
@click.argument("parent")
@click.argument("clone_url", metavar="CLONE")
@click.option("--checkpoint", default=None, metavar="ID", help="Clone this live checkpoint.")
def clone(parent: str, clone_url: str, checkpoint: str | None) -> None:
    """Create CLONE (an empty location) as a shallow copy of PARENT.

    Never fences PARENT's writer; PARENT keeps a checkpoint for the clone until the clone no
    longer reads its files (GC of the clone detaches it). Run it again to finish an interrupted
    clone.

    \b
    Example:
      inkpen clone ./.inkpen-demo/db ./experiment
    """
    check_distinct_locations(parent, clone_url, what="clone")
    with existing_store(parent) as parent_store:
        clone_store = open_store(checked_url(clone_url, must_exist=False))
        try:
            made = create_clone(parent_store, clone_store, checkpoint_id=checkpoint)
        finally:
            clone_store.close()
    click.echo(f"cloned {parent} into {clone_url} (manifest {made.id})")
