"""objectstore/: where inkpen's bytes live.

One protocol (:class:`ObjectStore`, in :mod:`.base`) and three backends, registered by URL
scheme in :mod:`.backends` (the one place a scheme is known; a new backend is one module):

- ``memory://NAME[/prefix]``: in-process, for unit tests (:mod:`.memory`);
- a directory path or ``file:///abs/path``: the embedded default (:mod:`.local`);
- ``s3://bucket/prefix[?endpoint=...&region=...]``: S3 or any S3-compatible store
  (:mod:`.s3_obstore`, obstore; with ``client=boto3``, :mod:`.s3`).

Two wrappers work around any store: :class:`FaultyStore` injects seeded failures and
:class:`CountingStore` counts requests and bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inkpen._lazy import lazy_exports

if TYPE_CHECKING:
    from .backends import Backend, StoreURL, register
    from .base import ListPage, ObjectInfo, ObjectStore, StoreBase
    from .counting import CountingStore
    from .faults import FaultPlan, FaultyStore, InjectedFault
    from .url import open_store, parse_store_url

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Backend": ".backends",
        "StoreURL": ".backends",
        "register": ".backends",
        "ListPage": ".base",
        "ObjectInfo": ".base",
        "ObjectStore": ".base",
        "StoreBase": ".base",
        "CountingStore": ".counting",
        "FaultPlan": ".faults",
        "FaultyStore": ".faults",
        "InjectedFault": ".faults",
        "open_store": ".url",
        "parse_store_url": ".url",
    },
)

__all__ = [
    "Backend",
    "CountingStore",
    "FaultPlan",
    "FaultyStore",
    "InjectedFault",
    "ListPage",
    "ObjectInfo",
    "ObjectStore",
    "StoreBase",
    "StoreURL",
    "open_store",
    "parse_store_url",
    "register",
]
