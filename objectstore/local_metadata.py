"""Where a local directory store keeps user metadata: extended attributes, or sidecar files.

The preferred home is the object file's own Linux user extended attributes
(``user.inkpen.<key>``): they are set on the temporary file before it is linked into place, so
an object and its metadata become visible together, and a hard-link copy shares them.

Filesystems that refuse user xattrs get sidecar files instead, under ``.inkpen-meta/`` at the
store root, one per *inode* (not per key). A sidecar is written before its object becomes
visible and, being named by inode, can never be overwritten by a racing writer of the same key;
a hard-link copy shares the inode and therefore the sidecar. Each sidecar records the size and
nanosecond modification time of the file it describes, and is trusted only while both still
match, so a sidecar left over from a deleted file whose inode number was reused is ignored.
"""

from __future__ import annotations

import errno
import json
import os
import time
import uuid
from collections.abc import Mapping
from typing import Protocol

XATTR_PREFIX = "user.inkpen."
SIDECAR_DIR = ".inkpen-meta"

_XATTR_UNSUPPORTED = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM})


class MetadataBackend(Protocol):
    """Attaches user metadata to a file that is not yet visible, and reads it back."""

    name: str

    def attach(self, fd: int, metadata: Mapping[str, str]) -> None:
        """Record ``metadata`` for the open, still-private file ``fd`` (before its fsync)."""
        ...

    def read(self, path: str, st: os.stat_result) -> dict[str, str]:
        """The metadata of the visible file at ``path`` whose stat is ``st``."""
        ...

    def forget(self, st: os.stat_result) -> None:
        """Drop what was recorded for the file ``st`` describes: one that will never become
        visible, or one that has just lost its last name."""
        ...

    def share(self, st: os.stat_result, metadata: Mapping[str, str]) -> None:
        """Record ``metadata`` for an existing inode that is about to get a name in this store."""
        ...


class XattrMetadata:
    """User metadata as ``user.inkpen.<key>`` extended attributes of the object file."""

    name = "xattr"

    def attach(self, fd: int, metadata: Mapping[str, str]) -> None:
        for key, value in metadata.items():
            os.setxattr(fd, XATTR_PREFIX + key, value.encode("ascii"))

    def read(self, path: str, st: os.stat_result) -> dict[str, str]:
        found: dict[str, str] = {}
        for attr in os.listxattr(path):
            if attr.startswith(XATTR_PREFIX):
                found[attr[len(XATTR_PREFIX) :]] = os.getxattr(path, attr).decode("ascii")
        return found

    def forget(self, st: os.stat_result) -> None:
        """Attributes live and die with the file: nothing to do."""

    def share(self, st: os.stat_result, metadata: Mapping[str, str]) -> None:
        """A hard link shares the inode and so its attributes: nothing to do."""


class SidecarMetadata:
    """User metadata as one JSON sidecar per inode under ``<root>/.inkpen-meta/``."""

    name = "sidecar"

    def __init__(self, root: str) -> None:
        self._dir = os.path.join(root, SIDECAR_DIR)
        os.makedirs(self._dir, exist_ok=True)

    def _path(self, ino: int) -> str:
        return os.path.join(self._dir, f"{ino}.json")

    def _write(self, st: os.stat_result, metadata: Mapping[str, str]) -> None:
        record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "metadata": dict(metadata)}
        final = self._path(st.st_ino)
        temp = f"{final}.{uuid.uuid4().hex}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, json.dumps(record, separators=(",", ":")).encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, final)
        dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def attach(self, fd: int, metadata: Mapping[str, str]) -> None:
        # Stamp the file with a nanosecond mtime of our own so the sidecar names it exactly,
        # even on filesystems whose own timestamps are coarse.
        os.utime(fd, ns=(time.time_ns(), time.time_ns()))
        if metadata:
            self._write(os.fstat(fd), metadata)

    def share(self, st: os.stat_result, metadata: Mapping[str, str]) -> None:
        if metadata:
            self._write(st, metadata)

    def read(self, path: str, st: os.stat_result) -> dict[str, str]:
        try:
            with open(self._path(st.st_ino), "rb") as f:
                record = json.loads(f.read())
        except FileNotFoundError:
            return {}
        if record.get("size") != st.st_size or record.get("mtime_ns") != st.st_mtime_ns:
            return {}
        return {str(k): str(v) for k, v in record.get("metadata", {}).items()}

    def forget(self, st: os.stat_result) -> None:
        path = self._path(st.st_ino)
        try:
            with open(path, "rb") as f:
                record = json.loads(f.read())
            if record.get("size") == st.st_size and record.get("mtime_ns") == st.st_mtime_ns:
                os.unlink(path)
        except (FileNotFoundError, ValueError):
            return


def xattrs_supported(probe_dir: str, *, name_prefix: str = "") -> bool:
    """Whether the filesystem holding ``probe_dir`` accepts user extended attributes (tried on
    a fresh file ``<name_prefix>xattr-probe-<uuid>`` there, removed after)."""
    path = os.path.join(probe_dir, f"{name_prefix}xattr-probe-{uuid.uuid4().hex}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.setxattr(fd, XATTR_PREFIX + "probe", b"1")
        return True
    except OSError as exc:
        if exc.errno in _XATTR_UNSUPPORTED:
            return False
        raise
    finally:
        os.close(fd)
        os.unlink(path)
