"""Reads ahead for the jobs that read stored files from start to end: merges, re-rolls and journal
compactions.

Such a job reads one part of a file, works on it, then asks for the next: on an object store
each ask waits a round trip, one after another. Here the next part is already on its way:

- :class:`ReadAheadHost` wraps a merge's host (:class:`~inkpen.actors.kernel.compute.MergeHost`):
  when the merge asks for a run of an input, the run that follows it is fetched in the
  background, so the next ask finds it in hand; one run (:data:`~inkpen.actors.kernel.compute.
  READ_CHUNK`) per input ahead, so a merge of ``k`` inputs holds at most ``k`` more runs;
- :func:`journals_ahead` answers a reader of each journal file of a list, in order, each over
  the file read whole in one request, while the files after it are fetched: the next one
  always, more up to :data:`READ_AHEAD_BYTES`.

Both are used only where reads are round trips (:func:`~inkpen.objectstore.base.is_local` is
false): on a local directory or in memory a read costs less than handing it to another thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future

from inkpen.actors.kernel.compute import MergeHost
from inkpen.formats.journal import JournalReader
from inkpen.formats.sst import SstInfo
from inkpen.manifest.model import JournalFileDescriptor
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.parallel import submit

READ_AHEAD_BYTES = 64 * 1024 * 1024
"""Bytes of journal files :func:`journals_ahead` reads beyond the file being read and the next
one (which is always read ahead, whatever its size)."""

_Input = tuple[str, str | None]


class ReadAheadHost:
    """A merge host whose reads run one run ahead on each input (see the module docstring).

    ``sizes``: each input's size by ``(name, root)``; no run is fetched past an input's end."""

    def __init__(self, host: MergeHost, sizes: Mapping[_Input, int]) -> None:
        self._host = host
        self._sizes = dict(sizes)
        self._ahead: dict[_Input, tuple[int, int, Future[bytes]]] = {}
        self._lock = threading.Lock()

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        key = (name, root)
        with self._lock:
            ahead = self._ahead.pop(key, None)
        data: bytes | None = None
        if ahead is not None and ahead[:2] == (start, end):
            try:
                data = ahead[2].result()
            except Exception:
                data = None  # asked again below: the error, if it stays, is the read's own
        if data is None:
            data = self._host.read(name, root, start, end)
        size = self._sizes.get(key)
        if size is not None and start < end < size:
            following = (end, min(size, end + (end - start)))
            future = submit(self._host.read, name, root, *following)
            with self._lock:
                self._ahead[key] = (*following, future)
        return data

    def emit(self, data: bytes, info: SstInfo) -> None:
        self._host.emit(data, info)

    def restart(self) -> None:
        with self._lock:
            self._ahead.clear()
        self._host.restart()


def journals_ahead(
    tables: TableStore,
    files: Sequence[JournalFileDescriptor],
    *,
    max_bytes: int = READ_AHEAD_BYTES,
) -> Iterator[JournalReader]:
    """A reader of each of ``files`` in order, over its bytes read whole (one request each);
    meanwhile the next file is fetched, and the ones after it up to ``max_bytes``."""

    def fetch(descriptor: JournalFileDescriptor) -> bytes:
        return tables.read(descriptor)

    waiting: deque[tuple[JournalFileDescriptor, Future[bytes]]] = deque()
    following = iter(files)
    pending: JournalFileDescriptor | None = next(following, None)
    while pending is not None or waiting:
        # In flight: the file to read next, and after it the next one whatever its size, then
        # more while the ones after the next stay within max_bytes.
        ahead = sum(d.size for d, _ in list(waiting)[1:])
        while pending is not None and (len(waiting) < 2 or ahead + pending.size <= max_bytes):
            waiting.append((pending, submit(fetch, pending)))
            if len(waiting) > 1:
                ahead += pending.size
            pending = next(following, None)
        descriptor, future = waiting.popleft()
        data = future.result()
        yield TableStore.journal_in_memory(descriptor.name, data, sqn_base=descriptor.sqn_base)
