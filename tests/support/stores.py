"""What a store holds, as tests compare it: every object's key and size."""

from __future__ import annotations

from inkpen.objectstore import ObjectStore


def listing(store: ObjectStore) -> list[tuple[str, int]]:
    """Every object of ``store`` as (key, size), in the store's listing order."""
    return [(info.key, info.size) for info in store.list("")]
