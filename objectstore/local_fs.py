"""The filesystem steps a local directory store builds its guarantees from.

Durable directory creation (a new directory's entry is fsynced in its parent before any object
inside it is acknowledged), fsync of directories, and what each ``errno`` means for the caller.
"""

from __future__ import annotations

import errno
import os
import threading

from inkpen.errors import InkpenError, NotFoundError, StoreError, UsageError

_HINTS = {
    errno.ENOSPC: "the disk is full; free space and retry",
    errno.EDQUOT: "the disk quota is exhausted; free space and retry",
    errno.EACCES: "permission denied; check the directory's owner and mode",
    errno.EPERM: "operation not permitted; check the directory's owner and mode",
    errno.EROFS: "the filesystem is read-only",
    errno.EMFILE: "too many open files; raise the limit (ulimit -n) or lower max_open_files",
    errno.EIO: "an I/O error; check the disk",
}
_NOT_FOUND = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR})


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableDirs:
    """Creates directories under a root and fsyncs each new entry once per process.

    A directory in the known set is durable: its entry was fsynced in its parent by this
    process (or it is the root, made durable at construction).
    """

    def __init__(self, root: str) -> None:
        self._root = root
        self._lock = threading.Lock()
        missing: list[str] = []
        here = root
        while not os.path.isdir(here):
            missing.append(here)
            here = os.path.dirname(here)
        os.makedirs(root, exist_ok=True)
        for created in reversed(missing):
            fsync_dir(os.path.dirname(created))
        self._known = {root}

    def ensure(self, directory: str) -> None:
        """Create ``directory`` (under the root) if needed and make its entry durable."""
        with self._lock:
            if directory in self._known:
                return
            chain: list[str] = []
            here = directory
            while here not in self._known:
                chain.append(here)
                here = os.path.dirname(here)
        os.makedirs(directory, exist_ok=True)
        for made in reversed(chain):
            fsync_dir(os.path.dirname(made))
            with self._lock:
                self._known.add(made)

    def forget(self, directory: str) -> None:
        """Stop assuming ``directory`` exists (something removed it behind the store's back)."""
        with self._lock:
            if directory != self._root:
                self._known.discard(directory)


def read_error(exc: OSError, key: str, url: str) -> StoreError:
    """The inkpen error for a failed read of ``key``."""
    if exc.errno in _NOT_FOUND:
        return NotFoundError(f"object {key!r} not found in {url}", key=key)
    detail = _describe(exc)
    return StoreError(f"reading {key!r} from {url} failed: {detail}", definite=True, key=key)


def write_error(exc: OSError, key: str, url: str, *, visible: bool) -> InkpenError:
    """The inkpen error for a failed write of ``key``; ``visible`` says whether the new object
    may already be visible (the failure came after its link or rename)."""
    if not visible and exc.errno == errno.ENAMETOOLONG:
        return UsageError(f"object key {key!r} is too long for the filesystem under {url}")
    if not visible and exc.errno in (errno.ENOTDIR, errno.EISDIR):
        return UsageError(
            f"object key {key!r} collides with another object's path in {url}: a local "
            "directory store cannot hold both 'a' and 'a/b'; choose another key"
        )
    return StoreError(
        f"writing {key!r} to {url} failed: {_describe(exc)}", definite=not visible, key=key
    )


def _describe(exc: OSError) -> str:
    hint = _HINTS.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({hint})" if hint else text
