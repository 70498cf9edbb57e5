"""``inkpen clone``: a new database that starts from another's state and shares its files.

Through the manifest layer (:func:`inkpen.manifest.clones.create_clone`): the parent gets a
checkpoint pinning the state cloned (no writer of the parent is fenced), the clone's manifest
names the parent's files, and only unrolled journal segments are copied. Writes go to the clone.
A sharded data set is cloned shard by shard into a data set at CLONE with the parent's
descriptor (``--checkpoint``: a data-set checkpoint; ``--shard I``: shard I alone, as a
database).
"""

from __future__ import annotations

import click

from inkpen import shards
from inkpen._shard_layout import adopt_descriptor
from inkpen.manifest.clones import create_clone
from inkpen.manifest.model import VersionedManifest
from inkpen.objectstore import open_store
from inkpen.objectstore.url import check_distinct_locations

from .data_sets import shard_option, target
from .targets import checked_url, existing_store


def _clone(parent: str, clone_url: str, checkpoint: str | None) -> VersionedManifest:
    with existing_store(parent) as parent_store:
        clone_store = open_store(checked_url(clone_url, must_exist=False))
        try:
            return create_clone(parent_store, clone_store, checkpoint_id=checkpoint)
        finally:
            clone_store.close()


@click.command()
@click.argument("parent")
@click.argument("clone_url", metavar="CLONE")
@click.option("--checkpoint", default=None, metavar="ID", help="Clone this live checkpoint.")
@shard_option
def clone(parent: str, clone_url: str, checkpoint: str | None, shard: int | None) -> None:
    """Create CLONE (an empty location) as a shallow copy of PARENT.

    Never fences PARENT's writer; PARENT keeps a checkpoint for the clone until the clone no
    longer reads its files (GC of the clone detaches it). Run it again to finish an interrupted
    clone. A sharded data set is cloned shard by shard into a data set at CLONE (--checkpoint:
    a data-set checkpoint); --shard I clones shard I alone, as a database.

    \b
    Example:
      inkpen clone ./.inkpen-demo/db ./experiment
    """
    check_distinct_locations(parent, clone_url, what="clone")
    chosen = target(parent, shard)
    if chosen.shards is not None:
        pinned = None if checkpoint is None else shards.resolve_checkpoint(parent, checkpoint).id
        checked_url(clone_url, must_exist=False)
        adopt_descriptor(clone_url, shards.read_descriptor(parent))
        made_all = [  # in turn: each copies its unrolled segments in parallel already
            _clone(shard_url, shards.shard_url(clone_url, index), pinned)
            for index, shard_url in enumerate(chosen.shards)
        ]
        click.echo(f"cloned the {len(made_all)} shards of {parent} into {clone_url}")
        return
    made = _clone(chosen.url, clone_url, checkpoint)
    click.echo(f"cloned {chosen.url} into {clone_url} (manifest {made.id})")
