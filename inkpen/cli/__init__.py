"""The ``inkpen`` command line: the click group ``main``, its global options and its commands.

Each command (or group of commands) lives in a module of its own in this package and is added to
the group here, so the group stays small: ``--debug`` (every inkpen log event on stderr, and
tracebacks instead of one-line errors) and ``--version``. :mod:`.failures` turns errors into one
line and an exit status; :mod:`.logconfig` is the only place logging is configured.

Which commands fence a live writer: ``put``, ``delete``, ``compact``, ``backup`` (without
``--no-fence``) and ``destroy`` open the database for writing. ``info``, ``lsm``, ``manifest``,
``ls``, ``get``, ``verify``, ``diff``, ``checkpoint``, ``feed``, ``gc``, ``clone``, ``restore`` and
``backup --no-fence`` go through the manifest layer or a Reader and never do; ``reshard`` reads
its source through checkpoints and fences nothing there (it writes only into its new data set).
"""

from __future__ import annotations

import click

from inkpen._version import __version__

from .backup import backup, restore
from .bench import bench
from .checkpoints import checkpoint_group
from .clone import clone
from .compact import compact
from .compactor import compactor
from .data import delete, get, ls, put
from .destroy import destroy
from .diff import diff
from .failures import DEBUG_FLAG, CommandGroup
from .feed import feed_group
from .gc import gc
from .info import info
from .logconfig import configure_logging
from .lsm import lsm
from .manifests import manifest_command
from .reshard import reshard
from .verify import verify


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    ctx.meta[DEBUG_FLAG] = debug
    configure_logging(debug=debug)


for command in (
    info,
    lsm,
    manifest_command,
    checkpoint_group,
    feed_group,
    ls,
    get,
    put,
    delete,
    compact,
    compactor,
    gc,
    backup,
    restore,
    verify,
    diff,
    clone,
    destroy,
    reshard,
    bench,
):
    main.add_command(command)

__all__ = ["main"]
