"""Imported first by ``inkpen.pipeline``: without PySpark and PyArrow (the ``spark`` extra) the
import fails at once, saying what to install, instead of deep inside a submodule."""

from __future__ import annotations

import importlib.util

_MISSING = [name for name in ("pyspark", "pyarrow") if importlib.util.find_spec(name) is None]
if _MISSING:
    raise ImportError(
        f"inkpen.pipeline is inkpen's PySpark data source and needs {' and '.join(_MISSING)}, "
        "which are not installed: install inkpen with its spark extra, "
        "pip install 'inkpen[spark]'",
        name=_MISSING[0],
    )
