"""``inkpen destroy``: remove a database, at once (hard) or through GC later (soft).

Both go through :func:`inkpen.destroy`. Soft: claims the
writer role, which fences any live writer at once, and marks the database destroyed; GC removes
its objects once the grace period has passed and no checkpoint is live. Hard: refused while live
checkpoints exist; marks the database destroyed with a bumped writer epoch (a writer still
running is fenced at its next manifest update), deletes every object, the manifest last. Given a
sharded data set, destroys every shard so (a hard destroy refused while any shard has live
checkpoints), and the descriptor: at once when hard, through ``inkpen gc URL`` when soft.
There is no ``--shard``: one shard destroyed would leave a data set missing its objects.
"""

from __future__ import annotations

import click

import inkpen

from .data_sets import shard_urls
from .targets import database


@click.command()
@click.argument("url")
@click.option("--soft", is_flag=True, help="Mark it destroyed now; let GC remove it later.")
@click.option("--yes", is_flag=True, help="Confirm: this cannot be undone.")
def destroy(url: str, soft: bool, yes: bool) -> None:
    """Destroy the database at URL. Cannot be undone; needs --yes.

    Fences any live writer. Hard (the default) removes every object now and is refused while
    live checkpoints exist. --soft marks the database destroyed at once and leaves the removal
    to GC, after an hour (`inkpen gc URL --destroy-grace`) and once no checkpoint is live.

    Given a sharded data set, destroys every shard (and its descriptor: at once when hard, by
    `inkpen gc URL` when soft). It takes no --shard: a data set missing one shard's objects
    would answer reads wrongly.

    \b
    Example:
      inkpen destroy ./old-db --yes
      inkpen destroy 's3://bucket/app?endpoint=http://127.0.0.1:8333' --soft --yes
    """
    if not yes:
        raise click.UsageError(
            f"destroy removes the database at {url} and every object in it; run it again with "
            "--yes to confirm"
        )
    urls = shard_urls(url)
    if urls is not None:
        inkpen.destroy(url, soft=soft)
        if soft:
            click.echo(
                f"marked the {len(urls)} shards of {url} destroyed; `inkpen gc {url}` removes "
                "them and the data set once an hour has passed and no checkpoint is live"
            )
        else:
            click.echo(f"destroyed the data set {url}: every shard and its descriptor are removed")
        return
    with database(url, live=False):
        pass  # refuses a missing or foreign root with its own message
    inkpen.destroy(url, soft=soft)
    if soft:
        click.echo(
            f"marked {url} destroyed; `inkpen gc {url}` removes it once an hour has passed "
            "and no checkpoint is live"
        )
    else:
        click.echo(f"destroyed {url}: every object is removed")
