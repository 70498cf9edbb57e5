"""Lazy exports: a package's public names, each imported from its module on first use.

``import inkpen`` should load what opening a Bookie needs and no more (the admin paths, asyncio,
the sharded handle and every backend's client wait until they are asked for). A package declares
its exports as ``{name: module}`` and assigns the two functions :func:`lazy_exports` returns to
its module-level ``__getattr__`` and ``__dir__`` (PEP 562); type checkers see the same names
through imports under ``if TYPE_CHECKING:``, so every name keeps its real type.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Collection, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str], submodules: Collection[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: name ``n`` is the attribute ``n`` of
    module ``exports[n]`` (relative to ``package`` when it starts with a dot), and each name of
    ``submodules`` is the submodule of that name."""

    def __getattr__(name: str) -> object:
        if name in submodules:
            value: object = importlib.import_module(f"{package}.{name}")
        elif name in exports:
            value = getattr(importlib.import_module(exports[name], package), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(submodules))

    return __getattr__, __dir__
