"""Logging for the ``inkpen`` command: the one place that configures it (the library never does).

inkpen's structlog events go to stdlib loggers named ``inkpen.<area>`` (see :mod:`inkpen.logs`),
rendered as ``key=value`` lines. The command sends them to stderr, so stdout carries only results:

- by default, warnings and errors from every area, and, when stderr is not a terminal, the
  command's own ``inkpen.cli`` events from INFO up (progress lines; on a terminal a progress
  bar shows instead);
- with ``--debug``, every inkpen event from DEBUG up (other libraries' from WARNING up).
"""

from __future__ import annotations

import logging
import sys

INKPEN_LOGGER = "inkpen"
CLI_LOGGER = "inkpen.cli"
FORMAT = "%(asctime)s %(name)s %(message)s"
_HANDLER_NAME = "inkpen-cli"


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when an event is emitted (it may be replaced)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def configure_logging(*, debug: bool) -> None:
    """Send inkpen's events to stderr at the command's levels (idempotent)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger(INKPEN_LOGGER).setLevel(logging.DEBUG if debug else logging.WARNING)
    quiet = logging.WARNING if sys.stderr.isatty() else logging.INFO
    logging.getLogger(CLI_LOGGER).setLevel(logging.DEBUG if debug else quiet)
