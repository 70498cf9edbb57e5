"""The errors inkpen raises, in two tiers (usage and storage), as Materialize persist has them.

Every public error derives from :class:`InkpenError`. A :class:`UsageError` means the caller asked
for something invalid; it is raised before anything changes. A :class:`StoreError` means the object
store (or the path to it) failed; its ``definite`` attribute says whether the operation certainly
did not happen (safe to retry) or may have happened (the caller must check before retrying).
"""

from __future__ import annotations

from typing import Any


class InkpenError(Exception):
    """Base class of every error inkpen raises on purpose."""


class UsageError(InkpenError, ValueError):
    """The call was invalid: bad argument, bad option, closed handle. Nothing was changed."""


class StoreError(InkpenError):
    """An object-store operation failed.

    ``definite`` is True when the operation certainly did not take effect, False when it may have
    (a timeout or a connection reset after the request was sent). ``key`` names the object when
    one was involved.
    """

    def __init__(self, message: str, *, definite: bool, key: str | None = None) -> None:
        super().__init__(message)
        self.definite = definite
        self.key = key

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process boundaries (compute workers, Spark tasks): pickle by keywords.
        return _rebuild, (type(self), self.args[0], {"definite": self.definite, "key": self.key})

    def __str__(self) -> str:
        base = super().__str__()
        outcome = "it did not happen" if self.definite else "it may or may not have happened"
        return f"{base} ({outcome})"


class NotFoundError(StoreError):
    """The object (or database) asked for does not exist."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message, definite=True, key=key)

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild, (type(self), self.args[0], {"key": self.key})

    def __str__(self) -> str:
        return Exception.__str__(self)


class CheckpointLapsedError(NotFoundError):
    """The checkpoint a Reader reads at is no longer live (its lease expired before a refresh
    landed, or the checkpoint was deleted or dropped by GC), so the files it pinned may be gone.

    ``key`` is the checkpoint's id. Nothing read before is wrong; open a new Reader (with a
    longer ``checkpoint_lifetime`` if its refreshes are slow) to read on.
    """


class AlreadyExistsError(StoreError):
    """A create-if-absent write found the object already there; this write did not happen."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message, definite=True, key=key)

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild, (type(self), self.args[0], {"key": self.key})

    def __str__(self) -> str:
        return Exception.__str__(self)


class CorruptionError(InkpenError):
    """Stored bytes failed a check: a checksum, a magic number, a length, a format version.

    ``object_name`` names the damaged object and ``offset`` the byte offset of the damaged part
    within it (None when the whole object is unreadable). Damaged bytes are never returned as data.
    """

    def __init__(self, object_name: str, detail: str, *, offset: int | None = None) -> None:
        where = f"{object_name}" if offset is None else f"{object_name} at offset {offset}"
        super().__init__(f"corrupt object {where}: {detail}")
        self.object_name = object_name
        self.offset = offset
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.object_name, self.detail), {"offset": self.offset}

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        offset = None if state is None else state.get("offset")
        self.__init__(self.object_name, self.detail, offset=offset)  # type: ignore[misc]


class FencedError(InkpenError):
    """A newer writer has opened this database; this handle may no longer write.

    Reads from what the handle already has keep working while its files last: once the newer
    writer's merges and GC have replaced a file the handle would read, that read raises this
    error too. Close the handle; open the database again if this process should become the
    writer, or open a Reader to read.
    """


class ConflictError(InkpenError):
    """A conditional write (``if_sqn``) found the key in another state; nothing of the write (or
    of its batch) was applied.

    ``bucket`` and ``key`` name the key whose condition failed, ``expected`` the ``if_sqn`` the
    caller gave and ``actual`` the key's current SQN (0: absent). Read the key again (``head`` and
    ``get``), redo the change against what is there now, and write again with the new SQN.
    """

    def __init__(self, message: str, *, bucket: bytes, key: bytes, expected: int, actual: int):
        super().__init__(message)
        self.bucket = bucket
        self.key = key
        self.expected = expected
        self.actual = actual

    def __reduce__(self) -> tuple[object, ...]:
        keywords = {
            "bucket": self.bucket,
            "key": self.key,
            "expected": self.expected,
            "actual": self.actual,
        }
        return _rebuild, (type(self), self.args[0], keywords)


class FeedGapError(InkpenError):
    """A change feed reached SQNs that journal compaction already removed.

    ``sqn`` is the first missing SQN. Nothing was skipped silently: the feed stopped before it.
    Hold a feed cursor (``Bookie.create_feed_cursor``) below the SQNs a consumer still needs so
    compaction keeps them, or read on with ``changes(..., gaps="skip")``.
    """

    def __init__(self, message: str, *, sqn: int) -> None:
        super().__init__(message)
        self.sqn = sqn

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuild, (type(self), self.args[0], {"sqn": self.sqn})


def _rebuild(cls: type[BaseException], message: str, keywords: dict[str, object]) -> BaseException:
    return cls(message, **keywords)


__all__ = [
    "AlreadyExistsError",
    "CheckpointLapsedError",
    "ConflictError",
    "CorruptionError",
    "FeedGapError",
    "FencedError",
    "InkpenError",
    "NotFoundError",
    "StoreError",
    "UsageError",
]
