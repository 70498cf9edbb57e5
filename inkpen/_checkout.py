"""Import from a checkout: the package's sibling folders become its subpackages.

The wheel (and the editable install's link tree) lays inkpen out as one package: ``inkpen.actors``
is the checkout's ``actors/`` folder, ``inkpen.formats`` its ``formats/``, and so on, by the
``[tool.setuptools.package-dir]`` mapping of pyproject.toml. In the checkout's root those folders
sit *beside* ``inkpen/``, not in it, and Python puts the current directory first on ``sys.path``
(the REPL, ``python -c``, ``python -m inkpen.cli``): ``import inkpen`` then finds the checkout's
``inkpen/`` folder, which has no ``actors/`` inside.

Importing this module answers that case. When ``inkpen`` was imported from a folder that has no
``actors/`` but whose parent holds inkpen's pyproject.toml, it reads that file's package-dir
mapping and puts a finder on ``sys.meta_path`` that answers exactly the mapped subpackages
(``inkpen.actors`` -> ``<root>/actors``, ...) from the checkout. Their own submodules are then
found the ordinary way, through each subpackage's ``__path__``. An installed inkpen (the wheel, or
the link tree) has its subpackages inside: nothing is changed, and nothing but :mod:`os` is used
to find that out (``import inkpen`` stays quick).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import importlib.machinery
    from pathlib import Path
    from types import ModuleType

PACKAGE = "inkpen"


class CheckoutRooms:
    """Finds ``inkpen.<room>`` for each room pyproject.toml maps to a folder of the checkout (a
    meta path finder: ``find_spec`` is all ``sys.meta_path`` asks of one)."""

    def __init__(self, rooms: Mapping[str, Path]) -> None:
        self.rooms = dict(rooms)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        folder = self.rooms.get(fullname)
        if folder is None:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def checkout_rooms(package_dir: Path) -> dict[str, Path]:
    """The subpackages to find in the checkout, or nothing when ``package_dir`` is installed."""
    root = package_dir.parent
    pyproject = root / "pyproject.toml"
    if (package_dir / "actors").is_dir() or not pyproject.is_file():
        return {}
    import tomllib

    try:
        config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    if config.get("project", {}).get("name") != PACKAGE:
        return {}
    mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    rooms: dict[str, Path] = {}
    for name, folder in mapping.items():
        if not isinstance(name, str) or not name.startswith(PACKAGE + "."):
            continue
        where = root / str(folder)
        if (where / "__init__.py").is_file():
            rooms[name] = where
    return rooms


def install() -> None:
    """Put the finder on ``sys.meta_path`` when ``inkpen`` is imported from a checkout (once)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(os.path.join(here, "actors")):
        return  # installed: the subpackages are inside
    if any(isinstance(finder, CheckoutRooms) for finder in sys.meta_path):
        return
    from pathlib import Path

    rooms = checkout_rooms(Path(here))
    if rooms:
        sys.meta_path.append(CheckoutRooms(rooms))


install()
