"""Turning a store URL into an :class:`ObjectStore`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from inkpen.errors import UsageError

from .base import ObjectStore


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
