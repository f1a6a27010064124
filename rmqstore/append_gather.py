"""The appender's group commit for synchronous senders (``Appender``'s ``gather_s``): sends of
several connections, each answered a moment ago, come back at about the same time, and one
batch of them all costs the writer and the sending process one request's wake-ups instead of
one per sender (the two halves of a group of senders would otherwise alternate, each in its
own batch). A batch about to go out waits (at most ``gather_s``) until every synchronous
sender seen in the last ``RECENT_S`` has a put queued; no wait for a sender alone, none once
``batch_max`` messages wait, and one gathering at a time (a second slot's batch goes as it is).
"""

import asyncio
from collections.abc import Hashable

RECENT_S = 0.05  # a synchronous sender that put this recently is expected back


class Gathering:
    """Who put lately, whose puts are queued, and the one batch waiting for the others."""

    def __init__(self, gather_s: float, batch_max: int) -> None:
        self.gather_s = gather_s
        self.batch_max = batch_max
        self.recent: dict[str, float] = {}  # sender -> when it last put
        self._queued_from: dict[Hashable, str] = {}  # a queued put -> its sender
        self._missing: set[str] = set()  # senders the gathering batch waits for
        self._gathered: asyncio.Future[None] | None = None  # set once none is missing

    def put(self, sender: str, now: float) -> None:
        """``sender`` put (queued or not)."""
        self.recent[sender] = now

    def queued(self, put: Hashable, sender: str, queued: int) -> None:
        """A put of ``sender`` was queued, ``queued`` messages waiting now."""
        self._queued_from[put] = sender
        if sender in self._missing:
            self._missing.discard(sender)
            if not self._missing or queued >= self.batch_max:
                self._end()

    def taken(self, put: Hashable) -> None:
        """A queued put left the queue for a batch."""
        self._queued_from.pop(put, None)

    async def wait(self, loop: asyncio.AbstractEventLoop, queued: int) -> None:
        """The wait of a batch about to go out, ``queued`` messages waiting (see above)."""
        if self._gathered is not None:
            return
        now = loop.time()
        recent = self.recent
        for sender, at in list(recent.items()):
            if now - at > RECENT_S:
                del recent[sender]
        if len(recent) < 2 or queued >= self.batch_max:
            return
        present = set(self._queued_from.values())  # the first put's sender among them
        missing = {s for s in recent if s not in present}
        if not missing:
            return
        self._missing = missing
        gathered = self._gathered = loop.create_future()
        timer = loop.call_later(self.gather_s, _end, gathered)
        try:
            await gathered
        finally:
            timer.cancel()
            self._missing = set()
            self._gathered = None

    def _end(self) -> None:
        if self._gathered is not None:
            _end(self._gathered)


def _end(gathered: asyncio.Future[None]) -> None:
    """A gathering's wait is over (its time, or every sender came)."""
    if not gathered.done():
        gathered.set_result(None)
