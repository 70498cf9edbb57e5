"""Turning a store URL into an :class:`ObjectStore`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import parse_qs, unquote, urlsplit

from inkpen.errors import UsageError

from .base import ObjectStore, innermost


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL: scheme, location (bucket, directory or space name), prefix, options."""

    scheme: str
    location: str
    prefix: str = ""
    options: dict[str, str] = field(default_factory=dict)


def parse_store_url(url: str) -> StoreURL:
    """Parse ``memory://NAME[/prefix]``, ``file:///abs/dir``, a plain directory path, or
    ``s3://bucket[/prefix][?endpoint=...&region=...]``; raise :class:`UsageError` otherwise."""
    if not isinstance(url, str) or not url.strip():
        raise UsageError(
            "store URL must be a non-empty str (a directory, file://, s3://, memory://)"
        )
    if "\x00" in url:
        raise UsageError(f"store URL {url!r} contains a NUL character")
    if "://" not in url:
        return StoreURL("file", _local_path(url, os.path.abspath(os.path.expanduser(url))))
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"store URL {url!r} is not valid Unicode text (lone surrogate)") from None
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError(f"file URL {url!r} must be file:///absolute/path")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise UsageError(f"file URL {url!r} must name an absolute path")
        return StoreURL("file", _local_path(url, os.path.abspath(path)), options=options)
    if scheme == "memory":
        if not parts.netloc:
            raise UsageError(f"memory URL {url!r} needs a space name: memory://NAME")
        return StoreURL("memory", parts.netloc, parts.path.strip("/"), options)
    if scheme == "s3":
        if not parts.netloc:
            raise UsageError(f"S3 URL {url!r} needs a bucket: s3://bucket/prefix")
        return StoreURL("s3", parts.netloc, unquote(parts.path).strip("/"), options)
    raise UsageError(
        f"unknown store URL scheme {parts.scheme!r} in {url!r}; "
        "use a directory path, file:///abs/path, s3://bucket/prefix or memory://name"
    )


def _local_path(url: str, path: str) -> str:
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
    if parsed.scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore(parsed.location, prefix=parsed.prefix)
    if parsed.scheme == "file":
        from .local import LocalStore

        return LocalStore(parsed.location)
    from .s3 import open_s3_store

    return open_s3_store(parsed.location, parsed.prefix, parsed.options)


def _place(where: str | ObjectStore) -> tuple[str, str, tuple[str, ...]]:
    """Where a store URL (or a store) keeps its objects: a kind (``file``, ``memory``, or
    ``s3`` with its endpoint), a space (bucket, memory space; empty for the local filesystem) and
    the path segments of its root inside it. A local path is resolved: absolute, ``..`` and
    symlinks followed, so every alias of one directory gives the same place."""
    url = innermost(where).url if isinstance(where, ObjectStore) else where
    parsed = parse_store_url(url)
    if parsed.scheme == "file":
        resolved = os.path.realpath(parsed.location)
        return "file", "", PurePosixPath(resolved).parts
    segments = tuple(part for part in parsed.prefix.split("/") if part)
    if parsed.scheme == "s3":
        endpoint = parsed.options.get("endpoint", "").rstrip("/").lower()
        return f"s3 {endpoint}", parsed.location, segments
    return parsed.scheme, parsed.location, segments


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
