"""The manifest store: finds the current manifest and advances it by compare-and-swap.

Protocol. Manifest versions are objects ``manifest/<id>.manifest`` with contiguous ids from 1; the
highest id is the current manifest. A version is never rewritten: an update reads the latest
version ``V`` at id ``n``, applies a change, and creates ``n + 1`` with create-if-absent. When that
create loses (another process wrote ``n + 1`` first), the updater re-reads the latest version and
applies its change again, so a change must be a pure function of the manifest it is given.
Losers back off with full jitter and give up after a timeout with a definite error.

Finding the latest: LIST ``manifest/`` and take the highest id, then probe ``id + 1``, ``id + 2``,
... until one is absent, so a version written while the listing ran is still found. The last
version seen is cached; the next look-up probes from it (one GET when nothing changed) and lists
again only after several probes in a row succeed.

An indefinite store error on the create (the write may or may not have landed) is resolved by
reading ``n + 1`` back: our exact bytes mean the update happened; absence means it did not (write
again); anyone else's bytes mean we lost the race (re-apply).

Epochs. An update made on behalf of a writer names the writer's epoch: when the latest manifest
holds a higher ``writer_epoch`` the writer has been fenced (:class:`FencedError`, no retry); a lower
one is a bug (epochs only go up).

Invariants: ids are contiguous (an update only ever creates ``latest + 1``); every stored version
decodes; an update never overwrites a version.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Callable

from inkpen.errors import (
    AlreadyExistsError,
    FencedError,
    InkpenError,
    NotFoundError,
    StoreError,
    UsageError,
)
from inkpen.logs import get_logger
from inkpen.objectstore import ObjectStore, open_store

from .model import Manifest, VersionedManifest, decode, encode
from .paths import DATA_SET_KEY, MANIFEST_PREFIX, manifest_key, parse_manifest_key

log = get_logger("inkpen.manifest")

LANDING_ATTEMPTS = 5
"""Attempts of one confirmed update (:meth:`ManifestStore.update_landed`) whose version landed
below the latest before giving up."""

_BACKOFF_FIRST = 0.002
_BACKOFF_CAP = 0.25
_RELIST_ATTEMPTS = 5

ManifestChange = Callable[[VersionedManifest], Manifest | None]


class RootState(enum.StrEnum):
    """What a store root holds, as far as opening a database there is concerned."""

    EMPTY = "empty"
    """Nothing at all: a database may be created here."""
    DATABASE = "database"
    """At least one manifest: an inkpen database (possibly destroyed or still being cloned)."""
    FOREIGN = "foreign"
    """Objects but no manifest: not an inkpen database; inkpen will not write here."""


def as_store(store_or_url: ObjectStore | str) -> ObjectStore:
    """An :class:`ObjectStore` as given, or the one a store URL names."""
    if isinstance(store_or_url, str):
        return open_store(store_or_url)
    if isinstance(store_or_url, ObjectStore):
        return store_or_url
    raise UsageError(f"expected a store URL or an ObjectStore, got {type(store_or_url).__name__}")


def require_live(versioned: VersionedManifest, url: str | None = None) -> VersionedManifest:
    """Return ``versioned`` when it describes a usable database, else raise a clear error.

    A destroyed database raises :class:`NotFoundError`; a clone or a first hot backup whose
    creation did not finish raises :class:`UsageError` saying how to finish it. ``url`` names
    the database in messages.
    """
    url = url or "this location"
    manifest = versioned.manifest
    if manifest.destroyed_at is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(manifest.destroyed_at))
        raise NotFoundError(
            f"database at {url} was destroyed at {when}; its data is being removed. "
            "Create a new database at another root, or restore it from a backup",
            key=manifest_key(versioned.id),
        )
    if not manifest.initialized:
        if manifest.parent is None:
            raise UsageError(
                f"database at {url} is a hot backup that did not finish; take the backup into "
                "it again (only what is missing is copied), or destroy it"
            )
        raise UsageError(
            f"database at {url} is a clone of {manifest.parent.root} whose creation did not "
            "finish; call create_clone again with the same arguments to finish it, or destroy it"
        )
    return versioned


class ManifestStore:
    """Reads and CAS-advances the manifest versions of the database under one store root.

    Thread-safe: one instance may serve many threads; the cache of the latest version only ever
    moves forward.
    """

    def __init__(self, store: ObjectStore) -> None:
        if not isinstance(store, ObjectStore):
            raise UsageError(f"ManifestStore needs an ObjectStore, got {type(store).__name__}")
        self._store = store
        self._lock = threading.Lock()
        self._cached: VersionedManifest | None = None

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def url(self) -> str:
        return self._store.url

    # -- reading ---------------------------------------------------------------------------------

    def ids(self) -> list[int]:
        """Every manifest id present, ascending."""
        found = (parse_manifest_key(info.key) for info in self._store.list(MANIFEST_PREFIX))
        return sorted(i for i in found if i is not None)

    def read(self, manifest_id: int) -> Manifest:
        """The manifest stored under ``manifest_id``; :class:`NotFoundError` when absent."""
        key = manifest_key(manifest_id)
        try:
            data = self._store.get(key)
        except NotFoundError:
            raise NotFoundError(
                f"manifest {manifest_id} does not exist in {self.url}", key=key
            ) from None
        return decode(data, key)

    def _read_optional(self, manifest_id: int) -> VersionedManifest | None:
        key = manifest_key(manifest_id)
        try:
            data = self._store.get(key)
        except NotFoundError:
            return None
        return VersionedManifest(manifest_id, decode(data, key))

    def _remember(self, versioned: VersionedManifest) -> VersionedManifest:
        with self._lock:
            if self._cached is None or versioned.id > self._cached.id:
                self._cached = versioned
            return self._cached

    def latest(self) -> VersionedManifest | None:
        """The current manifest version, or None when the root holds no manifest.

        From a cached version, one listing of the ids above it answers; the next id being
        absent proves nothing, because GC deletes superseded versions and so leaves gaps below
        the latest (probing alone would take a gap for the end, and an update would then write
        into it, below the latest: a lost update). An update therefore always starts from a
        listed latest; a gap can still open under it if two newer versions are written and the
        first collected within one update. A ``min_age`` longer than an update rules that out;
        the writer's own GC may run at any age, so the writer's checkpoint keeps every version
        from the writer's last commit up (its updates never land in a gap), and checkpoint
        changes confirm they show in the latest afterwards (:mod:`inkpen.manifest.checkpoints`).
        """
        with self._lock:
            cached = self._cached
        if cached is None:
            return self._latest_by_listing()
        newer = self._ids_above(cached.id)
        if not newer:
            return cached
        current = self._read_optional(newer[-1])
        if current is None:
            return self._latest_by_listing()
        while (following := self._read_optional(current.id + 1)) is not None:
            current = following
        return self._remember(current)

    def _ids_above(self, manifest_id: int) -> list[int]:
        """Ids of the manifests stored above ``manifest_id``, ascending (one listing)."""
        found: list[int] = []
        token: str | None = manifest_key(manifest_id)
        while token is not None:
            page = self._store.list_page(MANIFEST_PREFIX, token=token)
            found.extend(i for i in map(parse_manifest_key, (o.key for o in page.objects)) if i)
            token = page.next_token
        return sorted(i for i in found if i > manifest_id)

    def _latest_by_listing(self) -> VersionedManifest | None:
        for _ in range(_RELIST_ATTEMPTS):
            ids = self.ids()
            if not ids:
                return None
            current = self._read_optional(ids[-1])
            if current is None:
                # Deleted between the listing and the read (GC of a superseded version): list again.
                continue
            while (following := self._read_optional(current.id + 1)) is not None:
                current = following
            return self._remember(current)
        raise StoreError(
            f"manifests in {self.url} kept disappearing while the latest was being found; "
            "is a destroy running against this database?",
            definite=True,
        )

    def check_root_state(self) -> RootState:
        """Whether the root is empty, holds an inkpen database, or holds something else.

        The root is listed before ``manifest/``: a database's first object is its manifest, so
        objects seen in the root listing were either there with a manifest already or are not
        a database's. (The other order took a database another process created between the two
        listings for foreign objects, refusing one of several concurrent first opens.)
        """
        if not self._store.list_page("", limit=1).objects:
            return RootState.EMPTY
        if any(parse_manifest_key(i.key) is not None for i in self._store.list(MANIFEST_PREFIX)):
            return RootState.DATABASE
        return RootState.FOREIGN

    def open_database(self, *, create_if_missing: bool) -> VersionedManifest:
        """The latest manifest of a live database here, creating an empty one when asked.

        Refuses (writing nothing) a root that holds objects but no manifest, a destroyed
        database, and an unfinished clone.
        """
        state = self.check_root_state()
        if state is RootState.FOREIGN:
            if self._holds_data_set():
                raise UsageError(
                    f"{self.url} is a sharded data set (it holds {DATA_SET_KEY}), not one "
                    "database: open it with inkpen.shards.open(url), or one of its shards "
                    "with inkpen.shards.shard_url(url, i)"
                )
            raise UsageError(
                f"{self.url} holds objects but no inkpen manifest; it is not an inkpen "
                "database. Open an empty root or an existing database instead"
            )
        if state is RootState.EMPTY:
            if not create_if_missing:
                raise NotFoundError(f"no inkpen database at {self.url}", key=manifest_key(1))
            try:
                return self.create(Manifest())
            except AlreadyExistsError:
                pass  # created by a concurrent opener: use theirs
        latest = self.latest()
        if latest is None:
            raise NotFoundError(f"no inkpen database at {self.url}", key=manifest_key(1))
        return require_live(latest, self.url)

    def _holds_data_set(self) -> bool:
        """Whether the root holds a sharded data set's descriptor (``inkpen.shards``)."""
        try:
            self._store.head(DATA_SET_KEY)
        except NotFoundError:
            return False
        return True

    # -- writing ---------------------------------------------------------------------------------

    def create(self, manifest: Manifest) -> VersionedManifest:
        """Store ``manifest`` as version 1; :class:`AlreadyExistsError` if a database exists."""
        if not isinstance(manifest, Manifest):
            raise UsageError(f"create needs a Manifest, got {type(manifest).__name__}")
        key = manifest_key(1)
        data = encode(manifest)
        try:
            self._store.put_if_absent(key, data)
        except AlreadyExistsError:
            raise AlreadyExistsError(
                f"a database already exists at {self.url}; open it instead of creating one",
                key=key,
            ) from None
        except StoreError as exc:
            if exc.definite or not self._holds(key, data):
                raise
        log.debug("manifest.created", url=self.url, manifest_id=1)
        return self._remember(VersionedManifest(1, manifest))

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self._store.get(key) == data
        except NotFoundError:
            return False

    def update(
        self,
        change: ManifestChange,
        *,
        writer_epoch: int | None = None,
        timeout: float = 60.0,
    ) -> VersionedManifest:
        """Apply ``change`` to the latest manifest and store the result as the next version.

        ``change`` gets the latest :class:`VersionedManifest` and returns the new
        :class:`Manifest`, or None when there is nothing to do (then the latest is returned and
        nothing is written). It may be called several times (once per lost race) and must be a
        pure function of its argument; it may raise to abort the update.

        ``writer_epoch``: the epoch of the writer making this update. A higher epoch in the
        latest manifest raises :class:`FencedError` at once.

        Raises :class:`NotFoundError` when there is no manifest, :class:`StoreError`
        (definite) when contention kept the update from landing within ``timeout`` seconds.
        """
        if not callable(change):
            raise UsageError("update needs a callable change(versioned) -> Manifest | None")
        if writer_epoch is not None and (
            not isinstance(writer_epoch, int) or isinstance(writer_epoch, bool)
        ):
            raise UsageError(f"writer_epoch must be an int, got {writer_epoch!r}")
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise UsageError(f"timeout must be a positive number of seconds, got {timeout!r}")
        deadline = time.monotonic() + timeout
        current = self.latest()
        attempt = 0
        while True:
            if current is None:
                raise NotFoundError(f"no inkpen database at {self.url}", key=manifest_key(1))
            self._check_epoch(current, writer_epoch)
            new = change(current)
            if new is None:
                return current
            if not isinstance(new, Manifest):
                raise UsageError(
                    f"a manifest change must return a Manifest or None, got {type(new).__name__}"
                )
            data = encode(new)
            outcome = self._write_next(current.id + 1, data, deadline)
            if outcome is True:
                return self._remember(VersionedManifest(current.id + 1, new))
            attempt += 1
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"contention on the manifest of {self.url} kept an update from landing for "
                    f"{timeout:.1f}s ({attempt} attempts); reduce the number of processes "
                    "updating this database at once, or retry later",
                    definite=True,
                    key=manifest_key(current.id + 1),
                )
            _backoff(attempt, deadline)
            current = self.latest()

    def update_landed(
        self,
        change: ManifestChange,
        landed: Callable[[Manifest], bool],
        *,
        event: str,
        subject: str,
        attempts: int = LANDING_ATTEMPTS,
        **context: object,
    ) -> VersionedManifest:
        """:meth:`update`, confirmed: afterwards the latest manifest must show the change
        (``landed``), else the version it was written as lay below the latest and the update is
        made again from the latest, up to ``attempts`` times (then a definite
        :class:`StoreError`).

        An update of another process than the writer can land so: between its read of version
        ``n`` and its create of ``n + 1``, the writer may commit ``n + 1`` and ``n + 2`` and its
        own GC (which may run at any ``min_age``) collect the superseded ``n + 1``; the create
        then finds the slot free. Such a version is taken for the latest by no one and built on
        by no one, so what it records (a checkpoint, a feed cursor) holds nothing back. The
        writer's own commits cannot land so: its checkpoint pins every version from its last
        commit up. Every checkpoint and feed-cursor change of other processes comes through
        here. ``event`` is logged at each retry with ``context``; ``subject`` names what was
        changed in the final error."""
        url = self.url
        for attempt in range(1, attempts + 1):
            result = self.update(change)
            latest = self.latest()
            if latest is not None and landed(latest.manifest):
                return result
            log.warning(
                event,
                url=url,
                **context,
                manifest_id=result.id,
                latest=None if latest is None else latest.id,
                attempt=attempt,
            )
        raise StoreError(
            f"{subject} could not be recorded in the manifest of {url}: {attempts} times the "
            "version it was written as was collected before the write landed (superseded "
            "manifests are being collected as fast as they are written); retry, or run GC with "
            "a larger min_age",
            definite=True,
        )

    def _write_next(self, target: int, data: bytes, deadline: float) -> bool:
        """Create manifest ``target``; True when our bytes landed, False when someone else's did."""
        key = manifest_key(target)
        try:
            self._store.put_if_absent(key, data)
            return True
        except AlreadyExistsError:
            return False
        except StoreError as exc:
            if exc.definite:
                raise
            lost = exc
        # The create may or may not have landed: read the slot back, writing again while empty.
        attempt = 0
        while True:
            attempt += 1
            empty = False
            try:
                return self._store.get(key) == data
            except NotFoundError:
                empty = True
            except StoreError:
                pass  # cannot tell yet: read again
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"could not learn whether manifest {target} of {self.url} was written; "
                    "open the database again to see its current state",
                    definite=False,
                    key=key,
                ) from lost
            _backoff(attempt, deadline)
            if empty:
                try:
                    self._store.put_if_absent(key, data)
                    return True
                except StoreError:
                    pass  # lost the race, or failed again: the next read tells which

    @staticmethod
    def _check_epoch(current: VersionedManifest, writer_epoch: int | None) -> None:
        if writer_epoch is None:
            return
        stored = current.manifest.writer_epoch
        if stored > writer_epoch:
            raise FencedError(
                f"manifest {current.id} holds writer epoch {stored}, newer than this writer's "
                f"epoch {writer_epoch}: another writer has opened the database. Close this "
                "handle; open the database again if this process should write"
            )
        if stored < writer_epoch:
            raise InkpenError(
                f"manifest {current.id} holds writer epoch {stored}, older than this writer's "
                f"epoch {writer_epoch}; epochs only go up, so this is a bug in inkpen"
            )


def _backoff(attempt: int, deadline: float) -> None:
    """Sleep a jittered, exponentially growing pause, never past ``deadline``."""
    ceiling = min(_BACKOFF_CAP, _BACKOFF_FIRST * (2 ** min(attempt, 16)))
    pause = min(random.uniform(0.0, ceiling), max(0.0, deadline - time.monotonic()))
    if pause > 0:
        time.sleep(pause)
