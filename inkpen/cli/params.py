"""Click types of the command's numbers, sharing the bounds of :mod:`inkpen.checks`.

A value out of range is a click usage error (exit status 2) before anything is opened, with the
same bounds as the library's own checks: an SQN fits every format that stores one, a count or
limit fits a Python index, a manifest id fits its 20-digit object key. Durations are
:class:`~inkpen.cli.durations.Duration`, bounded by ``inkpen.checks.MAX_SECONDS``.
"""

from __future__ import annotations

import click

from inkpen.checks import MAX_COUNT, MAX_SQN
from inkpen.manifest.paths import MAX_ID

SQN = click.IntRange(0, MAX_SQN)
"""An SQN: 0 up to the largest SQN every format holds."""
COUNT = click.IntRange(1, MAX_COUNT)
"""A positive count or limit (``--limit``, ``--gets``...)."""
MANIFEST_ID = click.IntRange(1, min(MAX_ID, MAX_COUNT))
"""A manifest id: 1 up to the largest its 20-digit object key and a manifest field can hold."""

__all__ = ["COUNT", "MANIFEST_ID", "SQN"]
