"""The ``s3://`` backend: parses S3 URLs and opens a store on the client its options pick
(``obstore``, the default, or ``boto3``: see :mod:`.s3_common`). Neither client is imported until
a store is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import SplitResult, unquote

from inkpen.errors import UsageError

from .backends import Backend, Place, StoreURL
from .base import ObjectStore
from .s3_common import S3Options


def open_s3_store(
    bucket: str, prefix: str = "", options: Mapping[str, str] | None = None
) -> ObjectStore:
    """The S3 store for ``s3://bucket/prefix?options``, on the client its options pick."""
    if S3Options.from_mapping(options or {}).client == "obstore":
        from .s3_obstore import ObstoreS3Store

        return ObstoreS3Store(bucket, prefix, options)
    from .s3 import S3Store

    return S3Store(bucket, prefix, options)


def _parse(parts: SplitResult, url: str, options: dict[str, str]) -> StoreURL:
    if not parts.netloc:
        raise UsageError(f"S3 URL {url!r} needs a bucket: s3://bucket/prefix")
    return StoreURL("s3", parts.netloc, unquote(parts.path).strip("/"), options)


def _open(parsed: StoreURL) -> ObjectStore:
    return open_s3_store(parsed.location, parsed.prefix, parsed.options)


def _place(parsed: StoreURL) -> Place:
    endpoint = parsed.options.get("endpoint", "").rstrip("/").lower()
    segments = tuple(part for part in parsed.prefix.split("/") if part)
    return f"s3 {endpoint}", parsed.location, segments


BACKEND = Backend(
    scheme="s3",
    form="s3://bucket/prefix",
    parse=_parse,
    open=_open,
    place=_place,
)
