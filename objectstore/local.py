"""A directory path or ``file:///abs/dir``: the embedded default object store.

Each object is a file under the root directory, at the path its key names. Two hidden
directories at the root belong to the store itself and never show in listings:
``.inkpen-tmp/`` (files being written) and ``.inkpen-meta/`` (metadata sidecars, only on
filesystems without user extended attributes; see :mod:`.local_metadata`).

How a write becomes durable and atomic: the bytes go to a fresh file in ``.inkpen-tmp/``, the
metadata is attached to it, the file is fsynced, and only then does it get its real name:
``os.link`` for a create-if-absent (the kernel refuses an existing name, so concurrent creators
of one key get exactly one winner) or ``os.replace`` for a plain put. The parent directory is
fsynced before the call returns, as is every directory the write had to create. A crash at any
point leaves at most a file in ``.inkpen-tmp/``, which no listing shows.

A filesystem cannot hold an object ``a`` and an object ``a/b`` at once; such a key is refused
with a :class:`UsageError` (no inkpen layout needs it).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import operator
import os
import stat
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Literal, cast
from urllib.parse import SplitResult, quote, unquote

from inkpen.errors import AlreadyExistsError, NotFoundError, StoreError, UsageError

from .backends import Backend, Place, StoreURL
from .base import (
    DEFAULT_PAGE_SIZE,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoreBase,
    check_data,
    check_key,
    check_keys,
    check_metadata,
    check_page,
    check_prefix,
    check_range,
    innermost,
)
from .local_files import DEFAULT_MAX_OPEN_FILES, OpenFileCache
from .local_fs import DurableDirs, fsync_dir, read_error, write_error
from .local_metadata import (
    SIDECAR_DIR,
    MetadataBackend,
    SidecarMetadata,
    XattrMetadata,
    xattrs_supported,
)
from .url import checked_path

TEMP_DIR = ".inkpen-tmp"
RESERVED_PREFIX = ".inkpen-"
"""Top-level names starting with this belong to the store, never to objects."""

MetadataMode = Literal["auto", "xattr", "sidecar"]

LOCAL_CONCURRENCY = 8
"""Requests worth having in flight on a local directory at once: its reads are system calls that
release the interpreter lock, and its writes wait on ``fsync``, which several writers share."""
_RESOLVED_KEYS = 4096
_NO_HARD_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP})


class LocalStore(StoreBase):
    """Objects as files under one root directory, written atomically and durably.

    ``max_open_files`` bounds the descriptors kept open for ranged reads. ``metadata`` chooses
    where user metadata lives: ``"auto"`` (extended attributes when the filesystem takes them,
    else sidecars; a root that already has sidecars keeps using them), ``"xattr"`` or
    ``"sidecar"``.
    """

    local = True
    """Its requests are system calls (a ranged read is a ``pread`` on a cached descriptor), not
    round trips (:func:`~inkpen.objectstore.base.is_local`)."""
    concurrency = LOCAL_CONCURRENCY

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        metadata: MetadataMode = "auto",
    ) -> None:
        if not isinstance(root_dir, str | os.PathLike):
            raise UsageError(f"root_dir must be a path, got {type(root_dir).__name__}")
        if "\x00" in str(os.fspath(root_dir)):
            raise UsageError(f"root_dir {root_dir!r} contains a NUL character")
        if metadata not in ("auto", "xattr", "sidecar"):
            raise UsageError(f"metadata must be 'auto', 'xattr' or 'sidecar', got {metadata!r}")
        if not isinstance(max_open_files, int) or max_open_files < 1:
            raise UsageError(f"max_open_files must be an int >= 1, got {max_open_files!r}")
        root = os.path.abspath(os.fspath(root_dir))
        if os.path.exists(root) and not os.path.isdir(root):
            raise UsageError(f"{root} exists and is not a directory; a local store needs one")
        self._root = root
        self._url = "file://" + quote(root)
        self._temp_dir = os.path.join(root, TEMP_DIR)
        try:
            self._dirs = DurableDirs(root)
            # The temp area is made on the first write: a store that only looked (an open
            # refused for a directory holding other files, say) leaves nothing behind.
            self._meta = self._metadata_backend(metadata)
            self._dev = os.stat(root).st_dev
        except OSError as exc:
            raise StoreError(
                f"cannot open a local store at {root}: {exc.strerror or exc}", definite=True
            ) from exc
        self._files = OpenFileCache(max_open_files)
        self._resolve = functools.lru_cache(maxsize=_RESOLVED_KEYS)(self._resolve_key)
        self._closed = False

    @property
    def root(self) -> str:
        """The absolute path of the root directory."""
        return self._root

    def remove_empty_directories(self) -> None:
        """Remove every empty directory under the root, and the root itself if it is left
        empty: a destroyed database leaves no tree of empty folders behind. Directories that
        still hold anything are kept; failures are ignored (the objects are gone either way)."""
        self._check_open()
        for here, _dirs, _files in os.walk(self._root, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(here)

    @property
    def metadata_mode(self) -> str:
        """Where this store keeps user metadata: ``"xattr"`` or ``"sidecar"``."""
        return self._meta.name

    def path_of(self, key: str) -> str:
        """The file that holds (or would hold) the object ``key``."""
        return self._path(key)

    # -- writes ------------------------------------------------------------------------------

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._write(key, data, metadata, exclusive=True)

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        self._write(key, data, metadata, exclusive=False)

    def put_pieces_if_absent(
        self, key: str, pieces: Sequence[bytes], *, metadata: Mapping[str, str] | None = None
    ) -> None:
        """:meth:`put_if_absent` of the bytes ``pieces`` join into, in order, written with
        gathering writes (``os.writev``): the pieces are never joined in memory (a journal
        segment of large values is its records' bodies as the puts gave them)."""
        for piece in pieces:
            if not isinstance(piece, bytes):
                raise UsageError(f"object data must be bytes, got a {type(piece).__name__} piece")
        self._write(key, pieces, metadata, exclusive=True)

    def delete(self, key: str) -> None:
        self._check_open()
        error = self._unlink(key, self._path(key))
        if error is not None:
            raise error

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """Each key's file unlinked in turn: an unlink is a system call of a few microseconds,
        which threads do not make faster (measured: docs/performance.md, 'Store requests')."""
        self._check_open()
        paths = [(key, self._path(key)) for key in check_keys(keys)]
        failed: dict[str, StoreError] = {}
        for key, path in paths:
            error = self._unlink(key, path)
            if error is not None:
                failed[key] = error
        return DeleteResult(failed)

    def _unlink(self, key: str, path: str) -> StoreError | None:
        """Remove the file of ``key``; None when it is gone (or was never there), else the
        definite error that kept it."""
        try:
            st = os.stat(path) if isinstance(self._meta, SidecarMetadata) else None
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            error = StoreError(
                f"deleting {key!r} from {self._url} failed: {exc.strerror or exc}",
                definite=True,
                key=key,
            )
            error.__cause__ = exc
            return error
        finally:
            self._files.forget(path)
        if st is not None and st.st_nlink == 1:
            self._meta.forget(st)
        return None

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        self._check_open()
        self._path(dest_key)  # refuse a bad destination before reading anything
        origin = self if source is None else source
        inner = innermost(origin)
        if (
            isinstance(inner, LocalStore)
            and inner._dev == self._dev
            and inner.metadata_mode == self.metadata_mode
            and self._link_copy(inner, src_key, dest_key)
        ):
            return
        info = origin.head(src_key)
        self.put(dest_key, origin.get(src_key), metadata=info.metadata)

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        self._check_open()
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError as exc:
            raise read_error(exc, key, self._url) from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._check_open()
        check_range(start, end)
        try:
            return self._files.pread(self._path(key), end - start, start)
        except OSError as exc:
            raise read_error(exc, key, self._url) from None

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self._check_open()
        for start, end in ranges:
            check_range(start, end)
        try:
            return self._files.pread_many(self._path(key), ranges)
        except OSError as exc:
            raise read_error(exc, key, self._url) from None

    def head(self, key: str) -> ObjectInfo:
        self._check_open()
        path = self._path(key)
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a regular file", path)
            metadata = self._meta.read(path, st)
        except OSError as exc:
            raise read_error(exc, key, self._url) from None
        return ObjectInfo(key, st.st_size, _changed_at(st), metadata)

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        self._check_open()
        check_prefix(prefix)
        check_page(token, limit)
        found: list[ObjectInfo] = []
        examined: str | None = None
        for count, (key, entry) in enumerate(self._walk_from(prefix, token)):
            if count == limit:
                return ListPage(tuple(found), examined)
            examined = key
            info = _info(key, entry)
            if info is not None:
                found.append(info)
        return ListPage(tuple(found), None)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, in one walk of the tree: paging through
        :meth:`list_page` walks each directory again from the token for every page, which for
        a directory of many thousand files (the segments awaiting GC) costs a scan and a sort of
        the whole directory per page."""
        self._check_open()
        check_prefix(prefix)
        for key, entry in self._walk_from(prefix, None):
            info = _info(key, entry)
            if info is not None:
                yield info

    def _walk_from(self, prefix: str, after: str | None) -> Iterator[tuple[str, os.DirEntry[str]]]:
        start_key = prefix.rpartition("/")[0]
        start_dir = os.path.join(self._root, start_key) if start_key else self._root
        return _walk(start_dir, f"{start_key}/" if start_key else "", prefix, after)

    def close(self) -> None:
        self._closed = True
        self._files.close()

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the store {self._url} is closed; open it again to use it")

    def _path(self, key: str) -> str:
        if not isinstance(key, str):
            check_key(key)  # raises the UsageError that explains what a key must be
        return self._resolve(key)

    def _resolve_key(self, key: str) -> str:
        """The file path of a valid key (memoised per store: this is on the read path)."""
        check_key(key)
        if key.startswith(RESERVED_PREFIX):
            raise UsageError(
                f"object key {key!r} starts with {RESERVED_PREFIX!r}, which a local store "
                "keeps for its own files; choose another key"
            )
        return os.path.join(self._root, key)

    def _metadata_backend(self, mode: MetadataMode) -> MetadataBackend:
        has_sidecars = os.path.isdir(os.path.join(self._root, SIDECAR_DIR))
        if mode == "sidecar" or (mode == "auto" and has_sidecars):
            return SidecarMetadata(self._root)
        if has_sidecars:
            raise UsageError(
                f"{self._root} keeps metadata in sidecar files; open it with metadata='sidecar' "
                "or 'auto'"
            )
        # The probe file is named with the reserved prefix: listings never show it.
        if xattrs_supported(self._root, name_prefix=RESERVED_PREFIX):
            return XattrMetadata()
        if mode == "xattr":
            raise UsageError(
                f"the filesystem under {self._root} refuses user extended attributes; "
                "open the store with metadata='auto' or 'sidecar'"
            )
        return SidecarMetadata(self._root)

    def _write(
        self,
        key: str,
        data: bytes | Sequence[bytes],
        metadata: Mapping[str, str] | None,
        *,
        exclusive: bool,
    ) -> None:
        self._check_open()
        final = self._path(key)
        body = data if isinstance(data, list | tuple) else check_data(cast(bytes, data))
        checked = check_metadata(metadata)
        temp, written = self._write_temp(key, body, checked)
        try:
            self._publish(key, temp, final, written, exclusive=exclusive)
        finally:
            _unlink_quietly(temp)

    def _write_temp(
        self, key: str, body: bytes | Sequence[bytes], metadata: Mapping[str, str]
    ) -> tuple[str, os.stat_result]:
        """Write ``body`` to a fresh private file, attach ``metadata``, fsync it."""
        temp = os.path.join(self._temp_dir, uuid.uuid4().hex)
        try:
            fd = self._create_temp(temp)
        except OSError as exc:
            raise write_error(exc, key, self._url, visible=False) from exc
        try:
            try:
                _write_all(fd, body)
                self._meta.attach(fd, metadata)
                os.fsync(fd)
                written = os.fstat(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            _unlink_quietly(temp)
            raise write_error(exc, key, self._url, visible=False) from exc
        return temp, written

    def _create_temp(self, temp: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            return os.open(temp, flags, 0o644)
        except FileNotFoundError:
            # Someone removed the temp area: put it back once.
            os.makedirs(self._temp_dir, exist_ok=True)
            return os.open(temp, flags, 0o644)

    def _publish(
        self,
        key: str,
        temp: str,
        final: str,
        written: os.stat_result,
        *,
        exclusive: bool,
        owns_metadata: bool = True,
    ) -> None:
        """Give the private file ``temp`` its real name, then make the name durable.

        ``owns_metadata`` says whether what the metadata backend holds for ``written`` belongs
        to this write alone (and should go if the write fails); a hard-link copy shares it.
        """
        parent = os.path.dirname(final)
        discard = self._meta.forget if owns_metadata else _keep
        displaced: os.stat_result | None = None
        for attempt in range(2):
            try:
                try:
                    self._ensure_parent(key, parent)
                except UsageError:
                    discard(written)
                    raise
                if exclusive:
                    os.link(temp, final)
                else:
                    if isinstance(self._meta, SidecarMetadata):
                        displaced = _stat_or_none(final)
                    os.replace(temp, final)
                break
            except FileExistsError as exc:
                discard(written)
                if os.path.isdir(final):
                    raise write_error(
                        OSError(errno.EISDIR, "is a directory"), key, self._url, visible=False
                    ) from exc
                raise AlreadyExistsError(
                    f"object {key!r} already exists in {self._url}", key=key
                ) from None
            except FileNotFoundError as exc:
                # A directory we created earlier was removed behind our back: recreate it once.
                self._dirs.forget(parent)
                if attempt == 1:
                    discard(written)
                    raise write_error(exc, key, self._url, visible=False) from exc
            except OSError as exc:
                discard(written)
                raise write_error(exc, key, self._url, visible=False) from exc
        self._files.forget(final)
        try:
            fsync_dir(parent)
        except OSError as exc:
            raise write_error(exc, key, self._url, visible=True) from exc
        if displaced is not None and displaced.st_nlink == 1:
            self._meta.forget(displaced)

    def _ensure_parent(self, key: str, parent: str) -> None:
        try:
            self._dirs.ensure(parent)
        except (FileExistsError, NotADirectoryError) as exc:
            raise write_error(
                OSError(errno.ENOTDIR, "not a directory"), key, self._url, visible=False
            ) from exc

    def _link_copy(self, origin: LocalStore, src_key: str, dest_key: str) -> bool:
        """Copy by hard link; False when the filesystem will not link (copy the bytes then)."""
        src = origin._path(src_key)
        dest = self._path(dest_key)
        temp = os.path.join(self._temp_dir, uuid.uuid4().hex)
        try:
            os.makedirs(self._temp_dir, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, dest_key, self._url, visible=False) from exc
        try:
            os.link(src, temp, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(
                f"object {src_key!r} not found in {origin.url}", key=src_key
            ) from None
        except OSError as exc:
            if exc.errno in _NO_HARD_LINK:
                return False
            raise write_error(exc, dest_key, self._url, visible=False) from exc
        try:
            linked = os.stat(temp)
            if origin is not self:
                self._meta.share(linked, origin._meta.read(temp, linked))
            self._publish(dest_key, temp, dest, linked, exclusive=False, owns_metadata=False)
        except OSError as exc:
            raise write_error(exc, dest_key, self._url, visible=False) from exc
        finally:
            _unlink_quietly(temp)
        return True


def _walk(
    directory: str, dir_key: str, prefix: str, after: str | None
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Yield ``(key, entry)`` for every regular file under ``directory`` whose key starts with
    ``prefix`` and sorts after ``after``, in key order.

    Directory entries are sorted with a directory standing for ``name/``, which makes the walk
    order equal the order of the full key strings. Subtrees wholly outside the prefix or wholly
    at or before ``after`` are not entered, and entries that cannot be wanted are dropped by
    name before anything else is asked of them: a listing of a large directory pages through
    it, and each page walks it again from its token, so a page must cost what it returns and
    what follows the token, not the whole directory.
    """
    try:
        with os.scandir(directory) as it:
            entries = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return
    ranked: list[tuple[str, bool, os.DirEntry[str]]] = []
    for entry in entries:
        name = entry.name
        if not dir_key and name.startswith(RESERVED_PREFIX):
            continue
        full = dir_key + name
        if after is not None and full < after:
            # As a file it sorts before the token; as a directory (``full/``) all its keys do
            # too, unless that still sorts after the token or the token lies inside it.
            as_dir = f"{full}/"
            if as_dir < after and not after.startswith(as_dir):
                continue
        if not (full.startswith(prefix) or prefix.startswith(full)):
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            ranked.append((f"{full}/", True, entry))
        elif entry.is_file(follow_symlinks=False):
            ranked.append((full, False, entry))
    ranked.sort(key=_first)
    for key, is_dir, entry in ranked:
        if is_dir:
            if not (key.startswith(prefix) or prefix.startswith(key)):
                continue
            if after is not None and key < after and not after.startswith(key):
                continue
            yield from _walk(entry.path, key, prefix, after)
        elif key.startswith(prefix) and (after is None or key > after):
            yield key, entry


_first = operator.itemgetter(0)


def _info(key: str, entry: os.DirEntry[str]) -> ObjectInfo | None:
    """The listing's entry for a file the walk found, or None if it was deleted since."""
    try:
        st = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    return ObjectInfo(key, st.st_size, _changed_at(st))


def _keep(st: os.stat_result) -> None:
    """Leave shared metadata alone."""


def _changed_at(st: os.stat_result) -> float:
    """When the object last got its bytes or its name (a hard-link copy counts as new)."""
    return max(st.st_mtime, st.st_ctime)


_IOV_MAX = 1024
"""The most buffers one ``writev`` takes (Linux's ``IOV_MAX``)."""


def _write_all(fd: int, data: bytes | Sequence[bytes]) -> None:
    """Write ``data`` (bytes, or pieces written in order with ``os.writev``) whole."""
    if isinstance(data, bytes):
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        return
    pending = [memoryview(piece) for piece in data if piece]
    at = 0
    while at < len(pending):
        written = os.writev(fd, pending[at : at + _IOV_MAX])
        while written and written >= len(pending[at]):
            written -= len(pending[at])
            at += 1
        if written:
            pending[at] = pending[at][written:]


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _unlink_quietly(path: str) -> None:
    """Remove a temp file if possible. Any failure is dropped (a read-only filesystem, an I/O
    error): the write it served is decided already, and a file left in the temp directory is
    one no listing shows."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def _parse(parts: SplitResult, url: str, options: dict[str, str]) -> StoreURL:
    if parts.netloc not in ("", "localhost"):
        raise UsageError(f"file URL {url!r} must be file:///absolute/path")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise UsageError(f"file URL {url!r} must name an absolute path")
    return StoreURL("file", checked_path(url, os.path.abspath(path)), options=options)


def _open(parsed: StoreURL) -> ObjectStore:
    return LocalStore(parsed.location)


def _place(parsed: StoreURL) -> Place:
    # Resolved: absolute, ``..`` and symlinks followed, so every alias of one directory gives
    # the same place.
    return "file", "", PurePosixPath(os.path.realpath(parsed.location)).parts


BACKEND = Backend(
    scheme="file",
    form="file:///abs/path",
    parse=_parse,
    open=_open,
    place=_place,
    local=True,
)
