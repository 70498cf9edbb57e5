"""Resharding with Spark: copy a data set, or a plain database, into a new data set of M shards.

::

    report = inkpen.pipeline.reshard(spark, "s3://b/events", "s3://b/events-32", shards=32)

Protocol (the driver runs it; the copy and the verification are Spark jobs of
:mod:`.reshard_tasks`):

1. **Check, writing nothing** (:func:`check_reshard`): M is a shard count (1 to 4096); the
   destination is not the source, nor inside it or around it; the source is a data set or a
   database (not head-only: its objects live in the ledger, under subkeys no data set routes);
   the destination is absent, empty, or a data set of M shards each of which is empty or holds
   this reshard's load (an earlier run's). Anything else is refused with a
   :class:`~inkpen.errors.UsageError` naming it.
2. **Pin** one checkpoint on every source shard, whose id is the reshard's ``load_id``
   (``reshard-`` and a hash of the source's and the destination's locations and M): a rerun
   finds the checkpoints of the run it finishes and reads the same state, for as long as they
   live (``checkpoint_lifetime``, one day by default, renewed at half-life while a run holds
   them). Expired or gone, the rerun pins the latest state instead, and the verification says
   whether the two states differed.
3. **Create** the destination data set (:func:`inkpen.shards.create`; again on a rerun).
4. **Copy**: one Spark task per slice of a source shard (slices planned as a read's partitions
   are, by size); each task reads its objects with their index entries, TTLs and last-modified
   times, routes each to its destination shard with :func:`inkpen.shards.shard_of` and writes
   one load task's files per destination shard. Shards a rerun finds committed get nothing.
5. **Commit** each destination shard with the bulk load's commit (:mod:`.commit`), recording
   ``load_id``: each shard's commit is atomic, and a shard that holds the load commits nothing
   again, so a rerun after any failure commits only the shards still missing.
6. **Verify**, in one more Spark job over the ledgers of both sides at one instant: the counts
   of objects, index entries and value bytes, the tictac tree of the source folded over all its
   shards against the destination's over all of its (trees of disjoint key sets merge by XOR,
   and every key of the destination is checked to sit in the shard it routes to, so its shards
   are disjoint too), and a second tree of the expiries, last-modified times and index entries.
   A difference raises :class:`ReshardMismatchError` naming what differs (and the first keys,
   when the object trees differ).
7. **Release**: the source's checkpoints are deleted once the verification has run. A run that
   fails before that leaves them for its rerun; they expire if there is none.

The source's objects are never changed: the reshard only adds and deletes its checkpoints.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pyspark.sql import SparkSession

import inkpen.shards
from inkpen.checks import check_seconds
from inkpen.errors import InkpenError, NotFoundError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    ensure_checkpoint,
    refresh_checkpoint,
)
from inkpen.manifest.fencing import scan_segments
from inkpen.manifest.model import CHECKPOINT_KIND, KIND_READER, Checkpoint, Manifest
from inkpen.manifest.store import ManifestStore, RootState, require_live
from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.url import backend_of, check_distinct_locations, parse_store_url
from inkpen.reader import open_reader
from inkpen.shards import MAX_SHARDS, is_data_set, read_descriptor, shard_url

from .options import DEFAULT_PARTITION_BYTES, LoadOptions
from .plan import ScanSlice, slice_manifest
from .ranges import OBJECT_TAG
from .reshard_tasks import (
    Copied,
    CopyTask,
    Fold,
    FoldTask,
    Side,
    SideFolds,
    copy_slice,
    fold_slice,
    merge_folds,
    reverse_cover,
)
from .schema import LoadColumns
from .sharded import per_shard
from .sharded_load import ShardCommit, ShardedTarget, commit_shards
from .splits import partition_count, split_ranges
from .target import LoadTarget, prepare_load

log = get_logger("inkpen.pipeline")

DEFAULT_CHECKPOINT_LIFETIME = 86400.0
"""Seconds a reshard's source checkpoints live past their last renewal: a failed run's rerun
within that reads the same state."""
HOLDER = "reshard"
"""The ``holder`` metadata of the checkpoints a reshard pins."""
SHOWN_KEYS = 10
"""Differing keys a :class:`ReshardMismatchError` names, at most."""
_LISTED_SEGMENTS = 4096
"""Differing tictac segments whose keys are looked up to name them; beyond, only counts."""
_COLUMNS = LoadColumns("bucket", "key", "value")


class ReshardMismatchError(InkpenError):
    """The destination of a reshard does not hold what its source does (the verification)."""


@dataclass(frozen=True, slots=True)
class ReshardPlan:
    """What :func:`check_reshard` found: the two sides, and where a rerun resumes."""

    source: str
    dest: str
    shards: int
    load_id: str
    source_urls: tuple[str, ...]
    """The source's databases: every shard of a data set, or the one database."""
    source_is_data_set: bool
    resumed: frozenset[int]
    """Destination shards holding this reshard's load already (an earlier run committed them)."""


@dataclass(frozen=True, slots=True)
class ReshardReport:
    """What a reshard did and what its verification found (both sides agree on every count)."""

    source: str
    dest: str
    source_is_data_set: bool
    source_shards: int
    """1 for a plain database."""
    shards: int
    load_id: str
    objects: int
    index_entries: int
    value_bytes: int
    rows_loaded: int
    """Puts this run committed (an object with index entries of two expiries takes two)."""
    committed: tuple[int, ...]
    """Destination shards this run committed."""
    resumed: tuple[int, ...]
    """Destination shards an earlier run had committed."""
    copy_tasks: int
    seconds: float


# -- step 1: the checks -----------------------------------------------------------------------


def _check_count(shards: object) -> int:
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= MAX_SHARDS:
        raise UsageError(
            f"shards is the new data set's shard count, a whole number from 1 to {MAX_SHARDS}; "
            f"got {shards!r}"
        )
    return shards


def _missing_directory(url: str) -> bool:
    parsed = parse_store_url(url)
    return backend_of(parsed).local and not os.path.isdir(parsed.location)


def load_id_of(source: str, dest: str, shards: int) -> str:
    """The reshard's ``load_id`` (and its source checkpoints' id): the same for every run of
    one reshard, whatever alias of each location it is given."""
    places = [_place(source), _place(dest), str(shards)]
    digest = hashlib.blake2b(repr(places).encode("utf-8"), digest_size=10).hexdigest()
    return f"reshard-{digest}"


def _place(url: str) -> object:
    parsed = parse_store_url(url)
    return backend_of(parsed).place(parsed)


def _source_manifest(url: str, what: str) -> Manifest:
    if _missing_directory(url):
        raise NotFoundError(
            f"no inkpen database or data set at {what}: the directory does not exist"
        )
    store = open_store(url)
    try:
        manifests = ManifestStore(store)
        if manifests.check_root_state() is RootState.EMPTY:
            raise NotFoundError(f"no inkpen database or data set at {what}: the location is empty")
        latest = require_live(manifests.open_database(create_if_missing=False), url)
    finally:
        store.close()
    if latest.manifest.head_only is not None:
        raise UsageError(
            f"{what} is a head-only store ({latest.manifest.head_only}); a data set's shards "
            "are normal databases, so a head-only store cannot be resharded"
        )
    return latest.manifest


def _source(source: str) -> tuple[tuple[str, ...], bool]:
    if is_data_set(source):
        count = read_descriptor(source).shards
        urls = tuple(shard_url(source, i) for i in range(count))
        per_shard(lambda i: _source_manifest(urls[i], f"shard {i} of {source}"), range(count))
        return urls, True
    _source_manifest(source, source)
    return (source,), False


def _holds_nothing(store: ObjectStore, manifest: Manifest) -> bool:
    return (
        manifest.ledger.persisted_sqn == 0
        and not any(True for _ in manifest.ledger.ssts())
        and not manifest.journal.files
        and not scan_segments(store, manifest.journal.last_rolled_segment).refs
    )


def _dest_shard(url: str, load_id: str, shard: int, dest: str) -> bool:
    """Whether the destination's shard holds this reshard's load; refused unless it does or is
    empty."""
    store = open_store(url)
    try:
        manifests = ManifestStore(store)
        latest = manifests.latest()
        if latest is None:
            return False  # an interrupted create left the shard out: create() finishes it
        if latest.manifest.destroyed_at is not None:
            raise UsageError(
                f"shard {shard} of the destination {dest} is a destroyed database; reshard "
                "into an empty location"
            )
        if latest.manifest.load(load_id) is not None:
            return True
        if _holds_nothing(store, latest.manifest):
            return False
    finally:
        store.close()
    raise UsageError(
        f"the destination {dest} is a data set whose shard {shard} holds objects this reshard "
        "did not write; reshard into an empty location (a rerun of a reshard takes the same "
        "source, destination and shard count)"
    )


def _destination(dest: str, shards: int, load_id: str) -> frozenset[int]:
    """The destination's shards that hold this reshard's load (step 1's destination check)."""
    if _missing_directory(dest):
        return frozenset()
    if is_data_set(dest):
        found = read_descriptor(dest).shards
        if found != shards:
            raise UsageError(
                f"the destination {dest} is a data set of {found} shards, not {shards}; "
                "reshard into an empty location"
            )
        held = per_shard(lambda i: _dest_shard(shard_url(dest, i), load_id, i, dest), range(shards))
        return frozenset(i for i, done in enumerate(held) if done)
    store = open_store(dest)
    try:
        state = ManifestStore(store).check_root_state()
    finally:
        store.close()
    if state is RootState.DATABASE:
        raise UsageError(
            f"the destination {dest} holds an inkpen database; reshard into an empty location"
        )
    if state is RootState.FOREIGN:
        raise UsageError(
            f"the destination {dest} holds objects that are not an inkpen data set; reshard "
            "into an empty location"
        )
    return frozenset()


def check_reshard(source: str, dest: str, *, shards: int) -> ReshardPlan:
    """Step 1: every check a reshard makes before it writes anything (module doc)."""
    count = _check_count(shards)
    for name, url in (("source", source), ("dest", dest)):
        if not isinstance(url, str) or not url.strip():
            raise UsageError(f"{name} must be a store URL (a directory, file:// or s3://)")
    check_distinct_locations(source, dest, what="reshard")
    load_id = load_id_of(source, dest, count)
    urls, data_set = _source(source)
    resumed = _destination(dest, count, load_id)
    return ReshardPlan(source, dest, count, load_id, urls, data_set, resumed)


# -- step 2: pins -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pin:
    """A checkpoint a reshard holds on one database."""

    url: str
    checkpoint: Checkpoint
    reused: bool
    """It was pinned by an earlier run of the same reshard."""


class Pins:
    """Checkpoints held together: renewed at half their lifetime by one thread until
    :meth:`close`, which deletes them or leaves them to expire."""

    def __init__(self, pins: Sequence[Pin], lifetime: float) -> None:
        self.pins = tuple(pins)
        self._lifetime = lifetime
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inkpen-reshard-pins", daemon=True)
        self._thread.start()

    def _refresh(self, pin: Pin) -> None:
        store = open_store(pin.url)
        try:
            refresh_checkpoint(ManifestStore(store), pin.checkpoint.id, lifetime=self._lifetime)
        finally:
            store.close()

    def _run(self) -> None:
        wait = self._lifetime / 2
        while not self._stop.wait(wait):
            try:
                per_shard(lambda i: self._refresh(self.pins[i]), range(len(self.pins)))
                wait = self._lifetime / 2
            except InkpenError as exc:
                wait = self._lifetime / 8
                log.warning("pipeline.reshard_refresh_failed", error=str(exc), retry_in=wait)

    def close(self, *, delete: bool) -> None:
        """Stop renewing; delete the checkpoints when ``delete``, else leave them to expire."""
        self._stop.set()
        self._thread.join()
        if delete:
            per_shard(lambda i: _delete(self.pins[i]), range(len(self.pins)))


def _delete(pin: Pin) -> None:
    store = open_store(pin.url)
    try:
        with contextlib.suppress(NotFoundError):
            delete_checkpoint(ManifestStore(store), pin.checkpoint.id)
    except InkpenError as exc:  # best effort: it expires anyway
        log.warning("pipeline.reshard_release_failed", url=pin.url, error=str(exc))
    finally:
        store.close()


def _metadata(plan: ReshardPlan) -> dict[str, str]:
    return {CHECKPOINT_KIND: KIND_READER, "holder": HOLDER, "dest": plan.dest}


def _pin_source(url: str, plan: ReshardPlan, lifetime: float) -> Pin:
    """The run's checkpoint on one source database: the earlier run's if it still lives."""
    store = open_store(url)
    try:
        manifests = ManifestStore(store)
        latest = manifests.latest()
        found = None if latest is None else latest.manifest.checkpoint(plan.load_id)
        if found is not None:
            try:
                kept = refresh_checkpoint(manifests, plan.load_id, lifetime=lifetime)
                return Pin(url, kept, reused=True)
            except (UsageError, NotFoundError):  # expired (or dropped) meanwhile: pin anew
                with contextlib.suppress(NotFoundError):
                    delete_checkpoint(manifests, plan.load_id)
        made = ensure_checkpoint(
            manifests, plan.load_id, lifetime=lifetime, metadata=_metadata(plan)
        )
        return Pin(url, made, reused=False)
    finally:
        store.close()


def pin_sources(plan: ReshardPlan, lifetime: float) -> Pins:
    """Step 2: one checkpoint per source database, held until :meth:`Pins.close`."""
    pins = per_shard(
        lambda i: _pin_source(plan.source_urls[i], plan, lifetime), range(len(plan.source_urls))
    )
    log.info(
        "pipeline.reshard_pinned",
        source=plan.source,
        checkpoints=len(pins),
        reused=sum(1 for p in pins if p.reused),
        checkpoint=plan.load_id,
    )
    return Pins(pins, lifetime)


def _pin_dest(url: str, plan: ReshardPlan, lifetime: float) -> Pin:
    store = open_store(url)
    try:
        made = create_checkpoint(ManifestStore(store), lifetime=lifetime, metadata=_metadata(plan))
        return Pin(url, made, reused=False)
    finally:
        store.close()


# -- steps 3 to 5: create, copy, commit ------------------------------------------------------


def create_destination(plan: ReshardPlan) -> tuple[LoadTarget, ...]:
    """Step 3: the destination data set (made, or found from an earlier run), its shards ready
    to load into."""
    inkpen.shards.create(plan.dest, shards=plan.shards)
    return tuple(
        per_shard(
            lambda i: prepare_load(LoadOptions(url=shard_url(plan.dest, i)), _COLUMNS),
            range(plan.shards),
        )
    )


def _slices(pin: Pin, *, values: bool, partition_bytes: int) -> list[ScanSlice]:
    """One database's slices at its pinned manifest: its OBJECT keys cut by size, each slice's
    manifest cut down to its object SSTs and the SSTs of those objects' index entries."""
    store = open_store(pin.url)
    try:
        manifest = ManifestStore(store).read(pin.checkpoint.manifest_id)
    finally:
        store.close()
    ranges = [(OBJECT_TAG, bytes([OBJECT_TAG[0] + 1]))]
    ssts = list(manifest.ledger.ssts())
    count = partition_count(
        ranges,
        ssts,
        journal_bytes=sum(f.size for f in manifest.journal.files),
        partition_bytes=partition_bytes,
        values=values,
    )
    return [
        ScanSlice(
            index,
            group,
            slice_manifest(manifest, (*group, reverse_cover(group)), values=values, indexes=False),
            pin.checkpoint.manifest_id,
        )
        for index, group in enumerate(split_ranges(ranges, ssts, count))
        if group
    ]


def copy(
    spark: SparkSession,
    plan: ReshardPlan,
    pins: Pins,
    targets: tuple[LoadTarget, ...],
    *,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
) -> list[Copied]:
    """Step 4: one Spark task per source slice; what each wrote, in task order."""
    if len(plan.resumed) == plan.shards:
        return []  # every destination shard holds the load: nothing to write
    started = time.monotonic()
    now_ms = int(time.time() * 1000)
    planned = per_shard(
        lambda i: _slices(pins.pins[i], values=True, partition_bytes=partition_bytes),
        range(len(pins.pins)),
    )
    tasks = [
        CopyTask(
            0,
            shard,
            pins.pins[shard].url,
            pins.pins[shard].checkpoint.id,
            s,
            now_ms,
            targets,
            plan.resumed,
        )
        for shard, slices in enumerate(planned)
        for s in slices
    ]
    tasks = [replace(task, index=index) for index, task in enumerate(tasks)]
    copied: list[Copied] = (
        spark.sparkContext.parallelize(tasks, len(tasks)).map(copy_slice).collect()
    )
    copied.sort(key=lambda c: c.index)
    log.info(
        "pipeline.reshard_copied",
        source=plan.source,
        dest=plan.dest,
        tasks=len(tasks),
        objects=sum(c.objects for c in copied),
        rows=sum(p.rows for c in copied for p in c.parts.values()),
        ms=round((time.monotonic() - started) * 1000, 1),
    )
    return copied


def commit(
    plan: ReshardPlan, targets: tuple[LoadTarget, ...], copied: Sequence[Copied]
) -> list[ShardCommit]:
    """Step 5: each destination shard's commit, recording the reshard's ``load_id``."""
    target = ShardedTarget(plan.dest, plan.shards, targets, plan.load_id)
    try:
        return commit_shards(target, [c.parts for c in copied])
    except InkpenError as exc:
        raise InkpenError(
            f"{exc}. A reshard's rerun (the same source, destination and shard count) does "
            "that: it commits only the shards still missing"
        ) from exc


# -- step 6: verify ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verification:
    """Both sides' folds at one instant."""

    source: Fold
    dest: Fold
    now_ms: int


def verify(
    spark: SparkSession,
    plan: ReshardPlan,
    source_pins: Pins,
    lifetime: float,
    *,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
) -> Verification:
    """Step 6: fold both sides at one instant (the source at its pins, the destination at
    checkpoints of its own) and raise :class:`ReshardMismatchError` if they differ."""
    started = time.monotonic()
    dest_pins = Pins(
        per_shard(lambda i: _pin_dest(shard_url(plan.dest, i), plan, lifetime), range(plan.shards)),
        lifetime,
    )
    try:
        now_ms = int(time.time() * 1000)
        tasks = [
            *_fold_tasks("source", source_pins, None, now_ms, partition_bytes),
            *_fold_tasks("dest", dest_pins, plan.shards, now_ms, partition_bytes),
        ]
        folds: SideFolds = (
            spark.sparkContext.parallelize(tasks, len(tasks))
            .map(fold_slice)
            .treeReduce(merge_folds)
        )
        found = Verification(folds.source, folds.dest, now_ms)
        problems = _differences(plan, found, source_pins, dest_pins)
    finally:
        dest_pins.close(delete=True)
    if problems:
        log.error(
            "pipeline.reshard_mismatch", source=plan.source, dest=plan.dest, problems=problems
        )
        raise ReshardMismatchError(
            f"the reshard of {plan.source} into {plan.dest} did not verify: "
            + "; ".join(problems)
            + ". Nothing in the source changed; destroy the destination and reshard again"
        )
    log.info(
        "pipeline.reshard_verified",
        source=plan.source,
        dest=plan.dest,
        objects=found.source.objects,
        index_entries=found.source.index_entries,
        value_bytes=found.source.value_bytes,
        ms=round((time.monotonic() - started) * 1000, 1),
    )
    return found


def _fold_tasks(
    side: Side, pins: Pins, route: int | None, now_ms: int, partition_bytes: int
) -> list[FoldTask]:
    planned = per_shard(
        lambda i: _slices(pins.pins[i], values=False, partition_bytes=partition_bytes),
        range(len(pins.pins)),
    )
    return [
        FoldTask(
            side, shard, pins.pins[shard].url, pins.pins[shard].checkpoint.id, s, now_ms, route
        )
        for shard, slices in enumerate(planned)
        for s in slices
    ]


def _differences(
    plan: ReshardPlan, found: Verification, source_pins: Pins, dest_pins: Pins
) -> list[str]:
    a, b = found.source, found.dest
    problems: list[str] = []
    if b.misrouted:
        assert b.first_misrouted is not None
        shard, bucket, key = b.first_misrouted
        problems.append(
            f"{b.misrouted} object(s) of the destination sit in a shard they do not route to "
            f"(first: bucket {bucket!r} key {key!r} in shard {shard})"
        )
    for what, x, y in (
        ("objects", a.objects, b.objects),
        ("index entries", a.index_entries, b.index_entries),
        ("value bytes", a.value_bytes, b.value_bytes),
    ):
        if x != y:
            problems.append(f"the source holds {x:,} {what} and the destination {y:,}")
    segments = a.tree.compare(b.tree)
    if segments:
        problems.append(
            f"{len(segments)} tictac segment(s) differ"
            + _first_keys(segments, source_pins, dest_pins)
        )
    elif a.details != b.details:
        problems.append(
            "every object and value is the same, but some expiry, last-modified time or index "
            "entry differs"
        )
    return problems


def _heads(pins: Pins, segments: list[int]) -> dict[tuple[bytes, bytes], tuple[int, int]]:
    found: dict[tuple[bytes, bytes], tuple[int, int]] = {}

    def fold(index: int) -> None:
        pin = pins.pins[index]
        with open_reader(pin.url, checkpoint=pin.checkpoint.id) as reader:
            for bucket, key, head in reader.heads(segments=segments):
                found[(bucket, key)] = (head.content_hash, head.size)

    per_shard(fold, range(len(pins.pins)))
    return found


def _first_keys(segments: list[int], source_pins: Pins, dest_pins: Pins) -> str:
    """``: <the first differing keys>`` for a mismatch's message (empty with too many)."""
    if len(segments) > _LISTED_SEGMENTS:
        return ""
    a, b = _heads(source_pins, segments), _heads(dest_pins, segments)
    shown = []
    for where in sorted(a.keys() | b.keys()):
        if where not in b:
            kind = "only in the source"
        elif where not in a:
            kind = "only in the destination"
        elif a[where] != b[where]:
            kind = "different"
        else:
            continue
        shown.append(f"{kind}: bucket {where[0]!r} key {where[1]!r}")
        if len(shown) == SHOWN_KEYS:
            break
    return f" ({', '.join(shown)})" if shown else ""


# -- the whole ---------------------------------------------------------------------------------


def reshard(
    spark: SparkSession,
    source: str,
    dest: str,
    *,
    shards: int,
    checkpoint_lifetime: float = DEFAULT_CHECKPOINT_LIFETIME,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
    phase: Callable[[str], object] = lambda _: None,
) -> ReshardReport:
    """Copy the data set or database at ``source`` into a new data set of ``shards`` shards at
    ``dest``, at one checkpoint of each source shard, commit each destination shard atomically
    and verify the copy before returning (module doc). Run it again after a failure, with the
    same arguments: it commits only what the failed run did not.

    Carried: every live object's value, its index entries, its TTL (the same expiry instant)
    and its last-modified time. Not carried: SQNs, overwritten versions, deletes, objects
    expired before the copy. ``phase`` is told each step as it starts.
    """
    started = time.monotonic()
    lifetime = check_seconds("checkpoint_lifetime", checkpoint_lifetime, minimum=60)
    phase("checking the source and the destination")
    plan = check_reshard(source, dest, shards=shards)
    log.info(
        "pipeline.reshard_started",
        source=plan.source,
        dest=plan.dest,
        shards=plan.shards,
        source_shards=len(plan.source_urls),
        load_id=plan.load_id,
        resumed=sorted(plan.resumed),
    )
    phase("pinning the source")
    pins = pin_sources(plan, lifetime)
    # A failed run keeps its pins for its rerun once a destination shard may hold the load;
    # before that, a rerun may as well read the latest state.
    keep = bool(plan.resumed)
    try:
        phase("creating the destination")
        targets = create_destination(plan)
        phase("copying")
        copied = copy(spark, plan, pins, targets, partition_bytes=partition_bytes)
        phase("committing")
        keep = True
        commits = commit(plan, targets, copied) if copied else []
        phase("verifying")
        keep = False  # from here on, nothing is left to finish: a mismatch needs a new start
        found = verify(spark, plan, pins, lifetime, partition_bytes=partition_bytes)
    except BaseException as exc:
        log.warning(
            "pipeline.reshard_failed",
            source=plan.source,
            dest=plan.dest,
            load_id=plan.load_id,
            error=str(exc),
            checkpoints_kept=keep,
        )
        pins.close(delete=not keep)
        raise
    pins.close(delete=True)
    done = [c for c in commits if c.report is not None]
    report = ReshardReport(
        source=plan.source,
        dest=plan.dest,
        source_is_data_set=plan.source_is_data_set,
        source_shards=len(plan.source_urls),
        shards=plan.shards,
        load_id=plan.load_id,
        objects=found.source.objects,
        index_entries=found.source.index_entries,
        value_bytes=found.source.value_bytes,
        rows_loaded=sum(c.report.rows for c in done if c.report is not None),
        committed=tuple(c.shard for c in done),
        resumed=tuple(sorted(plan.resumed)),
        copy_tasks=len(copied),
        seconds=round(time.monotonic() - started, 3),
    )
    log.info(
        "pipeline.reshard_finished",
        source=plan.source,
        dest=plan.dest,
        shards=plan.shards,
        objects=report.objects,
        committed=list(report.committed),
        resumed=list(report.resumed),
        seconds=report.seconds,
    )
    return report
