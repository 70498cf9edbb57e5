"""CPU-heavy file building, run off the interpreter that serves reads and writes.

Merges, L0 builds and journal rolls are pure computation over bytes: decode inputs, merge,
encode outputs. In CPython a thread doing that holds the interpreter lock for most of its run and
starves the actors that serve puts and gets (profiles of a bulk load showed merges taking 60% of
the lock). The clerks that own these jobs therefore keep everything that touches state or the
store on their own threads — choosing the job, reading its inputs, writing its outputs through
file clerks, reporting to the owner — and hand only the computation to :func:`run`, which runs it
in a worker process (option ``compute_workers``; 0 runs it in the calling thread).

The workers are plain child processes running ``python -m inkpen.actors.kernel.compute_worker``,
shared by every Bookie of the process and started on first use. They never import the application's
main module (as multiprocessing's ``spawn`` would), so embedding inkpen needs no ``__main__``
guard. A request is one length-prefixed pickle frame ``(function name, arguments)`` on the
worker's stdin, the answer one frame ``(ok, result or error)`` on its stdout; only the
module-level jobs below can be asked for. A worker that dies is replaced on the next request,
and the job meanwhile runs in the calling thread, so a lost worker costs time, never a result.
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, TypeVar, cast

from inkpen.actors.kernel import heap
from inkpen.formats.journal import JournalEntry, build_journal
from inkpen.formats.keys import TOMBSTONE, LedgerValue
from inkpen.formats.sst import SstBuilder, SstInfo, SstReader, SstShape
from inkpen.logs import get_logger

log = get_logger("inkpen.compute")

T = TypeVar("T")
_FRAME = struct.Struct(">Q")


def _write_frame(stream: IO[bytes], payload: Any) -> None:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> Any:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        raise EOFError("the compute worker closed its pipe")
    (length,) = _FRAME.unpack(head)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("the compute worker closed its pipe mid-answer")
    return pickle.loads(data)


class _Worker:
    """One child process and its two pipes; used by one request at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "inkpen.actors.kernel.compute_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # PYTHONSAFEPATH: a directory named "inkpen" in the current directory (a checkout
            # of inkpen's sources, say) must not shadow the installed package in the worker.
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "PYTHONSAFEPATH": "1",
                **heap.worker_environment(),
            },
        )

    def call(self, name: str, args: tuple[Any, ...]) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        _write_frame(self.process.stdin, (name, args))
        ok, result = _read_frame(self.process.stdout)
        if not ok:
            raise result
        return result

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.poll() is None:
            self.process.kill()


class _Pool:
    """Workers shared by every Bookie of the process; grown on demand up to the size asked for.

    Merges are background work: at most ``workers - 1`` of them (at least one) hold a worker at
    once, so with two or more workers an L0 build or a journal roll — the jobs writers wait
    for when memory fills — never queues behind a merge that runs for seconds.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._started = 0
        self._background = 0
        self._all: list[_Worker] = []

    def run(self, workers: int, name: str, args: tuple[Any, ...]) -> Any:
        background = name in BACKGROUND
        worker = self._take(workers, background)
        try:
            result = worker.call(name, args)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            self._discard(worker, background)
            log.warning("compute.worker_lost", function=name, error=str(exc))
            return JOBS[name](*args)
        except BaseException:
            self._give(worker, background)
            raise
        self._give(worker, background)
        return result

    def _take(self, workers: int, background: bool) -> _Worker:
        with self._cond:
            while True:
                if not background or self._background < max(1, workers - 1):
                    if self._idle:
                        worker = self._idle.pop()
                        break
                    if self._started < workers:
                        worker = _Worker()
                        self._started += 1
                        self._all.append(worker)
                        break
                self._cond.wait()
            if background:
                self._background += 1
            return worker

    def _give(self, worker: _Worker, background: bool) -> None:
        with self._cond:
            if background:
                self._background -= 1
            self._idle.append(worker)
            self._cond.notify_all()

    def _discard(self, worker: _Worker, background: bool) -> None:
        worker.close()
        with self._cond:
            if background:
                self._background -= 1
            if worker in self._all:
                self._started -= 1
                self._all.remove(worker)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            workers, self._all = list(self._all), []
            self._idle = []
            self._started = 0
        for worker in workers:
            worker.close()


_pool = _Pool()
atexit.register(_pool.close)


def run(workers: int, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a compute worker (or here when ``workers`` is 0)."""
    if workers <= 0:
        return function(*args)
    return cast(T, _pool.run(workers, function.__name__, args))


# -- the jobs ---------------------------------------------------------------------------------

SstInput = tuple[str, bytes, int]
"""An input SST for a merge: (name, the whole object, sqn_base)."""


def _reader(item: SstInput) -> SstReader:
    name, data, sqn_base = item
    return SstReader.open(name, len(data), lambda start, end: data[start:end], sqn_base=sqn_base)


def merge_entries(
    sources: Sequence[Iterable[tuple[bytes, LedgerValue]]],
    targets: Iterable[tuple[bytes, LedgerValue]] | None,
    *,
    basement: bool,
    now_ms: int,
) -> Iterator[tuple[bytes, LedgerValue]]:
    """Entry streams merged in key order: the highest SQN of each key, reaped at the basement.

    Tombstones and expired entries are dropped only when ``basement``: above the basement they
    must keep shadowing older entries of their keys.
    """

    def tagged(stream: Iterable[tuple[bytes, LedgerValue]]) -> Iterator[tuple[bytes, int, Any]]:
        for key, value in stream:
            yield key, -value[0], value

    streams = [tagged(s) for s in sources]
    if targets is not None:
        streams.append(tagged(targets))
    previous: bytes | None = None
    for key, _, value in heapq.merge(*streams):
        if key == previous:
            continue
        previous = key
        if basement:
            if value[1] == TOMBSTONE:
                continue
            expiry = value[2]
            if expiry is not None and expiry <= now_ms:
                continue
        yield key, value


def build_ssts(
    entries: Iterable[tuple[bytes, LedgerValue]], shape: SstShape
) -> list[tuple[bytes, SstInfo]]:
    """Entries (key order) as SST files of about ``shape.target_bytes`` each."""
    built: list[tuple[bytes, SstInfo]] = []
    builder: SstBuilder | None = None
    for key, value in entries:
        if builder is None:
            builder = shape.builder()
        builder.add(key, value)
        if builder.estimated_size() >= shape.target_bytes:
            built.append(builder.finish())
            builder = None
    if builder is not None and builder.entry_count:
        built.append(builder.finish())
    return built


def merge_ssts(
    sources: list[SstInput],
    targets: list[SstInput],
    basement: bool,
    now_ms: int,
    shape: SstShape,
) -> list[tuple[bytes, SstInfo]]:
    """A merge job: sources newest first, targets in key order; answers the new files."""

    def chained(items: list[SstInput]) -> Iterator[tuple[bytes, LedgerValue]]:
        for item in items:
            yield from _reader(item).iter_range()

    merged = merge_entries(
        [_reader(s).iter_range() for s in sources],
        chained(targets) if targets else None,
        basement=basement,
        now_ms=now_ms,
    )
    return build_ssts(merged, shape)


_new_tuple = tuple.__new__


def build_l0(
    entries: list[tuple[bytes, tuple[Any, ...]]], shape: SstShape
) -> tuple[bytes, SstInfo]:
    """An L0 file from memory's entries, already in key order with one value per key."""
    builder = shape.builder()
    for key, value in entries:
        builder.add(key, _new_tuple(LedgerValue, tuple(value)))
    return builder.finish()


def encode_journal(entries: list[tuple[Any, ...]], writer_epoch: int) -> bytes:
    """A journal file's bytes from entries in SQN order (as plain tuples)."""
    return build_journal([JournalEntry(*e) for e in entries], writer_epoch=writer_epoch)


JOBS: dict[str, Callable[..., Any]] = {
    "merge_ssts": merge_ssts,
    "build_l0": build_l0,
    "encode_journal": encode_journal,
}
BACKGROUND = frozenset({"merge_ssts"})
"""Jobs that may not take the last free worker (see :class:`_Pool`)."""


def serve() -> None:
    """A worker's loop: answer requests from stdin until it closes."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            name, args = _read_frame(stdin)
        except EOFError:
            return
        try:
            _write_frame(stdout, (True, JOBS[name](*args)))
        except Exception as exc:
            _write_frame(stdout, (False, exc))
