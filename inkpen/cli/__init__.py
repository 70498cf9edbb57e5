"""The ``inkpen`` command line: the click group ``main``, its global options and its commands.

Each command (or group of commands) lives in a module of its own in this package and is added to
the group here, so the group stays small: ``--debug`` (every inkpen log event on stderr, and
tracebacks instead of one-line errors) and ``--version``. :mod:`.failures` turns errors into one
line and an exit status; :mod:`.logconfig` is the only place logging is configured.

Commands are imported when they run (or their own ``--help`` is asked for): :data:`COMMANDS`
names each one's module and the summary ``inkpen --help`` lists, so listing them imports none
and ``inkpen --help`` stays quick (a test holds each summary to its command's help).

Which commands fence a live writer: ``put``, ``delete``, ``compact``, ``backup`` (without
``--no-fence``) and ``destroy`` open the database for writing. ``info``, ``lsm``, ``manifest``,
``ls``, ``get``, ``verify``, ``diff``, ``checkpoint``, ``feed``, ``merge-operators``, ``gc``,
``clone``, ``restore`` and ``backup --no-fence`` go through the manifest layer or a Reader and
never do; ``reshard`` reads its source through checkpoints and fences nothing there (it writes
only into its new data set).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

import click

from inkpen._version import __version__

from .failures import DEBUG_FLAG, CommandGroup


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command lives (``module`` of this package, its ``attribute``) and its summary:
    the first paragraph of its help, as ``inkpen --help`` lists it."""

    module: str
    attribute: str
    summary: str


COMMANDS: Mapping[str, LazyCommand] = {
    "backup": LazyCommand(
        ".backup",
        "backup",
        "Back up the database at URL into DEST (an empty location or an earlier backup).",
    ),
    "bench": LazyCommand(
        ".bench", "bench", "Benchmark inkpen: load, get and scan, one JSON line per workload."
    ),
    "checkpoint": LazyCommand(
        ".checkpoints",
        "checkpoint_group",
        "Create, list, refresh and delete checkpoints (never fences a live writer).",
    ),
    "clone": LazyCommand(
        ".clone", "clone", "Create CLONE (an empty location) as a shallow copy of PARENT."
    ),
    "compact": LazyCommand(
        ".compact",
        "compact",
        "Merge the ledger and compact the journal of the database at URL, now.",
    ),
    "compactor": LazyCommand(
        ".compactor", "compactor", "Run merges and GC for the database at URL in this process."
    ),
    "delete": LazyCommand(
        ".data",
        "delete",
        "Delete BUCKET/KEY (a durable tombstone) and the index entries named with --unindex.",
    ),
    "destroy": LazyCommand(
        ".destroy", "destroy", "Destroy the database at URL. Cannot be undone; needs --yes."
    ),
    "diff": LazyCommand(
        ".diff",
        "diff",
        "List the keys that differ between two databases: only-in-a, only-in-b or different.",
    ),
    "feed": LazyCommand(
        ".feed",
        "feed_group",
        "List, create, advance and delete feed cursors (never fences a live writer).",
    ),
    "gc": LazyCommand(
        ".gc", "gc", "Delete what the database at URL no longer needs (see --dry-run first)."
    ),
    "get": LazyCommand(
        ".data", "get", "Print the value of BUCKET/KEY (raw bytes), or its metadata with --head."
    ),
    "info": LazyCommand(
        ".info",
        "info",
        "Show a database: manifest, epochs, journal, ledger levels, checkpoints.",
    ),
    "ls": LazyCommand(
        ".data",
        "ls",
        "List buckets; or the keys of BUCKET; or, with --index, its index entries (TERM KEY).",
    ),
    "lsm": LazyCommand(
        ".lsm",
        "lsm",
        "Draw a database: its levels, L0 depth, journal, checkpoints, feed cursors and epochs.",
    ),
    "manifest": LazyCommand(
        ".manifests",
        "manifest_command",
        "Print a manifest of the database (the latest unless --id), or list the ids with --list.",
    ),
    "merge-operators": LazyCommand(
        ".merge_operators",
        "merge_operators_command",
        "List the merge operators the database records, or retire one with --forget.",
    ),
    "put": LazyCommand(
        ".data", "put", "Store VALUE (text) or the bytes of --file under BUCKET/KEY, durably."
    ),
    "reshard": LazyCommand(
        ".reshard",
        "reshard",
        "Copy the data set or database at SRC into a new data set of SHARDS shards at DEST.",
    ),
    "restore": LazyCommand(
        ".backup",
        "restore",
        "Make DEST (an empty location) a working database holding BACKUP's objects.",
    ),
    "verify": LazyCommand(
        ".verify",
        "verify",
        "Check every checksum of every object the database needs; exit 3 if any is damaged.",
    ),
}
"""Every command of ``inkpen``, by name."""


def load_command(name: str) -> click.Command:
    """Import the command ``name`` of :data:`COMMANDS`."""
    where = COMMANDS[name]
    command = getattr(importlib.import_module(where.module, __name__), where.attribute)
    assert isinstance(command, click.Command)
    return command


class _Commands(CommandGroup):
    """The ``inkpen`` group: commands from :data:`COMMANDS`, each imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        command = self.commands.get(cmd_name)
        if command is None:
            command = self.commands[cmd_name] = load_command(cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, _shorten(COMMANDS[name].summary, limit)) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _shorten(text: str, limit: int) -> str:
    """``text`` cut at a word to ``limit`` characters, with ``...`` when cut (as click does)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "..."


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="inkpen")
@click.option(
    "--debug",
    is_flag=True,
    help="Print every inkpen log event (DEBUG and up) on stderr, and tracebacks on errors.",
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """inkpen: an embeddable key-value object store on object storage.

    URL is a database root: a directory, file:///abs/path, or s3://bucket/prefix (with
    ?endpoint=http://host:port for an S3-compatible server; credentials come from the usual AWS
    variables). Exit status: 0 ok, 1 failed, 2 bad usage, 3 damaged data.

    \b
    Example:
      inkpen info ./.inkpen-demo/db
      inkpen ls ./.inkpen-demo/db users --limit 5
      inkpen verify ./.inkpen-demo/db
    """
    from .logconfig import configure_logging

    ctx.meta[DEBUG_FLAG] = debug
    configure_logging(debug=debug)


__all__ = ["COMMANDS", "LazyCommand", "load_command", "main"]
