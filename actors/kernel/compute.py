"""CPU-heavy file building, run off the interpreter that serves reads and writes.

Merges, L0 builds and journal rolls are pure computation over bytes: decode inputs, merge,
encode outputs. In CPython a thread doing that holds the interpreter lock for most of its run and
starves the actors that serve puts and gets (profiles of a bulk load showed merges taking 60% of
the lock). The clerks that own these jobs therefore keep everything that touches state or the
store on their own threads — choosing the job, reading its inputs, writing its outputs through
file clerks, reporting to the owner — and hand only the computation to :func:`run`, which runs it
in a worker process (option ``compute_workers``; 0 runs it in the calling thread).

A merge is not handed its inputs whole, nor does it answer its outputs as a list: it runs
through :func:`merge` with a :class:`MergeHost` of the caller's, which the job asks for each input
range it reads (in runs of :data:`READ_CHUNK` bytes, a file at a time for the targets) and hands
each output file to as soon as it is built, to be stored before the next one is built. An input
that is a file of a local directory store is read by the job itself, the same runs with
``os.pread`` (the caller names its path: :data:`SstSource`), so that its runs cost the caller no
round trip, which waits for the caller's interpreter lock; a run that cannot be read so is asked
of the host after all. So neither process holds a merge's inputs or outputs at once: the caller
holds one read run or one output file at a time, the worker one read run per input it is merging
from and the file it is building. (Before, the writer held a merge's inputs, the request frame
that carried them, the answer frame and the outputs together: its RSS rose by 90 MB as a 53 MB
merge began during a 5,000,000-object load.)

The workers are plain child processes running ``python -m inkpen.actors.kernel.compute_worker``,
shared by every Bookie of the process and started on first use. They never import the application's
main module (as multiprocessing's ``spawn`` would), so embedding inkpen needs no ``__main__``
guard. Messages are pickle frames on the worker's stdin and stdout, whose large bytes objects
(from :data:`OUT_OF_BAND` bytes) travel beside the frame, out of band, and arrive as the
receiver's objects with no copy: a request ``("job", name, args)``; the worker's questions to the
caller's host ``("call", name, args)``, each answered ``("reply", ok, value)``; and the answer
``("done", ok, result or error)``. The pipes are widened to :data:`PIPE_BYTES` where Linux
allows it, so a megabyte crosses in one read rather than sixteen, each of which waits for the
caller's interpreter lock. Only the module-level jobs below can be asked for, and only
the host calls :data:`HOST_CALLS`. A worker that dies is replaced on the next request, and the job
meanwhile runs in the calling thread (a merge's host first drops what the lost worker's run had
stored: :meth:`MergeHost.restart`), so a lost worker costs time, never a result.
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
from typing import IO, Any, Protocol, TypeVar, cast

from inkpen.actors.kernel import heap
from inkpen.formats.journal import JournalEntry, build_journal
from inkpen.formats.keys import TOMBSTONE, LedgerValue
from inkpen.formats.sst import SstBuilder, SstInfo, SstReader, SstShape
from inkpen.logs import get_logger

log = get_logger("inkpen.compute")

T = TypeVar("T")
_HEAD = struct.Struct(">QI")
"""A message's frame: the pickle's length, then how many out-of-band buffers follow it."""
_FRAME = struct.Struct(">Q")
"""Before each out-of-band buffer: its length."""
OUT_OF_BAND = 64 * 1024
"""Bytes objects of at least this size in a message travel out of band (no pickle copy)."""
READ_CHUNK = 1024 * 1024
"""Bytes a merge asks its host for at once, for each input it reads (a file's data blocks are
read in order, so one run serves the blocks that follow)."""
PIPE_BYTES = 1024 * 1024
"""The capacity asked for the workers' pipes (Linux's ``F_SETPIPE_SZ``; 64 KiB otherwise)."""
_F_SETPIPE_SZ = 1031


def _out_of_band(value: Any, depth: int) -> Any:
    """``value`` with its large bytes objects, down to ``depth`` levels of tuples and lists,
    wrapped to be pickled out of band (the receiver gets them back as bytes)."""
    if type(value) is bytes:
        return pickle.PickleBuffer(value) if len(value) >= OUT_OF_BAND else value
    if depth > 0 and type(value) in (tuple, list):
        return type(value)(_out_of_band(item, depth - 1) for item in value)
    return value


def _send(stream: IO[bytes], message: Any, *, depth: int = 3) -> None:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(_out_of_band(message, depth), protocol=5, buffer_callback=buffers.append)
    stream.write(_HEAD.pack(len(data), len(buffers)))
    stream.write(data)
    for buffer in buffers:
        raw = buffer.raw()
        stream.write(_FRAME.pack(raw.nbytes))
        stream.write(raw)
    stream.flush()


def _read_exact(stream: IO[bytes], length: int) -> bytes:
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("the compute worker's pipe closed mid-message")
    return data


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_HEAD.size)
    if not head:
        raise EOFError("the compute worker closed its pipe")
    if len(head) < _HEAD.size:
        raise EOFError("the compute worker's pipe closed mid-message")
    length, count = _HEAD.unpack(head)
    data = _read_exact(stream, length)
    buffers = [
        _read_exact(stream, _FRAME.unpack(_read_exact(stream, _FRAME.size))[0])
        for _ in range(count)
    ]
    return pickle.loads(data, buffers=buffers)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(exc, protocol=5))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _widen(pipe: IO[bytes] | None) -> None:
    """Ask for a pipe of :data:`PIPE_BYTES` (Linux); elsewhere, or if refused, it stays as it is."""
    if pipe is None or not sys.platform.startswith("linux"):
        return
    import fcntl

    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)


class MergeHost(Protocol):
    """The caller's side of a :func:`merge`: it reads the inputs and stores the outputs.

    Its calls come from the thread that called :func:`merge`, one at a time, whether the job runs
    in a worker or in that thread.
    """

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of input ``name`` (of ``root``; None: this database's own)."""
        ...

    def emit(self, data: bytes, info: SstInfo) -> None:
        """Store the next output file, built as ``data`` (outputs come in key order)."""
        ...

    def restart(self) -> None:
        """The worker running the job was lost: forget (and drop) every output emitted so far;
        the whole job runs again, in the caller's thread."""
        ...


HOST_CALLS = frozenset({"read", "emit"})
"""The :class:`MergeHost` methods a worker may call."""


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
        for pipe in (self.process.stdin, self.process.stdout):
            _widen(pipe)

    def call(self, name: str, args: tuple[Any, ...], host: MergeHost | None = None) -> Any:
        """Run job ``name`` here; answers its result or raises its error. Raises EOFError,
        OSError or an unpickling error when the worker is lost (then it must be discarded)."""
        ok, result = self.converse(name, args, host)
        if not ok:
            raise result
        return result

    def converse(
        self, name: str, args: tuple[Any, ...], host: MergeHost | None
    ) -> tuple[bool, Any]:
        """Send the job, answer its host calls, and return ``(ok, result or error)``. A host
        call's own exception is the job's error when the job fails (the worker raised a copy)."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        _send(stdin, ("job", name, args), depth=1)
        failure: Exception | None = None
        while True:
            message = _receive(stdout)
            if message[0] == "done":
                _, ok, result = message
                return ok, (failure if not ok and failure is not None else result)
            _, call, call_args = message
            try:
                if host is None or call not in HOST_CALLS:
                    raise RuntimeError(f"compute job {name} made a call the caller does not take")
                value = getattr(host, call)(*call_args)
            except Exception as exc:
                failure = failure or exc
                _send(stdin, ("reply", False, _portable(exc)))
            else:
                _send(stdin, ("reply", True, value))

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

    def run(
        self, workers: int, name: str, args: tuple[Any, ...], host: MergeHost | None = None
    ) -> Any:
        background = name in BACKGROUND
        worker = self._take(workers, background)
        try:
            ok, result = worker.converse(name, args, host)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            self._discard(worker, background)
            log.warning("compute.worker_lost", function=name, error=str(exc))
            if host is None:
                return JOBS[name](*args)
            host.restart()
            return JOBS[name](*args, host)
        except BaseException:
            self._discard(worker, background)  # mid-conversation: its pipes are out of step
            raise
        self._give(worker, background)
        if not ok:
            raise result
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


def merge(
    workers: int,
    sources: Sequence[SstSource],
    targets: Sequence[SstSource],
    *,
    basement: bool,
    now_ms: int,
    shape: SstShape,
    host: MergeHost,
    read_chunk: int = READ_CHUNK,
) -> int:
    """A merge job (sources newest first, targets in key order) in a compute worker (or here
    when ``workers`` is 0): its inputs are read through ``host.read`` in runs of ``read_chunk``
    bytes, and each output file is handed to ``host.emit`` as soon as it is built. Answers the
    number of files emitted."""
    args = (list(sources), list(targets), basement, now_ms, shape, read_chunk)
    if workers <= 0:
        return merge_files(*args, host)
    return cast(int, _pool.run(workers, "merge_files", args, host))


# -- the jobs ---------------------------------------------------------------------------------

SstInput = tuple[str, bytes, int]
"""An input SST held whole, for :func:`merge_ssts`: (name, the whole object, sqn_base)."""

SstSource = tuple[str, str | None, int, int, str | None]
"""An input SST of :func:`merge`: (name, root, size, sqn_base, path). ``root`` is the
descriptor's (None: this database's own files); ``path`` the local file that holds it, which the
job reads itself, or None: read through the host."""


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


def iter_ssts(
    entries: Iterable[tuple[bytes, LedgerValue]], shape: SstShape
) -> Iterator[tuple[bytes, SstInfo]]:
    """Entries (key order) as SST files of about ``shape.target_bytes`` each, each file given
    as soon as it is built."""
    builder: SstBuilder | None = None
    for key, value in entries:
        if builder is None:
            builder = shape.builder()
        builder.add(key, value)
        if builder.estimated_size() >= shape.target_bytes:
            yield builder.finish()
            builder = None
    if builder is not None and builder.entry_count:
        yield builder.finish()


def build_ssts(
    entries: Iterable[tuple[bytes, LedgerValue]], shape: SstShape
) -> list[tuple[bytes, SstInfo]]:
    """Entries (key order) as SST files of about ``shape.target_bytes`` each."""
    return list(iter_ssts(entries, shape))


def merge_ssts(
    sources: list[SstInput],
    targets: list[SstInput],
    basement: bool,
    now_ms: int,
    shape: SstShape,
) -> list[tuple[bytes, SstInfo]]:
    """A merge of inputs held whole (sources newest first, targets in key order); answers the
    new files. The engine merges through :func:`merge` (:func:`merge_files`), which gives the
    same files without holding inputs or outputs whole."""

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


class _ChunkedInput:
    """One merge input read in runs of ``chunk`` bytes, from its local file when it has one, else
    through the host: a reader reads its data blocks in order, so the run in hand serves the
    blocks after the first; only the latest run is kept."""

    __slots__ = (
        "_at",
        "_chunk",
        "_data",
        "_fd",
        "_host",
        "name",
        "path",
        "root",
        "size",
        "sqn_base",
    )

    def __init__(
        self, host: MergeHost, source: SstSource, chunk: int, files: list[_ChunkedInput]
    ) -> None:
        self._host = host
        self.name, self.root, self.size, self.sqn_base, self.path = source
        self._chunk = chunk
        self._at = 0
        self._data = b""
        self._fd: int | None = None
        files.append(self)

    def fetch(self, start: int, end: int) -> bytes:
        at, data = self._at, self._data
        if at <= start and end <= at + len(data):
            if start == at and end == at + len(data):
                return data
            return data[start - at : end - at]
        data = self._run(start, min(self.size, max(end, start + self._chunk)))
        self._at, self._data = start, data
        return data[: end - start] if len(data) > end - start else data

    def _run(self, start: int, end: int) -> bytes:
        if self.path is not None:
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDONLY)
                data = os.pread(self._fd, end - start, start)
            except OSError:
                self.close()
                self.path = None  # the host says what is wrong (a missing file, say)
            else:
                if len(data) == end - start:
                    return data
                self.close()
                self.path = None  # shorter than asked: let the host's read decide
        return self._host.read(self.name, self.root, start, end)

    def close(self) -> None:
        """Close the local file, if open, and drop the run in hand."""
        self._data = b""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def reader(self) -> SstReader:
        return SstReader.open(self.name, self.size, self.fetch, sqn_base=self.sqn_base)


def merge_files(
    sources: list[SstSource],
    targets: list[SstSource],
    basement: bool,
    now_ms: int,
    shape: SstShape,
    read_chunk: int,
    host: MergeHost,
) -> int:
    """The merge job of :func:`merge` (sources newest first, targets in key order): inputs read
    in runs of ``read_chunk`` bytes, from their local files or through ``host`` (every source at
    once, the targets one after another), each output handed to ``host.emit`` once built;
    answers how many. The files are those :func:`merge_ssts` builds from the same inputs held
    whole."""
    files: list[_ChunkedInput] = []

    def chained(items: list[SstSource]) -> Iterator[tuple[bytes, LedgerValue]]:
        for item in items:
            file = _ChunkedInput(host, item, read_chunk, files)
            yield from file.reader().iter_range()
            file.close()

    try:
        merged = merge_entries(
            [_ChunkedInput(host, s, read_chunk, files).reader().iter_range() for s in sources],
            chained(targets) if targets else None,
            basement=basement,
            now_ms=now_ms,
        )
        emitted = 0
        for data, info in iter_ssts(merged, shape):
            host.emit(data, info)
            emitted += 1
        return emitted
    finally:
        for file in files:
            file.close()


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
    "merge_files": merge_files,
    "merge_ssts": merge_ssts,
    "build_l0": build_l0,
    "encode_journal": encode_journal,
}
HOSTED = frozenset({"merge_files"})
"""Jobs that take the caller's :class:`MergeHost` as their last argument."""
BACKGROUND = frozenset({"merge_files", "merge_ssts"})
"""Jobs that may not take the last free worker (see :class:`_Pool`)."""


class _PipeHost:
    """A worker's stand-in for the caller's :class:`MergeHost`: each call is a message up the
    worker's stdout, answered on its stdin."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self._stdin = stdin
        self._stdout = stdout

    def _call(self, name: str, args: tuple[Any, ...]) -> Any:
        _send(self._stdout, ("call", name, args))
        kind, ok, value = _receive(self._stdin)
        if kind != "reply":
            raise RuntimeError(f"the compute worker expected a reply to {name}, got {kind}")
        if not ok:
            raise value
        return value

    def read(self, name: str, root: str | None, start: int, end: int) -> bytes:
        data: bytes = self._call("read", (name, root, start, end))
        return data

    def emit(self, data: bytes, info: SstInfo) -> None:
        self._call("emit", (data, info))

    def restart(self) -> None:  # only the caller restarts a job
        raise RuntimeError("a compute worker cannot restart its caller's job")


def serve() -> None:
    """A worker's loop: answer requests from stdin until it closes."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    host = _PipeHost(stdin, stdout)
    while True:
        try:
            kind, name, args = _receive(stdin)
        except EOFError:
            return
        try:
            if kind != "job":
                raise RuntimeError(f"the compute worker expected a job, got {kind}")
            job = JOBS[name]
            result = job(*args, host) if name in HOSTED else job(*args)
        except Exception as exc:
            _send(stdout, ("done", False, _portable(exc)))
        else:
            _send(stdout, ("done", True, result))
