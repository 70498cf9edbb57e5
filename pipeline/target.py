"""Where a bulk load writes: the database, opened (or created) on the driver before any task.

Spark asks the data source for its writer on the driver before it starts a single task, so
everything that can be checked without the data is checked there: the options, the DataFrame's
columns (:func:`inkpen.pipeline.schema.load_columns`), and the database itself. An empty root
gets a new, empty database; a root holding objects that are not an inkpen database, a destroyed
database or an unfinished clone is refused with the error that says so. The resulting
:class:`LoadTarget` is what every task receives.
"""

from __future__ import annotations

from dataclasses import dataclass

from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store

from .options import LoadOptions
from .schema import LoadColumns


@dataclass(frozen=True, slots=True)
class LoadTarget:
    """Where and how the tasks of one bulk load write."""

    url: str
    columns: LoadColumns
    sst_bytes: int
    journal_bytes: int
    writer_epoch: int
    """The database's writer epoch when the load began; recorded in the journal files' headers
    for the record only (bulk-loaded files are never segments, so no reader rule reads it)."""


def prepare_load(options: LoadOptions, columns: LoadColumns) -> LoadTarget:
    """Open the database at ``options.url`` (creating an empty one at an empty root)."""
    store = open_store(options.url)
    try:
        latest = ManifestStore(store).open_database(create_if_missing=True)
        return LoadTarget(
            url=options.url,
            columns=columns,
            sst_bytes=options.sst_bytes,
            journal_bytes=options.journal_bytes,
            writer_epoch=latest.manifest.writer_epoch,
        )
    finally:
        store.close()
