"""PULL_MESSAGE (``spec/rocketmq-remoting.md`` §3.3): a 4.x consumer's pull, with the commit
piggyback (sysFlag 0x1), tag subscriptions and long polling (0x2).

What a pull finds (RocketMQ's store statuses, tag codes filtered, RocketMQ's batch limits) is
read from the store's consume-queue and commitlog files (``pull_reads``); the body is those
records exactly as the commit log holds them. A pull that finds nothing new (PULL_NOT_FOUND)
with long polling allowed is held until a message for its queue is stored or
``suspendTimeoutMillis`` passes: ``pull_arrivals.Arrivals`` wakes the pulls held on a queue
when the writer appends a record for it; a woken pull waits for the queue's unit to be
written (its builder follows the same stream a step behind), looking at that one unit after
short pauses. A pull that needs no wait (the topic's configuration cached, every record in
the files, nothing to hold) is answered at once; the others run as their own task, so held
pulls never hold up a connection's other requests. The commit piggyback is handed to
``GroupOffsets.commit_later`` and never waited for.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from rmqstore.formats import remoting as R
from rmqstore.formats.topics_json import PERM_READ
from rmqstore.remoting_net import Connection
from rmqstore.v1 import commitlog_pb2_grpc
from services.query.pull import TagFilter
from services.remoting import topics as T
from services.remoting.clients import Clients
from services.remoting.offsets import GroupOffsets
from services.remoting.pull_arrivals import Arrivals
from services.remoting.pull_reads import Found, PullReads

RC = R.ResponseCode
# after a wake-up the consume queue may not hold the new unit yet (its builder is a step
# behind the writer's dispatch): the pull looks at that unit (one pread) after each of these
# pauses until it is written
CATCH_UP_S = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.015, 0.03, 0.05, 0.1, 0.2)
# when the stream was not open yet: what was stored between the pull's look and the stream's
# start comes only through the consume queue (a builder later than this costs a delay: the
# pull's timeout, never a loss)
FRESH_CATCH_UP_S = (*CATCH_UP_S, 0.5, 1.0)
MAX_SUSPEND_S = 60.0
POSITION_TTL_S = 120.0
MAX_POSITIONS = 100_000  # queues the lag metric follows at most
MAX_FILTERS = 10_000  # subscription expressions kept parsed

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MORE_THAN_ONE = ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY")
NOT_FOUND = ("OFFSET_OVERFLOW_ONE", "OFFSET_FOUND_NULL")
RETRY_NOW = ("NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING")
EMPTY = ("NO_MESSAGE_IN_QUEUE", "NO_MATCHED_LOGIC_QUEUE")
# at or beyond the consume-queue file's end (or no file yet), which the stream may pass
BEYOND_FILE = ("OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY", *EMPTY)


def status_code(status: str, offset: int) -> int:
    """A pull status (the query service's PullStatus names) -> the answer's code (4.9.8's
    PullMessageProcessor)."""
    if status == "FOUND":
        return RC.SUCCESS
    if status in NOT_FOUND:
        return RC.PULL_NOT_FOUND
    if status in RETRY_NOW:
        return RC.PULL_RETRY_IMMEDIATELY
    if status in EMPTY:  # a queue with nothing: moved unless the consumer is at 0 already
        return RC.PULL_NOT_FOUND if offset == 0 else RC.PULL_OFFSET_MOVED
    return RC.PULL_OFFSET_MOVED  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY


async def _first(a: asyncio.Event, b: asyncio.Event, timeout: float) -> None:
    """Until ``a`` or ``b`` is set, or ``timeout`` seconds."""
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


@dataclass
class PullHeader:
    group: str
    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    sys_flag: int
    commit_offset: int
    suspend_s: float
    subscription: str | None
    expression_type: str


def parse_header(req: R.Command) -> PullHeader:
    ext = req.ext
    if ext is not None:  # every field there and a number where it must be: read at once
        try:
            group, topic, get = ext["consumerGroup"], ext["topic"], ext.get
            if group and topic:
                return PullHeader(
                    group, topic, int(ext["queueId"]), int(ext["queueOffset"]),
                    int(get("maxMsgNums", 32)), int(get("sysFlag", 0)),
                    int(get("commitOffset", 0)),
                    min(max(int(get("suspendTimeoutMillis", 0)), 0) / 1000, MAX_SUSPEND_S),
                    get("subscription"), get("expressionType") or "TAG",
                )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            pass
    return _checked_header(req)


def _checked_header(req: R.Command) -> PullHeader:
    """``parse_header`` field by field: the error names the field missing or not a number."""
    group, topic = req.field("consumerGroup"), req.field("topic")
    if not group or not topic:
        raise ValueError("the custom field <consumerGroup> or <topic> is null")
    return PullHeader(
        group, topic, req.number("queueId"), req.number("queueOffset"),
        req.number("maxMsgNums", 32),
        req.number("sysFlag", 0), req.number("commitOffset", 0),
        min(max(req.number("suspendTimeoutMillis", 0), 0) / 1000, MAX_SUSPEND_S),
        req.field("subscription"), req.field("expressionType", "TAG") or "TAG",
    )  # fmt: skip


class Puller:
    """PULL_MESSAGE, and GET_CONSUMER_LIST_BY_GROUP as the rebalance of a pulling consumer
    needs it (its ids from the heartbeats)."""

    def __init__(
        self,
        topics: T.Topics,
        store: Path,
        writer: grpc.aio.Channel,
        clients: Clients,
        offsets: GroupOffsets,
        on_pull: Callable[[str, int], None] = lambda group, code: None,
    ) -> None:
        self.topics = topics
        self.writer = commitlog_pb2_grpc.CommitLogStub(writer)
        self.reads = PullReads(store, self.writer)
        self.clients = clients
        self.offsets = offsets
        self.arrivals = Arrivals(self.writer)
        self.on_pull = on_pull
        self.suspended = 0  # pulls held right now
        self.pulled = 0  # messages handed out
        # (group, topic, queue) -> (offset pulled from, queue's end, when): the lag metric
        self.positions: dict[tuple[str, str, int], tuple[int, int, float]] = {}
        self._filters: dict[str, TagFilter] = {}  # expression -> parsed

    def lag_by_group(self) -> dict[tuple[str, str], int]:
        """Per (group, topic): the queue ends minus the offsets pulled from, over the queues
        pulled within ``POSITION_TTL_S``."""
        limit = time.monotonic() - POSITION_TTL_S
        out: dict[tuple[str, str], int] = {}
        for key, (offset, end, when) in list(self.positions.items()):
            if when < limit:
                del self.positions[key]
                continue
            out[key[:2]] = out.get(key[:2], 0) + max(0, end - offset)
        return out

    def commit_outcomes(self) -> dict[str, int]:
        """The consumers' offset commits passed on to the proxy, by outcome."""
        o = self.offsets
        return {"applied": o.commits, "refused": o.refused, "lost": o.lost}

    def start(self) -> None:
        self.arrivals.start()

    async def close(self) -> None:
        await self.arrivals.close()

    # --- PULL_MESSAGE ----------------------------------------------------------------------

    def subscription(self, h: PullHeader) -> str | None:
        """The tag expression to filter by: the header's (sysFlag 0x4), else the one the
        group's heartbeats subscribed to the topic (None: no such subscription)."""
        if h.sys_flag & FLAG_SUBSCRIPTION and h.subscription is not None:
            return h.subscription
        for m in self.clients.consumers.get(h.group, {}).values():
            sub = m.subscriptions.get(h.topic)
            if sub is not None:
                return str(sub.get("subString") or "*")
        return None

    def pull(self, conn: Connection, req: R.Command) -> R.Command | Awaitable[R.Command]:
        """The answer at once when it needs no wait (the topic's configuration cached, the
        commitlog's end known and every record in the files, and not a pull to hold), else
        the coroutine that makes it."""
        h = parse_header(req)
        answer = self._now(req, h)
        if answer is None:
            return self._later(conn, req, h)
        self._answered(h, answer)
        return answer

    async def _later(self, conn: Connection, req: R.Command, h: PullHeader) -> R.Command:
        answer = await self._pull(req, h, conn.closed)
        self._answered(h, answer)
        return answer

    def _answered(self, h: PullHeader, answer: R.Command) -> None:
        self.on_pull(h.group, answer.code)
        end = None if answer.ext is None else answer.ext.get("maxOffset")
        if end is not None:
            self.positions[(h.group, h.topic, h.queue_id)] = (h.offset, int(end), time.monotonic())
            if len(self.positions) > MAX_POSITIONS:
                self.lag_by_group()  # drops the stale ones
                while len(self.positions) > MAX_POSITIONS:  # then the first followed
                    del self.positions[next(iter(self.positions))]

    def _now(self, req: R.Command, h: PullHeader) -> R.Command | None:
        config = self.topics.cached(h.topic)
        if config is None:
            return None
        expression = self._admitted(req, h, config)
        if not isinstance(expression, str):
            return expression  # refused
        self._commit(h)
        offset, count = max(h.offset, 0), max(1, min(h.max_msgs, 1024))
        found = self.reads.pull_now(h.topic, h.queue_id, offset, count, self._tags(expression))
        if found is None:
            return None
        if found.status in BEYOND_FILE and self.arrivals.knows(h.topic, h.queue_id, offset):
            return None  # stored, not in the consume queue yet: from the stream's units
        answer = self._answer(req, h, found)
        if answer.code == RC.PULL_NOT_FOUND and h.sys_flag & FLAG_SUSPEND and h.suspend_s > 0:
            return None  # held: the coroutine looks again and waits
        return answer

    def _commit(self, h: PullHeader) -> None:
        """The commit piggyback of an admitted pull, passed on without waiting (once: not
        again when a pull not answered at once looks again)."""
        if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
            self.offsets.commit_later(h.group, h.topic, h.queue_id, h.commit_offset)
            h.commit_offset = -1

    def _tags(self, expression: str) -> TagFilter:
        tags = self._filters.get(expression)
        if tags is None:
            if len(self._filters) >= MAX_FILTERS:
                self._filters.clear()
            tags = self._filters[expression] = TagFilter.parse(expression)
        return tags

    def _admitted(self, req: R.Command, h: PullHeader, config: T.TopicConfig | None
                  ) -> R.Command | str:  # fmt: skip
        """The tag expression to filter by, or the answer refusing the pull (no such topic,
        no permission, a queue outside the topic, SQL92, no subscription)."""
        if config is None:
            return R.response_to(
                req, RC.TOPIC_NOT_EXIST,
                remark=f"topic[{h.topic}] not exist, apply first please!",
            )  # fmt: skip
        if not config.perm & PERM_READ:
            return R.response_to(
                req, RC.NO_PERMISSION, remark=f"the topic[{h.topic}] pulling message is forbidden"
            )
        if not 0 <= h.queue_id < config.read_queue_nums:
            return R.response_to(
                req, RC.SYSTEM_ERROR,
                remark=f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] consumer:[{h.group}]",
            )  # fmt: skip
        if h.expression_type.upper() != "TAG":
            return R.response_to(
                req, RC.SYSTEM_ERROR,
                remark="The broker does not support consumer to filter message by SQL92",
            )  # fmt: skip
        expression = self.subscription(h)
        if expression is None:
            return R.response_to(
                req, RC.SUBSCRIPTION_NOT_EXIST,
                remark=f"the consumer's subscription not exist, group: {h.group}",
            )  # fmt: skip
        return expression

    async def _pull(self, req: R.Command, h: PullHeader, gone: asyncio.Event) -> R.Command:
        expression = self._admitted(req, h, await self.topics.get(h.topic))
        if not isinstance(expression, str):
            return expression  # refused
        self._commit(h)
        tags = self._tags(expression)
        hold = h.sys_flag & FLAG_SUSPEND and h.suspend_s > 0
        deadline = asyncio.get_running_loop().time() + h.suspend_s
        suspended = False
        caught = 0  # the arrival last waited for by catching up (once each)
        try:
            while True:
                ev = self.arrivals.event(h.topic, h.queue_id)
                answer, found_end = await self._look(req, h, tags)
                if answer.code != RC.PULL_NOT_FOUND or not hold:
                    return answer
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0 or gone.is_set():  # over, or no one left to answer
                    return answer
                if not suspended:
                    suspended = True
                    self.suspended += 1
                    if self.arrivals.hold():  # the stream was not open: look again a while
                        await self._catch_up(h, found_end, deadline, FRESH_CATCH_UP_S)
                        continue
                arrived = self.arrivals.arrived.get((h.topic, h.queue_id), 0)
                if arrived > found_end and arrived != caught:  # stored already, not yet
                    caught = arrived  # in the consume queue (the builder is a step behind)
                    await self._catch_up(h, found_end, deadline)
                    continue
                await _first(ev, gone, left)
        finally:
            if suspended:
                self.suspended -= 1
                self.arrivals.release()

    async def _catch_up(
        self, h: PullHeader, end: int, deadline: float, pauses: tuple[float, ...] = CATCH_UP_S
    ) -> None:
        """Wait until the queue's unit at ``end`` is written (or a while)."""
        loop = asyncio.get_running_loop()
        for pause in pauses:
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            if loop.time() >= deadline or self.reads.written(h.topic, h.queue_id, end):
                return

    async def _look(self, req: R.Command, h: PullHeader, tags: TagFilter
                    ) -> tuple[R.Command, int]:  # fmt: skip
        """One pull at the store: the answer and the queue's end it saw."""
        offset, count = max(h.offset, 0), max(1, min(h.max_msgs, 1024))
        found = await self.reads.pull(h.topic, h.queue_id, offset, count, tags)
        end = found.max_offset
        if found.status in BEYOND_FILE and self.arrivals.knows(h.topic, h.queue_id, offset):
            # stored, but the builder has not written the units yet: the stream's, else
            # nothing yet (never "offset moved": the consumer is right)
            units = self.arrivals.units_from(h.topic, h.queue_id, offset)
            tail_end = self.arrivals.tail_end(h.topic, h.queue_id)
            if units:
                found = await self.reads.pull_units(units, offset, count, tags,
                                                    found.min_offset, tail_end)  # fmt: skip
            else:
                found = Found("OFFSET_OVERFLOW_ONE", offset, found.min_offset, offset)
            if offset >= self.arrivals.tail_start(h.topic, h.queue_id):
                end = tail_end  # what arrives next comes through the stream: no file to wait for
        return self._answer(req, h, found), end

    def _answer(self, req: R.Command, h: PullHeader, found: Found) -> R.Command:
        records: Sequence[bytes | memoryview] = ()
        if found.status == "FOUND":
            code: int = RC.SUCCESS
            records = found.records  # joined into the frame as it is written
            self.pulled += found.count
        else:
            code = status_code(found.status, h.offset)
        ext = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(found.next_offset),
            "minOffset": str(found.min_offset),
            "maxOffset": str(found.max_offset),
        }
        answer = R.response_to(req, code, ext=ext, remark=found.status)
        answer.pieces = records
        return answer
