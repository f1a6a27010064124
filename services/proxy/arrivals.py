"""Long polling: receives waiting for a topic's next message are woken when its consume
queues grow. One watcher task per topic looks at the queues' ends every ``POLL_S`` while at
least one receive waits (however many do), so an idle consumer costs a timer, not a read of
every queue every few milliseconds.
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from rmqstore.formats.topics_json import TopicConfig
from rmqstore.queue_files import QueueFiles
from rmqstore.times import now_ms

log = logging.getLogger(__name__)
POLL_S = 0.005  # how often a topic with waiting receives is looked at (one pread a queue)
RECHECK_S = 0.1  # a waiting receive looks again at least this often, woken or not


class Arrivals:
    def __init__(self, queues: QueueFiles) -> None:
        self.queues = queues
        self._events: dict[str, asyncio.Event] = {}  # topic -> set when it grew
        self._waiting: dict[str, int] = {}  # topic -> receives waiting on it
        self._ends: dict[tuple[str, int], int] = {}  # (topic, queue) -> end last seen
        self._watchers: dict[str, asyncio.Task] = {}

    def event(self, topic: str) -> asyncio.Event:
        """What the next growth of ``topic`` sets: take it *before* looking at the queues,
        so that a message arriving between the look and the wait is not missed."""
        ev = self._events.get(topic)
        if ev is None or ev.is_set():
            ev = self._events[topic] = asyncio.Event()
        return ev

    async def wait(
        self,
        topic: TopicConfig,
        ev: asyncio.Event,
        others: asyncio.Event,
        deadline: float,
        expiring: Sequence[tuple[int, ...]] | None,
    ) -> None:
        """Until ``topic`` grows (``ev``), ``others`` is set (acks, nacks), the loop's time
        reaches ``deadline``, the first in-flight message of ``expiring`` (a heap of
        (visible-at ms, ...)) is due, or ``RECHECK_S`` is over."""
        timeout_s = min(deadline - asyncio.get_running_loop().time(), RECHECK_S)
        if expiring:
            timeout_s = min(timeout_s, (expiring[0][0] - now_ms()) / 1000)
        name = topic.name
        self._waiting[name] = self._waiting.get(name, 0) + 1
        if name not in self._watchers:
            queues = topic.read_queue_nums if topic.readable else 0
            self._watchers[name] = asyncio.ensure_future(self._watch(name, queues))
        waits = [asyncio.ensure_future(ev.wait()), asyncio.ensure_future(others.wait())]
        try:
            await asyncio.wait(waits, timeout=max(timeout_s, 0.001),
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            for w in waits:
                w.cancel()
            self._waiting[name] -= 1

    async def _watch(self, topic: str, queues: int) -> None:
        try:
            for q in range(queues):  # an end seen by an earlier watcher is kept: if it is
                if (topic, q) not in self._ends:  # behind, the first look wakes (harmless)
                    self._ends[(topic, q)] = self.queues.max_offset(topic, q)
            while self._waiting.get(topic, 0) > 0:
                await asyncio.sleep(POLL_S)
                if self._grew(topic, queues):
                    ev = self._events.get(topic)
                    if ev is not None:
                        ev.set()
        except Exception:  # the waiters fall back on their own timeout
            log.exception("watching %s for new messages failed", topic)
        finally:
            self._watchers.pop(topic, None)

    def _grew(self, topic: str, queues: int) -> bool:
        grew = False
        for q in range(queues):
            end = self._ends.get((topic, q), 0)
            if self.queues.written(topic, q, end):
                self._ends[(topic, q)] = self.queues.max_offset(topic, q)
                grew = True
        return grew

    async def close(self) -> None:
        for task in list(self._watchers.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
