"""Long polling's wake-ups for 4.x pulls (``services.remoting.pull``): the writer's dispatch
stream, followed while pulls are held (one stream for the whole broker, opened at the writer's
end when a pull is first held and closed ``LINGER_S`` after the last one ended, so a broker
that only takes sends costs the writer nothing), wakes the pulls held on a queue when a record
for it is appended. The stream asks the writer for each batch at once (no linger), and the
last ``TAIL_UNITS`` consume-queue units it carried for each queue are kept: a woken pull takes
its records from them while the consume-queue builder, a step behind, has not written them.
"""

import asyncio
import contextlib
import logging
from collections import deque
from itertools import islice

import grpc

from rmqstore.dispatch import goes_to_consume_queue
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc

log = logging.getLogger("rmqstore.remoting")
QUERY_TIMEOUT_S = 30.0
SUBSCRIBER = "remoting-pulls"  # the dispatch stream's subscriber name (no builder: no acks kept)
RESUBSCRIBE_S = 1.0  # after the dispatch stream failed
ACK_EVERY_S = 5.0  # how often the stream's position is acknowledged (the writer's lag metric)
LINGER_S = 60.0  # the dispatch stream stays open this long after the last held pull
TAIL_UNITS = 64  # a queue's last units kept from the stream (the builder is milliseconds behind)
MAX_TAILS = 2048  # queues whose last units are kept (the first kept goes first)

Unit = tuple[int, int, int, int]  # queue offset, commitlog offset, size, tags code


class Arrivals:
    """Wakes pulls held on a (topic, queue) when the writer appends a record for it."""

    def __init__(self, writer: commitlog_pb2_grpc.CommitLogStub) -> None:
        self.writer = writer
        self._events: dict[tuple[str, int], asyncio.Event] = {}
        self.arrived: dict[tuple[str, int], int] = {}  # queue -> one past the last offset seen
        # queue -> its last units from the stream now open (consecutive queue offsets)
        self.tails: dict[tuple[str, int], deque[Unit]] = {}
        self._follower: asyncio.Task | None = None
        self._tender: asyncio.Task | None = None
        self.streaming = False
        self.position = -1  # where the stream is (the next batch's offset)
        self.waiting = 0  # pulls held now
        self._idle_since = 0.0  # loop time the last held pull ended

    def event(self, topic: str, queue_id: int) -> asyncio.Event:
        """Set at the queue's next arrival: take it before the pull looks, so that a message
        stored between the look and the wait still wakes it."""
        key = (topic, queue_id)
        ev = self._events.get(key)
        if ev is None or ev.is_set():
            ev = self._events[key] = asyncio.Event()
        return ev

    def tail_end(self, topic: str, queue_id: int) -> int:
        """One past the queue's last unit the open stream carried (0: none)."""
        tail = self.tails.get((topic, queue_id))
        return tail[-1][0] + 1 if tail else 0

    def tail_start(self, topic: str, queue_id: int) -> int:
        """The queue's first unit kept from the stream (0: none)."""
        tail = self.tails.get((topic, queue_id))
        return tail[0][0] if tail else 0

    def knows(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the open stream carried units of the queue up to ``offset`` at least:
        then ``offset`` is in the queue or at its end, whatever its file holds yet."""
        tail = self.tails.get((topic, queue_id))  # (never empty when there)
        return tail is not None and tail[-1][0] + 1 >= offset

    def units_from(self, topic: str, queue_id: int, offset: int) -> list[tuple[int, int, int]]:
        """The queue's units from ``offset`` on as the stream carried them (commitlog
        offset, size, tags code); none when its tail does not hold ``offset``."""
        tail = self.tails.get((topic, queue_id))
        if not tail:
            return []
        at = offset - tail[0][0]
        if not 0 <= at < len(tail) or tail[at][0] != offset:
            return []
        return [(phy, size, code) for _, phy, size, code in islice(tail, at, None)]

    def hold(self) -> bool:
        """A pull is held: the stream is opened unless it is open. True when it was not
        streaming yet: what was stored just before it opened does not come through it, so
        the pull looks again a few times (``CATCH_UP_S``)."""
        self.waiting += 1
        if self._follower is None or self._follower.done():
            self._follower = asyncio.ensure_future(self._follow())
            return True
        return not self.streaming

    def release(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self._idle_since = asyncio.get_running_loop().time()

    def start(self) -> None:
        self._tender = asyncio.ensure_future(self._tend())

    async def close(self) -> None:
        for task in (self._tender, self._follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _tend(self) -> None:
        """Every ``ACK_EVERY_S``: acknowledge the stream's position when it moved, so the
        writer's lag for this subscriber stays true (its alerts watch every subscriber); close
        the stream ``LINGER_S`` after the last held pull."""
        acked = -1
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(ACK_EVERY_S)
            follower = self._follower
            idle = self.waiting == 0 and loop.time() - self._idle_since > LINGER_S
            if idle and follower is not None and not follower.done():
                follower.cancel()
                continue
            position = self.position
            if not self.streaming or position < 0 or position == acked:
                continue
            try:
                await self.writer.Ack(
                    commitlog_pb2.AckRequest(subscriber=SUBSCRIBER, durable_offset=position),
                    timeout=QUERY_TIMEOUT_S,
                )
                acked = position
            except grpc.aio.AioRpcError as e:
                log.debug("acknowledging the dispatch stream's position failed: %s", e.details())

    async def _follow(self) -> None:
        try:
            await self._follow_from_end()
        finally:
            self.streaming = False
            self.tails.clear()  # what comes next may not follow on

    async def _follow_from_end(self) -> None:
        position = -1
        while True:
            try:
                if position < 0:
                    offsets = await self.writer.GetOffsets(
                        commitlog_pb2.GetOffsetsRequest(), timeout=QUERY_TIMEOUT_S
                    )
                    position = offsets.max_offset
                position = await self._stream(position)
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                self.streaming = False
                if e.code() == grpc.StatusCode.OUT_OF_RANGE:
                    position = -1  # the commitlog was cut or trimmed: start at its end again
                    self.tails.clear()
                log.debug("dispatch stream for long polling ended: %s", e.details())
                self._wake_all()  # held pulls look again rather than sleep on a dead stream
                await asyncio.sleep(RESUBSCRIBE_S)

    async def _stream(self, position: int) -> int:
        call = self.writer.Subscribe(
            commitlog_pb2.SubscribeRequest(subscriber=SUBSCRIBER, from_offset=position,
                                           no_linger=True)  # fmt: skip
        )
        if position != self.position:  # not where the last stream ended: no longer next
            self.tails.clear()
        self.streaming = True
        self.position = position
        try:
            async for batch in call:
                self.took(batch)
                position = self.position
        finally:
            call.cancel()
        return position

    def took(self, batch: commitlog_pb2.DispatchBatch) -> None:
        """A batch of the stream: the queues' ends, their units kept, their pulls woken."""
        tails = self.tails
        for topic, q, o, phy, size, code, flag in zip(
            batch.topic, batch.queue_id, batch.queue_offset, batch.phy_offset, batch.size,
            batch.tags_code, batch.sys_flag, strict=False,
        ):  # fmt: skip
            key = (topic, q)
            if o + 1 > self.arrived.get(key, 0):
                self.arrived[key] = o + 1
            if goes_to_consume_queue(flag):
                tail = tails.get(key)
                if tail is None:
                    if len(tails) >= MAX_TAILS:
                        del tails[next(iter(tails))]
                    tail = tails[key] = deque(maxlen=TAIL_UNITS)
                elif tail[-1][0] + 1 != o:  # not the next (a cut, a rewrite): anew
                    tail.clear()
                tail.append((o, phy, size, code))
            ev = self._events.pop(key, None)
            if ev is not None:
                ev.set()
        self.position = batch.next_offset

    def _wake_all(self) -> None:
        for ev in self._events.values():
            ev.set()
        self._events.clear()
