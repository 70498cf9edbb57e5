"""``inkpen get``, ``ls``, ``put`` and ``delete``: quick looks at, and changes to, the objects.

``get`` and ``ls`` read through ``inkpen.open_reader``: at a checkpoint of their own (created,
then deleted; two manifest updates) or at ``--checkpoint ID`` (nothing written). They never
fence a live writer. ``put`` and ``delete`` open the database as its writer (a Bookie), which
fences any Bookie open on it in another process: use them on a database no application is
writing, or accept that its writer stops. They check their arguments as a Bookie would first, so a
refused call opens nothing.

Buckets, keys, index fields and terms are given as text (stored as UTF-8) or as ``hex:<digits>``
for arbitrary bytes, and shown the same way.

Given a sharded data set's URL, ``get``, ``put`` and ``delete`` go to the shard the key routes to
(``put`` and ``delete`` fence that shard's writer only), and ``ls`` lists every shard, merged in
key order, each shard through a Reader of its own (``--shard I``: one shard only). There
``--checkpoint`` names a data-set checkpoint (its id or name).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import click

from inkpen import shards
from inkpen.actors.journal.changes import ChangeMaker
from inkpen.errors import NotFoundError
from inkpen.options import Options
from inkpen.reader import Reader

from . import render
from .data_sets import shard_option, shard_urls, target
from .durations import Duration
from .params import COUNT
from .targets import reader, writer

CHECKS = ChangeMaker(Options())
"""Validates a put or delete exactly as a Bookie with default options would, before opening one."""
INDEX_END = b"\xff" * 64
"""Upper bound of an index query with no --end: above every term that does not start with 64
0xFF bytes."""


def _bytes(given: str, what: str) -> bytes:
    return render.parse_text(given, what)


def _name(given: str, what: str) -> bytes:
    return render.parse_name(given, what)


def _routed(url: str, bucket: bytes, key: bytes) -> tuple[str, bool]:
    """The database (bucket, key) lives in: ``url`` itself, or its shard in a data set; and
    whether ``url`` is a data set."""
    urls = shard_urls(url)
    if urls is None:
        return url, False
    return urls[shards.shard_of(bucket, key, len(urls))], True


def _pinned(url: str, checkpoint: str | None) -> str | None:
    """A data-set checkpoint's id (the same in every shard), given its id or name."""
    return None if checkpoint is None else shards.resolve_checkpoint(url, checkpoint).id


def _index_specs(adds: Iterable[str], removes: Iterable[str]) -> list[tuple[str, bytes, bytes]]:
    specs: list[tuple[str, bytes, bytes]] = []
    flagged = [("add", g, "--index") for g in adds] + [("remove", g, "--unindex") for g in removes]
    for op, given, flag in flagged:
        field, sep, term = given.partition("=")
        if not sep or not field:
            raise click.BadParameter(
                f"{given!r} is not FIELD=TERM (for example email_bin=alice@example.com)",
                param_hint=flag,
            )
        specs.append((op, _bytes(field, flag), _bytes(term, flag)))
    return specs


@click.command()
@click.argument("url")
@click.argument("bucket")
@click.argument("key")
@click.option("--head", "head_only", is_flag=True, help="Print the metadata, not the value.")
@click.option("--checkpoint", default=None, metavar="ID", help="Read at this live checkpoint.")
@click.option(
    "-o",
    "--output",
    type=click.File("wb"),
    default="-",
    help="Write the value to this file (default: stdout).",
)
def get(
    url: str, bucket: str, key: str, head_only: bool, checkpoint: str | None, output: Any
) -> None:
    """Print the value of BUCKET/KEY (raw bytes), or its metadata with --head.

    Exits 1 when the object does not exist. Never fences a live writer. Given a sharded data
    set, reads the shard the key routes to (--checkpoint: a data-set checkpoint).

    \b
    Example:
      inkpen get ./.inkpen-demo/db users user00042
      inkpen get ./.inkpen-demo/db users user00042 --head
    """
    b, k = _name(bucket, "BUCKET"), _name(key, "KEY")
    where, in_data_set = _routed(url, b, k)
    if in_data_set:
        checkpoint = _pinned(url, checkpoint)
    with reader(where, checkpoint=checkpoint) as found:
        head = found.head(b, k) if head_only else None
        value = None if head_only else found.get(b, k)
    if head is None and value is None:
        raise NotFoundError(f"no object {bucket}/{key} in {url}")
    if value is not None:
        output.write(value)
        output.flush()
        return
    assert head is not None
    click.echo(f"sqn            {head.sqn}")
    click.echo(f"size           {head.size}")
    click.echo(f"content hash   {head.content_hash:016x}")
    click.echo(f"last modified  {render.timestamp(head.last_modified)}")
    click.echo(f"expires        {render.timestamp(head.expires_at)}")


def _limited(items: Iterator[Any], limit: int | None) -> Iterator[Any]:
    return items if limit is None else islice(items, limit)


@click.command("ls")
@click.argument("url")
@click.argument("bucket", required=False)
@click.option("--start", default=None, help="First key (or term, with --index) to list.")
@click.option("--end", default=None, help="Last key (or term, with --index) to list.")
@click.option("--index", "field", default=None, help="List the entries of this index field.")
@click.option("-l", "--long", "long_form", is_flag=True, help="Show size, SQN and time.")
@click.option("--limit", type=COUNT, default=None, help="List at most this many.")
@click.option("--checkpoint", default=None, metavar="ID", help="Read at this live checkpoint.")
@shard_option
def ls(
    url: str,
    bucket: str | None,
    start: str | None,
    end: str | None,
    field: str | None,
    long_form: bool,
    limit: int | None,
    checkpoint: str | None,
    shard: int | None,
) -> None:
    """List buckets; or the keys of BUCKET; or, with --index, its index entries (TERM KEY).

    -l adds each object's size, SQN and last-modified time (to keys and to index entries).

    Never fences a live writer. Given a sharded data set, lists every shard merged in key order
    (an SQN is its shard's; --checkpoint: a data-set checkpoint).

    \b
    Example:
      inkpen ls ./.inkpen-demo/db
      inkpen ls ./.inkpen-demo/db users --start user00100 --end user00199 -l
      inkpen ls ./.inkpen-demo/db users --index city_bin --start Oslo --end Oslo
    """
    if bucket is None and (start or end or field or long_form):
        raise click.UsageError("--start, --end, --index and --long need a BUCKET")
    lo = None if start is None else _bytes(start, "--start")
    hi = None if end is None else _bytes(end, "--end")
    b = None if bucket is None else _name(bucket, "BUCKET")
    index = None if field is None else _name(field, "--index")
    chosen = target(url, shard)
    with contextlib.ExitStack() as stack:
        found: shards.ShardedSnapshot | Reader
        if chosen.shards is not None:
            found = stack.enter_context(shards.open_reader(url, checkpoint=checkpoint))
        else:
            found = stack.enter_context(reader(chosen.url, checkpoint=checkpoint))
        if b is None:
            for name in _limited(iter(found.buckets()), limit):
                click.echo(render.text(name))
            return
        if index is not None:
            entries = found.index_query(
                b,
                index,
                lo or b"",
                INDEX_END if hi is None else hi,
                return_terms=True,
            )
            for term, key in _limited(iter(entries), limit):
                if long_form:
                    head = found.head(b, key)
                    if head is None:  # gone since the index entry was read: not shown
                        continue
                    click.echo(
                        f"{head.size:>10}  {head.sqn:>10}  {render.timestamp(head.last_modified)}"
                        f"  {render.text(term)}\t{render.text(key)}"
                    )
                else:
                    click.echo(f"{render.text(term)}\t{render.text(key)}")
            return
        if not long_form:
            for key in _limited(iter(found.keys(b, lo, hi)), limit):
                click.echo(render.text(key))
            return
        for _, key, head in _limited(iter(found.heads(b, lo, hi)), limit):
            click.echo(
                f"{head.size:>10}  {head.sqn:>10}  {render.timestamp(head.last_modified)}  "
                f"{render.text(key)}"
            )


@click.command()
@click.argument("url")
@click.argument("bucket")
@click.argument("key")
@click.argument("value", required=False)
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("rb"),
    default=None,
    help="Read the value from this file ('-' for stdin) instead of VALUE.",
)
@click.option("--index", "adds", multiple=True, metavar="FIELD=TERM", help="Add an index entry.")
@click.option(
    "--unindex", "removes", multiple=True, metavar="FIELD=TERM", help="Remove an index entry."
)
@click.option("--ttl", type=Duration(minimum=0.001), default=None, help="Expire after this long.")
@click.option("--create", is_flag=True, help="Create the database if there is none at URL.")
def put(
    url: str,
    bucket: str,
    key: str,
    value: str | None,
    source: Any,
    adds: tuple[str, ...],
    removes: tuple[str, ...],
    ttl: float | None,
    create: bool,
) -> None:
    """Store VALUE (text) or the bytes of --file under BUCKET/KEY, durably.

    Opens the database as its writer: a Bookie open on it in another process is FENCED (its next
    write fails with FencedError). Given a sharded data set, writes to the shard the key routes
    to, fencing that shard's writer only.

    \b
    Example:
      inkpen put ./db users alice 'hello' --index email_bin=alice@example.com --create
      inkpen put ./db photos cat.jpg --file cat.jpg --ttl 7d
    """
    if value is None and source is None:
        raise click.UsageError(
            "no value to store: give it as VALUE after KEY, or with --file FILE ('-' for stdin)"
        )
    if value is not None and source is not None:
        raise click.UsageError("give the value either as VALUE or with --file, not both")
    data = value.encode("utf-8") if value is not None else source.read()
    specs = _index_specs(adds, removes)
    b, k = _bytes(bucket, "BUCKET"), _bytes(key, "KEY")
    CHECKS.put(b, k, data, specs, ttl)  # a refused put must not open (and fence) anything
    where, _in_data_set = _routed(url, b, k)
    with writer(where, create=create, hint="add --create to make a new database there") as book:
        book.put(b, k, data, indexes=specs, ttl=ttl)
    click.echo(f"stored {bucket}/{key} ({render.size(len(data))})", err=True)


@click.command()
@click.argument("url")
@click.argument("bucket")
@click.argument("key")
@click.option(
    "--unindex", "removes", multiple=True, metavar="FIELD=TERM", help="Remove an index entry."
)
def delete(url: str, bucket: str, key: str, removes: tuple[str, ...]) -> None:
    """Delete BUCKET/KEY (a durable tombstone) and the index entries named with --unindex.

    Opens the database as its writer: a Bookie open on it in another process is FENCED. Given a
    sharded data set, deletes in the shard the key routes to, fencing that shard's writer only.

    \b
    Example:
      inkpen delete ./db users alice --unindex email_bin=alice@example.com
    """
    specs = _index_specs((), removes)
    b, k = _bytes(bucket, "BUCKET"), _bytes(key, "KEY")
    CHECKS.delete(b, k, specs)
    where, _in_data_set = _routed(url, b, k)
    with writer(where) as book:
        book.delete(b, k, indexes=specs)
    click.echo(f"deleted {bucket}/{key}", err=True)
