"""An idle actor does not keep the last message it handled.

pykka's loop holds the last envelope it delivered until the next one arrives, and a file clerk
can sit idle for the life of its file; a message carrying the file's bytes must not stay alive
with it (memory would grow with the data written).
"""

from __future__ import annotations

import gc
import threading
import weakref
from dataclasses import dataclass

from inkpen.actors.base import InkpenActor, call, handles, send, stop
from support.waiting import held_within


class Payload:
    """Stands for a file's bytes: an object a weak reference can watch."""


@dataclass(frozen=True)
class Carry:
    payload: Payload
    handled: threading.Event


class Holder(InkpenActor):
    @handles(Carry)
    def _carry(self, message: Carry) -> int:
        message.handled.set()
        return id(message.payload)


def _freed(watch: weakref.ref[Payload], deadline: float = 10.0) -> bool:
    """Whether the watched payload is freed within ``deadline`` seconds (polled)."""

    def freed() -> bool:
        gc.collect()
        return watch() is None

    return held_within(freed, deadline)


def test_an_idle_actor_keeps_no_asked_message() -> None:
    ref = Holder.start()
    try:
        payload = Payload()
        watch = weakref.ref(payload)
        assert call(ref, Carry(payload, threading.Event())) == id(payload)
        del payload
        assert _freed(watch)  # the actor is idle now; its last message was this ask
    finally:
        stop(ref)


def test_an_idle_actor_keeps_no_told_message() -> None:
    ref = Holder.start()
    try:
        payload = Payload()
        watch = weakref.ref(payload)
        handled = threading.Event()
        assert send(ref, Carry(payload, handled))
        del payload
        assert handled.wait(10.0)
        assert _freed(watch)  # the actor is idle now; its last message was this tell
    finally:
        stop(ref)
