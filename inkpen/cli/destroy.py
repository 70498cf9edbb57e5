"""``inkpen destroy``: remove a database, at once (hard) or through GC later (soft).

Both go through the manifest layer (:func:`inkpen.manifest.destroy.destroy`). Soft: claims the
writer role, which fences any live writer at once, and marks the database destroyed; GC removes
its objects once the grace period has passed and no checkpoint is live. Hard: refused while live
checkpoints exist; marks the database destroyed with a bumped writer epoch (a writer still
running is fenced at its next manifest update), deletes every object, the manifest last.
"""

from __future__ import annotations

import time

import click

from inkpen.errors import UsageError
from inkpen.manifest.destroy import destroy as destroy_database

from . import render
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
    with database(url, live=False) as manifests:
        latest = manifests.latest()
        now = time.time()
        live = latest.manifest.live_checkpoints(now) if latest is not None else ()
        if not soft and live and (latest is None or latest.manifest.destroyed_at is None):
            listed = "; ".join(
                f"{cp.id} ({cp.kind or 'named'}, expires {render.expiry(cp.expire_time, now)})"
                for cp in live
            )
            raise UsageError(
                f"the database at {url} has live checkpoints: {listed}. A hard destroy would "
                f"pull their files from under their holders: delete them (inkpen checkpoint "
                f"delete {url} ID), wait for them to expire, or use --soft"
            )
        destroy_database(manifests.store, soft=soft)
    if soft:
        click.echo(
            f"marked {url} destroyed; `inkpen gc {url}` removes it once an hour has passed "
            "and no checkpoint is live"
        )
    else:
        click.echo(f"destroyed {url}: every object is removed")
