"""A single-threaded writer for crash torture, and the plan of writes it follows.

Run as ``python torture_writer.py URL SEED PHASE BACKUP_URL [STEP AT WHEN]``. The writer opens
the database with tiny file sizes and carries out :func:`operations` ``(SEED)`` in order: puts
(with index specs) and deletes over a small key space, so overwrites, deletes and index churn
collide. After each write returns it prints ``ack N`` (N = writes acknowledged so far). Every
few writes it runs one maintenance step chosen by ``PHASE``:

===========  ===================================================================================
``flush``    ``book.flush()``: memory to an L0 file
``merge``    ``book.compact_ledger()``: merges until the levels are within their targets
``compact``  ``book.compact_journal()``
``backup``   ``book.hot_backup()(BACKUP_URL)``
``gc``       ``book.run_gc(min_age=0)``
``mixed``    each of the above in turn
===========  ===================================================================================

around which it prints ``phase NAME N start`` and ``phase NAME N done``. Because the plan is a
pure function of the seed, the test recomputes exactly which write was in flight when it died.

With ``STEP AT WHEN`` the writer kills itself with SIGKILL: once its STEP-th maintenance step has
started (STEP 0: from the start, so inside the open and its recovery), at the AT-th object-store
write (put, delete or copy, from any of its threads, to the
database or to the backup) that follows, ``before`` it reaches the store or ``after`` the store
has done it. A store write is where a crash changes what is stored, so every such point of a
flush, merge, compaction, backup or GC can be hit exactly.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from inkpen.objectstore import ObjectStore, open_store
from inkpen.objectstore.base import DeleteResult
from inkpen.objectstore.counting import CountingStore

_T = TypeVar("_T")
PHASES = ("flush", "merge", "compact", "backup", "gc")
BUCKET = "t"
INDEX_FIELD = "i_bin"
TERMS = ("t0", "t1", "t2", "t3", "t4")
HOT_KEYS = 24


@dataclass(frozen=True, slots=True)
class Operation:
    """One planned write: ``value`` None is a delete."""

    key: str
    value: bytes | None
    indexes: tuple[tuple[str, str, str], ...]


def operations(seed: int) -> Iterator[Operation]:
    """The endless, deterministic plan of writes of ``seed``."""
    rng = random.Random(seed)
    n = 0
    while True:
        n += 1
        roll = rng.random()
        specs = tuple(
            (rng.choice(("add", "add", "remove")), INDEX_FIELD, rng.choice(TERMS))
            for _ in range(rng.randrange(3))
        )
        if roll < 0.1:
            yield Operation(f"s{seed}-u{n}", value_of(seed, n, rng.randrange(4) * 150), specs)
        elif roll < 0.3:
            removals = tuple(s for s in specs if s[0] == "remove")
            yield Operation(f"k{rng.randrange(HOT_KEYS)}", None, removals)
        else:
            key = f"k{rng.randrange(HOT_KEYS)}"
            yield Operation(key, value_of(seed, n, rng.choice((0, 10, 300, 2000))), specs)


def value_of(seed: int, n: int, padding: int) -> bytes:
    """The value of the ``n``-th write of ``seed``: names its write, so none is ever confused."""
    return b"s%d-w%d:" % (seed, n) + b"p" * padding


def phase_schedule(seed: int, phase: str) -> Iterator[tuple[int, str]]:
    """(writes before the step, step name) pairs: when the writer runs which step."""
    rng = random.Random(seed * 7919 + 1)
    done = 0
    turn = 0
    while True:
        done += rng.randrange(4, 30)
        name = PHASES[turn % len(PHASES)] if phase == "mixed" else phase
        turn += 1
        yield done, name


class Trigger:
    """Counts store writes once armed and kills this process at the chosen one."""

    def __init__(self, at: int, after: bool) -> None:
        self.at = at
        self.after = after
        self.armed = False
        self._seen = 0
        self._lock = threading.Lock()

    def reached(self) -> bool:
        with self._lock:
            if not self.armed:
                return False
            self._seen += 1
            return self._seen == self.at


class KillSwitch(CountingStore):
    """A store that dies with its process at the trigger's write: every call that writes
    (``put``, ``put_if_absent``, ``delete``, ``delete_many``, ``copy``) is counted here, whatever
    the counting store under it does."""

    def __init__(self, inner: ObjectStore, trigger: Trigger) -> None:
        super().__init__(inner)
        self.trigger = trigger

    def _write(self, operation: Callable[[], _T]) -> _T:
        hit = self.trigger.reached()
        if hit and not self.trigger.after:
            os.kill(os.getpid(), signal.SIGKILL)
        result = operation()
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        self._write(lambda: super(KillSwitch, self).put(key, data, metadata=metadata))

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._write(lambda: super(KillSwitch, self).put_if_absent(key, data, metadata=metadata))

    def delete(self, key: str) -> None:
        self._write(lambda: super(KillSwitch, self).delete(key))

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        return self._write(lambda: super(KillSwitch, self).delete_many(keys))

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        self._write(lambda: super(KillSwitch, self).copy(src_key, dest_key, source=source))


def main() -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks if stuck
    url, seed, phase, backup_url = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    kill_step = int(sys.argv[5]) if len(sys.argv) > 5 else None
    trigger = Trigger(int(sys.argv[6]), sys.argv[7] == "after") if kill_step is not None else None
    if trigger is not None and kill_step == 0:
        trigger.armed = True
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import inkpen
    from support.engine import TINY

    def wrapped(target: str) -> Any:
        store = open_store(target)
        return store if trigger is None else KillSwitch(store, trigger)

    book = inkpen.open(wrapped(url), **TINY)
    print("ready", flush=True)
    schedule = phase_schedule(seed, phase)
    next_step, name = next(schedule)
    acked = 0
    steps = 0
    for op in operations(seed):
        if op.value is None:
            book.delete(BUCKET, op.key, indexes=op.indexes)
        else:
            book.put(BUCKET, op.key, op.value, indexes=op.indexes)
        acked += 1
        print(f"ack {acked}", flush=True)
        if acked < next_step:
            continue
        print(f"phase {name} {acked} start", flush=True)
        steps += 1
        if trigger is not None and steps == kill_step:
            trigger.armed = True
        if name == "flush":
            book.flush()
        elif name == "merge":
            book.compact_ledger()
        elif name == "compact":
            book.compact_journal()
        elif name == "backup":
            book.hot_backup()(wrapped(backup_url))
        elif name == "gc":
            book.run_gc(min_age=0.0)
        print(f"phase {name} {acked} done", flush=True)
        next_step, name = next(schedule)


if __name__ == "__main__":
    main()
