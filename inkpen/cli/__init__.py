"""The ``inkpen`` command line: the click group ``main`` and its global options.

Each command lives in a module of its own in this package and is added to the group here, so the
group stays small: ``--debug`` (inkpen's log events at DEBUG level on stderr) and ``--version``.
"""

from __future__ import annotations

import logging
import sys

import click

from inkpen._version import __version__

from .bench import bench


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="inkpen")
@click.option("--debug", is_flag=True, help="Print inkpen's log events (DEBUG and up) on stderr.")
def main(debug: bool) -> None:
    """inkpen: an embeddable key-value object store on object storage."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(message)s",
    )


main.add_command(bench)

__all__ = ["main"]
