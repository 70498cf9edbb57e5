"""``python -m inkpen.cli``: the ``inkpen`` command without its installed script."""

from __future__ import annotations

from inkpen.cli import main

main(prog_name="inkpen")
