"""The actor base every inkpen actor derives from, and the one way actors talk to each other.

pykka delivers each message to ``on_receive`` on the actor's own thread. :class:`InkpenActor`
routes a message to the method registered for its type with :func:`handles`, so an actor's
messages are plain frozen dataclasses and its handlers are ordinary methods.

Two ways to send: :func:`call` asks and waits for the answer (an exception raised by the handler is
raised again in the caller's thread); :func:`send` tells and returns at once. pykka stops an actor
whose handler raises while handling a tell; inkpen actors must outlive a failed store call, so a
failing tell is logged under the event ``actor.message_failed`` and the actor keeps serving.

Threads are daemon threads: an application that exits without closing its Bookie loses nothing
acknowledged (every acknowledged write is already in a journal object) and does not hang.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

import pykka

from inkpen.errors import InkpenError
from inkpen.logs import get_logger

log = get_logger("inkpen.actors")

_Handler = Callable[[Any, Any], Any]


def handles(message_type: type) -> Callable[[_Handler], _Handler]:
    """Mark a method as the handler of one message type."""

    def mark(method: _Handler) -> _Handler:
        method.__inkpen_handles__ = message_type  # type: ignore[attr-defined]
        return method

    return mark


class ActorGone(InkpenError):
    """The actor addressed has stopped (its Bookie was closed)."""


class _Envelope:
    """One message on its way to an actor; emptied as the actor takes the message.

    pykka's actor loop keeps the last envelope it delivered until the next one arrives, and a
    file clerk may then sit idle for the life of its file. A message that carries a file's bytes
    or entries (``WriteJournal``, ``WriteSst``, ``BuildL0``, ``RollSegments``) would so stay in
    memory as long as the file lives: memory growing with the data written. Every message is
    therefore sent in an envelope that the receiving actor empties before handling it.
    """

    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message: Any = message

    def take(self) -> Any:
        message, self.message = self.message, None
        return message


class _Ask(_Envelope):
    """Envelope of a message whose sender waits for the answer."""

    __slots__ = ()


class _Tell(_Envelope):
    """Envelope of a message whose sender does not wait."""

    __slots__ = ()


class InkpenActor(pykka.ThreadingActor):
    """Base of inkpen's actors: typed message dispatch and failure containment."""

    use_daemon_thread = True
    _routes: ClassVar[dict[type, _Handler]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        routes: dict[type, _Handler] = {}
        for klass in reversed(cls.__mro__):
            for attr in vars(klass).values():
                message_type = getattr(attr, "__inkpen_handles__", None)
                if message_type is not None:
                    routes[message_type] = attr
        cls._routes = routes

    def on_receive(self, message: Any) -> Any:
        if type(message) is _Ask:
            return self._dispatch(message.take())
        if type(message) is _Tell:
            message = message.take()
        try:
            return self._dispatch(message)
        except Exception as exc:
            log.error(
                "actor.message_failed",
                actor=type(self).__name__,
                message=type(message).__name__,
                error=repr(exc),
                exc_info=exc,
            )
            return None

    def _dispatch(self, message: Any) -> Any:
        handler = self._routes.get(type(message))
        if handler is None:
            raise TypeError(f"{type(self).__name__} has no handler for {type(message).__name__}")
        return handler(self, message)


def call(ref: pykka.ActorRef[Any], message: Any, *, timeout: float | None = None) -> Any:
    """Ask an actor and wait for its answer; a stopped actor raises :class:`ActorGone`."""
    try:
        return ref.ask(_Ask(message), timeout=timeout)
    except pykka.ActorDeadError as exc:
        raise ActorGone(f"{ref.actor_class.__name__} has stopped") from exc
    except pykka.Timeout as exc:
        raise InkpenError(
            f"{ref.actor_class.__name__} did not answer {type(message).__name__} within {timeout} s"
        ) from exc


def call_async(ref: pykka.ActorRef[Any], message: Any) -> pykka.Future[Any]:
    """Ask an actor without waiting; ``.get()`` on the future gives the answer or raises."""
    return ref.ask(_Ask(message), block=False)


def send(ref: pykka.ActorRef[Any], message: Any) -> bool:
    """Tell an actor something without waiting; False if it has already stopped."""
    try:
        ref.tell(_Tell(message))
    except pykka.ActorDeadError:
        return False
    return True


def stop(ref: pykka.ActorRef[Any] | None, *, timeout: float = 30.0) -> None:
    """Stop an actor after the messages already in its mailbox; quiet if it is gone."""
    if ref is None:
        return
    with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
        ref.stop(block=True, timeout=timeout)
