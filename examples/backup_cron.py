"""Back up a database from cron: a dated copy each run, the newest few kept, one line of output.

    python examples/backup_cron.py SOURCE BACKUPS [--keep 7] [--checkpoint ID]

    # crontab: every night at 02:30
    30 2 * * *  /srv/app/.venv/bin/python /srv/app/examples/backup_cron.py /srv/app/db /backups/app

SOURCE and BACKUPS are store URLs (directories, or ``s3://bucket/prefix?endpoint=...``). Each run
copies SOURCE into ``BACKUPS/<UTC time>`` (such as ``20250101T023000.000Z``) without opening a
writer: it reads SOURCE at a checkpoint (one it holds while it copies, or ``--checkpoint ID``),
so the application writing SOURCE keeps running. A cron job must never call
``inkpen.open(SOURCE)``: opening a database for writing fences its live writer. Files are hard
links on one local filesystem and server-side copies on S3. The run then destroys the oldest dated
backups beyond ``--keep``. Every backup is a database: ``inkpen restore BACKUPS/<time> NEW`` makes
a working one, ``inkpen verify BACKUPS/<time>`` checks it.

Output, as cron wants it: one line on stdout per run, inkpen's warnings on stderr, exit status 0,
or 1 with one line saying what failed.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import inkpen

log = logging.getLogger("examples.backup_cron")

NAME = re.compile(r"^\d{8}T\d{6}\.\d{3}Z$")


def backup_name(now: float) -> str:
    """The dated name of a backup taken at ``now``; names sort in time order."""
    millis = int(now * 1000) % 1000
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{millis:03d}Z"


def child_url(base: str, name: str) -> str:
    """The URL of ``name`` under the root ``base`` (a directory, file:// or s3:// URL)."""
    if "://" not in base:
        return base.rstrip("/") + "/" + name
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + name))


def prune(base: str, keep: int) -> list[str]:
    """Destroy the oldest dated backups until ``keep`` are left; answers the names destroyed."""
    removed = []
    dated = [name for name in inkpen.list_databases(base) if NAME.match(name)]
    for name in dated[:-keep]:
        url = child_url(base, name)
        try:
            inkpen.destroy(url, soft=False)
        except inkpen.UsageError as exc:  # live checkpoints: someone is reading it
            log.warning("backup %s kept: %s", url, exc)
            continue
        removed.append(name)
    return removed


def run(source: str, backups: str, keep: int, checkpoint: str | None) -> str:
    """One cron run; answers the line to print."""
    dest = child_url(backups, backup_name(time.time()))
    report = inkpen.backup(source, dest, checkpoint=checkpoint)
    removed = prune(backups, keep)
    return (
        f"backed up {source} to {dest}: {report.files} files, {report.files_copied} copied "
        f"({report.bytes_copied:,} bytes) in {report.seconds:.2f}s; "
        f"removed {len(removed)} old backup(s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="store URL or directory of the database to back up")
    parser.add_argument("backups", help="store URL or directory that holds the dated backups")
    parser.add_argument("--keep", type=int, default=7, help="dated backups to keep (default 7)")
    parser.add_argument("--checkpoint", default=None, help="copy this live checkpoint's state")
    args = parser.parse_args(argv)
    if args.keep < 1:
        parser.error("--keep must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        print(run(args.source, args.backups, args.keep, args.checkpoint))
    except inkpen.InkpenError as exc:
        print(f"backup of {args.source} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
