"""What the actors of one open Bookie share: stores, options, views, timers, throttle, meter,
and the news of applied changes."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from inkpen.actors.kernel.deleter import Deleter
from inkpen.actors.kernel.in_flight import InFlight
from inkpen.actors.kernel.keeper import ManifestKeeper
from inkpen.actors.kernel.meter import Meter
from inkpen.actors.kernel.news import Applied
from inkpen.actors.kernel.scheduler import Scheduler
from inkpen.actors.kernel.throttle import Throttle
from inkpen.actors.kernel.views import ViewBoard
from inkpen.errors import InkpenError
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.base import ObjectStore
from inkpen.options import Options


@dataclass(frozen=True, slots=True)
class EngineContext:
    """The shared parts of one Bookie's actor system; built once at open, never replaced."""

    store: ObjectStore
    resolver: StoreResolver
    options: Options
    keeper: ManifestKeeper
    scheduler: Scheduler
    board: ViewBoard
    throttle: Throttle
    tables: TableStore
    """Writes and opens every SST and journal file (holds the block and journal caches; tells
    ``in_flight`` of each new file)."""
    in_flight: InFlight = field(default_factory=InFlight)
    """Names of files written and not yet committed: the writer's GC leaves them alone."""
    ledger_room: threading.Event = field(default_factory=threading.Event)
    """Set by the Penciller whenever an L0 write or a merge frees room for pushes."""
    meter: Meter = field(default_factory=Meter)
    """What the handle and the owners count (``Bookie.metrics()``)."""
    applied: Applied = field(default_factory=Applied)
    """The last SQN the Bookie actor applied, which tails of the writer's feed wait on."""
    deleter: Deleter | None = None
    """Sends the file clerks' deletes in batches (closed with the engine); None: each clerk
    deletes its own file."""

    def halt(self, error: InkpenError) -> None:
        """This writer writes no more (fenced, stopped by a store failure, a lost ledger file,
        closed): every put blocked by backpressure and every later one raises ``error`` (the
        first one given), and the ledger waits of flush and close wake up to see why."""
        self.throttle.halt(error)
        self.ledger_room.set()

    def close_deleter(self, *, send: bool = True) -> None:
        """Send the deletes the clerks handed over (``send``; else drop them, as a crash would)
        and stop the deleter's thread."""
        if self.deleter is not None:
            self.deleter.close(send=send)

    def now_ms(self) -> int:
        return int(self.options.clock() * 1000)
