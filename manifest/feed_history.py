"""The change history as the store holds it, read without writing: what a process other than the
writer checks feed cursors against (:class:`~inkpen.manifest.feed_cursors.FeedHistory`).

The latest manifest knows only what the writer has rolled and persisted; the journal segments
after its ``last_rolled_segment`` hold the rest, and a put is acknowledged only once its segment
is stored. So the **last SQN** is the highest of the latest manifest's journal files and ledger
and of the last journal segment the reader rule accepts after it (its header, a ranged read):
every write acknowledged before the question was asked counts.

**What is held** over ``(since, upto]`` is read from the journal files of the latest manifest
over that range (every entry: an SQN absent or not whole is not held) and from the headers of
the first and last segments after them (a segment holds its batch's run whole, and SQNs are
dense, so those two bound every SQN the segments hold). Nothing pins what is read, so a file or
segment collected meanwhile (a compaction or roll committed, then its inputs deleted) is met as
:class:`~inkpen.errors.NotFoundError` and the question is asked again of the newer manifest; the
answer names the journal files it read, which the cursor's update compares with the manifest it
builds on.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from inkpen.errors import NotFoundError, StoreError
from inkpen.formats.journal import EMPTY_JOURNAL_SIZE, HEADER_SIZE, Kind, read_header
from inkpen.objectstore import ObjectStore

from .clones import StoreResolver
from .feed_cursors import NotHeld, files_over, not_held_in
from .fencing import accepted_segments, scan_latest, with_epochs
from .model import VersionedManifest
from .paths import segment_key
from .store import ManifestStore
from .table_store import TableStore

ATTEMPTS = 8
"""Times a question is asked again of a newer manifest after a file it read was collected."""

WHOLE = (Kind.OBJECT, Kind.TOMBSTONE)


class StoredHistory:
    """:class:`~inkpen.manifest.feed_cursors.FeedHistory` read from the store of a database
    (see the module docstring); makes no write. A context manager (it closes the stores of a
    clone's parents it opened)."""

    def __init__(self, store: ObjectStore) -> None:
        self._manifests = ManifestStore(store)
        self._resolver = StoreResolver(store)
        self._tables = TableStore(store, resolver=self._resolver)

    def last_sqn(self) -> int:
        for _ in range(ATTEMPTS):
            try:
                versioned, segments = self._state()
            except NotFoundError:
                continue  # rolled and collected since the listing: the newer manifest has it
            manifest = versioned.manifest
            return max(
                [
                    manifest.ledger.persisted_sqn,
                    *(f.max_sqn for f in manifest.journal.files),
                    *(s.max_sqn for s in manifest.ledger.ssts()),
                    *(segments[1:]),
                ]
            )
        raise self._vanishing()

    def not_held(self, since: int, upto: int) -> NotHeld:
        for _ in range(ATTEMPTS):
            try:
                versioned, segments = self._state()
                present = self._present(versioned, segments, since, upto)
                first, last = not_held_in(present, since, upto)
            except NotFoundError:
                continue
            return NotHeld(first, last, files_over(versioned.manifest, since, upto))
        raise self._vanishing()

    def _present(
        self, versioned: VersionedManifest, segments: tuple[int, ...], since: int, upto: int
    ) -> Iterator[tuple[int, bool]]:
        """Each SQN of ``(since, upto]`` the journal holds, ascending, with whether its change is
        there whole: every entry of the journal files over the range, then the segments' run."""
        for descriptor in versioned.manifest.journal.files:
            if descriptor.max_sqn > since and descriptor.min_sqn <= upto:
                for entry in self._tables.open_journal(descriptor).iter_entries():
                    yield entry.sqn, entry.kind in WHOLE
        if segments:
            low, high = max(segments[0], since + 1), min(segments[1], upto)
            yield from ((n, True) for n in range(low, high + 1))

    def _state(self) -> tuple[VersionedManifest, tuple[int, ...]]:
        """The latest manifest, and the SQNs its unrolled segments run from and to (none: ())."""
        latest = self._manifests.latest()
        if latest is None:
            raise NotFoundError(f"no inkpen database at {self._manifests.url}")
        versioned, scan = scan_latest(self._manifests, latest)
        store = self._manifests.store
        refs = accepted_segments(with_epochs(store, scan.refs))
        data = [r for r in refs if r.size > EMPTY_JOURNAL_SIZE]  # fences hold no entries
        if not data:
            return versioned, ()
        # Each segment holds one batch's run and SQNs are dense: the first and the last header
        # give them all.
        keys = [segment_key(data[0].id), segment_key(data[-1].id)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            heads = list(pool.map(lambda key: store.get_range(key, 0, HEADER_SIZE), keys))
        first, last = (read_header(head, key) for head, key in zip(heads, keys, strict=True))
        return versioned, (first.min_sqn, last.max_sqn)

    def _vanishing(self) -> StoreError:
        return StoreError(
            f"the journal of {self._manifests.url} changed under every one of {ATTEMPTS} reads "
            "(its files were collected as they were read); try again",
            definite=True,
        )

    def close(self) -> None:
        self._resolver.close()

    def __enter__(self) -> StoredHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["StoredHistory"]
