"""The object-store backends, registered by URL scheme: the one place a scheme is known.

A :class:`Backend` says how its URLs parse, how a store opens and where its objects live (for
the copy paths' "not onto itself" check), and two facts the callers ask of a location: whether
it is a directory of this machine (``local``: a path that does not exist holds no database, and
reading must not create it) and whether it outlives the process (``durable``: the command line
refuses ``memory://``). Callers ask :func:`backend` for the scheme of a parsed URL; none of them
names a scheme.

The built-in backends live in the modules of :data:`BUILTIN`, each exporting ``BACKEND``,
imported the first time their scheme is asked for (so opening a local directory never imports
an S3 client). A new backend (say GCS or Azure through obstore) is one module with its store
and its ``BACKEND``, named in :data:`BUILTIN`; an application can also :func:`register` one of
its own.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import SplitResult

from inkpen.errors import UsageError

if TYPE_CHECKING:
    from .base import ObjectStore

Place = tuple[str, str, tuple[str, ...]]
"""Where a location keeps its objects: a kind (the scheme, and what else tells two services
apart), a space (bucket, memory space; empty for the local filesystem) and the path segments of
its root inside that space."""


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL: scheme, location (bucket, directory or space name), prefix, options."""

    scheme: str
    location: str
    prefix: str = ""
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Backend:
    """One kind of object store, named by a URL scheme."""

    scheme: str
    form: str
    """The URL's shape, for messages: ``s3://bucket/prefix``."""
    parse: Callable[[SplitResult, str, dict[str, str]], StoreURL]
    """``(split URL, the URL as given, its query options)`` -> the parsed location, or a
    :class:`~inkpen.errors.UsageError` saying what is wrong with it."""
    open: Callable[[StoreURL], ObjectStore]
    place: Callable[[StoreURL], Place]
    local: bool = False
    """Its location is a directory of this machine."""
    durable: bool = True
    """Its objects outlive the process that wrote them."""


BUILTIN: dict[str, str] = {
    "file": "inkpen.objectstore.local",
    "memory": "inkpen.objectstore.memory",
    "s3": "inkpen.objectstore.s3_backend",
}
"""Scheme -> the module that exports its ``BACKEND``."""

_registered: dict[str, Backend] = {}
_lock = threading.Lock()


def register(backend: Backend) -> None:
    """Make ``backend`` answer URLs of its scheme (replacing a backend of the same scheme)."""
    if not backend.scheme.isidentifier() or backend.scheme != backend.scheme.lower():
        raise UsageError(f"a backend's scheme is a lower-case name, got {backend.scheme!r}")
    with _lock:
        _registered[backend.scheme] = backend


def schemes() -> tuple[str, ...]:
    """Every scheme a URL may name, built-in or registered."""
    with _lock:
        return tuple(sorted(set(BUILTIN) | set(_registered)))


def backend(scheme: str) -> Backend:
    """The backend of ``scheme``; :class:`~inkpen.errors.UsageError` for one nobody knows."""
    with _lock:
        found = _registered.get(scheme)
    if found is not None:
        return found
    module = BUILTIN.get(scheme)
    if module is None:
        forms = ", ".join(f"{s}://" for s in schemes())
        raise UsageError(
            f"unknown store URL scheme {scheme!r}; use a directory path or one of {forms}"
        )
    loaded: Backend = importlib.import_module(module).BACKEND
    with _lock:
        return _registered.setdefault(scheme, loaded)
