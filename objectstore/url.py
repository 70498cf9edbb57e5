"""Turning a store URL into an :class:`ObjectStore`: the backend its scheme names
(:mod:`.backends`) parses and opens it."""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlsplit

from inkpen.errors import UsageError

from .backends import Backend, Place, StoreURL, backend, schemes
from .base import ObjectStore, innermost

__all__ = [
    "StoreURL",
    "backend_of",
    "check_distinct_locations",
    "checked_path",
    "locations_overlap",
    "open_store",
    "parse_store_url",
]


def parse_store_url(url: str) -> StoreURL:
    """Parse a plain directory path, or a URL of a registered scheme (``file:///abs/dir``,
    ``s3://bucket[/prefix][?endpoint=...&region=...]``, ``memory://NAME[/prefix]``, ...);
    raise :class:`UsageError` otherwise."""
    if not isinstance(url, str) or not url.strip():
        forms = ", ".join(f"{s}://" for s in schemes())
        raise UsageError(f"store URL must be a non-empty str (a directory, or {forms})")
    if "\x00" in url:
        raise UsageError(f"store URL {url!r} contains a NUL character")
    if "://" not in url:
        # A plain path is a local directory: the file:// backend's location.
        path = checked_path(url, os.path.abspath(os.path.expanduser(url)))
        return StoreURL("file", path)
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"store URL {url!r} is not valid Unicode text (lone surrogate)") from None
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    return backend(parts.scheme.lower()).parse(parts, url, options)


def checked_path(url: str, path: str) -> str:
    """``path`` when the filesystem can name it (no NUL, encodable), else a UsageError."""
    if "\x00" in path:
        raise UsageError(f"store URL {url!r} names a path with a NUL character")
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise UsageError(f"store URL {url!r} names a path the filesystem cannot encode") from None
    return path


def open_store(url: str) -> ObjectStore:
    """Open the object store a URL names (see :func:`parse_store_url`)."""
    parsed = parse_store_url(url)
    return backend(parsed.scheme).open(parsed)


def backend_of(parsed: StoreURL) -> Backend:
    """The backend a parsed URL names."""
    return backend(parsed.scheme)


def _place(where: str | ObjectStore) -> Place:
    """Where a store URL (or a store) keeps its objects (the backend's
    :attr:`~inkpen.objectstore.backends.Backend.place`): every alias of one location gives the
    same place."""
    url = innermost(where).url if isinstance(where, ObjectStore) else where
    parsed = parse_store_url(url)
    return backend(parsed.scheme).place(parsed)


def locations_overlap(a: str | ObjectStore, b: str | ObjectStore) -> bool:
    """True when the roots ``a`` and ``b`` are one location, or one lies inside the other.

    Local paths compare after resolving them (``file://`` or plain, relative or absolute,
    trailing slashes, ``..`` segments, symlinks); S3 roots compare bucket and endpoint, then
    prefixes by segments; memory roots compare space and prefix the same way. ``./db`` and
    ``./db2`` do not overlap: only whole segments count.
    """
    kind_a, space_a, parts_a = _place(a)
    kind_b, space_b, parts_b = _place(b)
    if (kind_a, space_a) != (kind_b, space_b):
        return False
    shorter = min(len(parts_a), len(parts_b))
    return parts_a[:shorter] == parts_b[:shorter]


def check_distinct_locations(
    source: str | ObjectStore, dest: str | ObjectStore, *, what: str = "copy"
) -> None:
    """Refuse, with :class:`UsageError`, a copy whose destination is its source, an alias of
    it, inside it, or around it (see :func:`locations_overlap`). Every copy path (backups, hot
    backups, restores, clones) calls it before it writes anything."""
    if locations_overlap(source, dest):
        shown_source = innermost(source).url if isinstance(source, ObjectStore) else source
        shown_dest = innermost(dest).url if isinstance(dest, ObjectStore) else dest
        raise UsageError(
            f"cannot {what} the database at {shown_source} onto itself: {shown_dest} is the "
            "same location, or lies inside it or around it; choose a destination outside "
            "the source"
        )
