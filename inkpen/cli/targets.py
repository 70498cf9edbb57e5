"""Opening what a command names by URL: a store, a database's manifests, a Reader, a Bookie.

Commands that only read go through :func:`existing_store` / :func:`database` (the manifest layer)
or :func:`reader` (``inkpen.open_reader``): they never bump the writer epoch, so a live writer
elsewhere keeps running. Commands that write go through :func:`writer`, which opens a Bookie and
so fences any Bookie still open on the database in another process.

Checks made here, before anything is written: a local path that is not a directory (missing, or
a file) and a root holding objects but no manifest are "no database" (exit status 1; a missing
directory is not created by looking at it); ``memory://`` URLs are refused, because a memory
store lives inside one process and a command is a process of its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import inkpen
from inkpen.errors import NotFoundError, UsageError
from inkpen.manifest.model import VersionedManifest
from inkpen.manifest.store import ManifestStore, RootState
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.backends import backend, schemes
from inkpen.objectstore.url import backend_of, parse_store_url
from inkpen.operations import stand_in_operators


def checked_url(url: str, *, must_exist: bool) -> str:
    """``url`` after the command's checks (see the module docstring); raises clear errors."""
    parsed = parse_store_url(url)
    kind = backend_of(parsed)
    if not kind.durable:
        lasting = " or ".join(f"{s}://" for s in schemes() if backend(s).durable)
        raise UsageError(
            f"{url} is a {kind.scheme} store, which lives inside one process; give the command "
            f"a directory or a {lasting} URL"
        )
    if must_exist and kind.local and not os.path.isdir(parsed.location):
        raise no_directory(url, parsed.location)
    return url


def no_directory(url: str, path: str) -> NotFoundError:
    """The error for a local database path that is not a directory (missing, or a file)."""
    if os.path.lexists(path):
        return NotFoundError(
            f"no inkpen database at {url}: {path} is a file, not a directory (a database is a "
            "directory holding manifest/, journal/ and ledger/)"
        )
    return NotFoundError(f"no inkpen database at {url}: the directory {path} does not exist")


@contextlib.contextmanager
def existing_store(url: str) -> Iterator[ObjectStore]:
    """The store at ``url``, which must already exist if it is a local directory."""
    store = open_store(checked_url(url, must_exist=True))
    try:
        yield store
    finally:
        store.close()


def require_database(manifests: ManifestStore) -> None:
    """Raise a clear error unless the root holds an inkpen database (live or destroyed)."""
    state = manifests.check_root_state()
    if state is RootState.EMPTY:
        raise NotFoundError(f"no inkpen database at {manifests.url}: the location is empty")
    if state is RootState.FOREIGN:
        raise NotFoundError(
            f"{manifests.url} holds objects but no inkpen manifest; it is not an inkpen "
            "database. Check the URL (a database root holds manifest/, journal/ and ledger/)"
        )


def latest_manifest(manifests: ManifestStore) -> VersionedManifest:
    """The latest manifest of the database; :class:`NotFoundError` when there is none."""
    latest = manifests.latest()
    if latest is None:
        raise NotFoundError(f"no inkpen database at {manifests.url}: it holds no manifest")
    return latest


@contextlib.contextmanager
def database(url: str, *, live: bool = True) -> Iterator[ManifestStore]:
    """The manifests of the database at ``url``; with ``live``, refuse a destroyed database."""
    with existing_store(url) as store:
        manifests = ManifestStore(store)
        require_database(manifests)
        if live:
            manifests.open_database(create_if_missing=False)
        yield manifests


@contextlib.contextmanager
def reader(url: str, *, checkpoint: str | None = None) -> Iterator[inkpen.Reader]:
    """A Reader on the database at ``url``: at ``checkpoint``, or at a checkpoint of its own."""
    with existing_store(url) as store:
        require_database(ManifestStore(store))
        with inkpen.open_reader(store, checkpoint=checkpoint) as found:
            yield found


def holds_nothing(url: str) -> bool:
    """True when ``url`` is a directory that does not exist or a root with no objects at all."""
    parsed = parse_store_url(url)
    if backend_of(parsed).local and not os.path.isdir(parsed.location):
        return not os.path.lexists(parsed.location)  # a file is refused by database() instead
    with existing_store(url) as store:
        return ManifestStore(store).check_root_state() is RootState.EMPTY


@contextlib.contextmanager
def writer(url: str, *, create: bool = False, hint: str = "") -> Iterator[inkpen.Bookie]:
    """A Bookie on the database at ``url`` (fencing any other writer); created only if asked.

    ``hint`` ends the error saying there is no database there.
    """
    checked_url(url, must_exist=False)
    if not create:
        if hint and holds_nothing(url):
            raise NotFoundError(f"no inkpen database at {url}; {hint}")
        with database(url):
            pass  # refuses a missing, destroyed or foreign database with its own message
    names: tuple[str, ...] = ()
    if not holds_nothing(url):
        with existing_store(url) as store:
            latest = ManifestStore(store).latest()
        names = () if latest is None else latest.manifest.merge_operators
    # The command line merges nothing, so the recorded merge operators are stood in for.
    with inkpen.open(url, merge_operators=stand_in_operators(names)) as book:
        yield book
