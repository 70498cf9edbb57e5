"""How the ``inkpen`` command fails: exit statuses, and one clear line instead of a traceback.

Every command runs inside :class:`CommandGroup`, which turns what inkpen raises into one line on
stderr and an exit status a script can branch on:

==  ===================================================================================
0   success
1   the operation failed: no database there, the store refused or failed, a newer writer
2   bad usage: a wrong argument or option, a refused call (``inkpen.UsageError``)
3   damaged data: ``inkpen verify`` found damage, or a read met a ``CorruptionError``
==  ===================================================================================

With ``inkpen --debug`` nothing is translated: the exception propagates with its traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from inkpen.errors import CorruptionError, InkpenError, UsageError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_DAMAGED = 3
EXIT_INTERRUPTED = 130

DEBUG_FLAG = "inkpen.debug"
"""Key in ``click.Context.meta`` under which the group records ``--debug``."""


class CommandFailed(click.ClickException):
    """A failure shown as ``Error: <message>`` with a chosen exit status."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        # click declares exit_code on the class; this failure carries its own.
        self.exit_code = exit_code  # type: ignore[misc]


def exit_code_for(error: BaseException) -> int:
    """The exit status for an exception raised by inkpen."""
    if isinstance(error, UsageError):
        return EXIT_USAGE
    if isinstance(error, CorruptionError):
        return EXIT_DAMAGED
    return EXIT_FAILED


def describe(error: BaseException) -> str:
    """One line saying what went wrong, for an exception of any kind."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, InkpenError | OSError):
        return text  # a StoreError's text already says whether it happened
    return f"unexpected {type(error).__name__}: {text} (run with --debug for the traceback)"


class CommandGroup(click.Group):
    """A click group whose commands fail with one line and a meaningful exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:
            # The reader of our output went away (``inkpen ls URL | head``): stop quietly, with
            # stdout pointed at /dev/null so the interpreter's last flush has nowhere to fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(EXIT_OK)
        except KeyboardInterrupt:
            if ctx.meta.get(DEBUG_FLAG):
                raise
            raise CommandFailed("interrupted", EXIT_INTERRUPTED) from None
        except Exception as error:
            if ctx.meta.get(DEBUG_FLAG):
                raise
            raise CommandFailed(describe(error), exit_code_for(error)) from error
