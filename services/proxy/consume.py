"""Pop-style consumption for consumer groups: receive (with long polling), ack, change the
invisible time, dead letters. The state is ``progress.QueueProgress`` per (group, topic,
queue); see ``progress`` for what survives a restart.

A receive pops across every readable queue of the topic (the request's queue id is ignored,
as RocketMQ does): first messages whose invisible time is over (attempt + 1; a message that
already had ``max_attempts`` deliveries goes to ``%DLQ%<group>`` instead), then messages never
handed out, read from the consume queues from the group's pop cursor. Messages whose tag does
not match the filter are settled without being delivered.

FIFO groups (``consumeMessageOrderly`` in subscriptionGroup.json, or ``--fifo-group``): a
queue with a message in flight hands out nothing else, so the messages of one message group
(always one queue) are delivered one at a time, in order, the next only once the previous is
acknowledged or dead-lettered; one that expires comes back first, in place (attempt + 1).

Retries are redeliveries in place with the delay the client asks for (a nack is a
ChangeInvisibleDuration with the group's back-off step): no retry topic copy is written.
"""

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rmqstore.formats import commitlog
from rmqstore.formats import subscription_groups as sg
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.times import now_ms
from services.proxy import deliver
from services.proxy.appender import Appender
from services.proxy.arrivals import Arrivals
from services.proxy.dead_letters import DLQ_PREFIX, dead_letter
from services.proxy.group_stats import Report, observe
from services.proxy.progress import Flight, Key, ProgressFiles, QueueProgress
from services.proxy.queue_files import QueueFiles
from services.proxy.record_reads import RecordReads
from services.proxy.status import BusinessError

log = logging.getLogger(__name__)
MAX_BATCH = 32
OBSERVE_EVERY = 5  # flushes between two looks at every group's lag
DLQ_RETRY_MS = 5_000  # a dead letter the store did not take is tried again after this


def handle(queue: int, offset: int, version: int) -> str:
    return f"{queue}:{offset}:{version}"


def parse_handle(text: str) -> tuple[int, int, int]:
    try:
        q, o, v = (int(x) for x in text.split(":"))
    except ValueError:
        raise BusinessError(
            pb.INVALID_RECEIPT_HANDLE, f"receipt handle {text!r} is malformed"
        ) from None
    return q, o, v


@dataclass
class ConsumeConfig:
    start: str = (
        "first"  # a new group starts at each queue's first ("first") or next ("last") message
    )
    default_retry_max_times: int = sg.DEFAULT_RETRY_MAX_TIMES
    fifo_groups: tuple[str, ...] = ()
    flush_interval_s: float = 1.0
    auto_renew_ms: int = 60_000  # a PushConsumer's invisible time (it sends none)
    renew_before_ms: int = 10_000  # renewed when less than this is left
    renew_max_ms: int = 3 * 3600 * 1000  # renewed for at most this long


class Consumption:
    def __init__(
        self,
        store: Path,
        appender: Appender,
        config: ConsumeConfig,
        on_event: Callable[[str, str, str, int], None] | None = None,
    ) -> None:
        self.config = config
        self.appender = appender
        self.files = ProgressFiles(store)
        self.queues = QueueFiles(store)
        self.reads, self.arrivals = RecordReads(store, appender), Arrivals(self.queues)
        self.state, self.offsets = self.files.load()
        self.group_table = self.files.load_groups()
        self._expiry: dict[Key, list[tuple[int, int, int, int]]] = {}  # heap per (group, topic)
        self._versions = itertools.count(time.time_ns() // 1000)  # above any earlier run's
        self._rotation = itertools.count()
        self.dirty = False
        self.changed = asyncio.Event()
        self.on_event = on_event or (lambda group, topic, what, n: None)
        self._flusher: asyncio.Task | None = None
        self._renewing: dict[Key, set[tuple[int, int]]] = {}  # auto-renewed flights
        self.alive: Callable[[str], bool] = lambda client_id: False  # stream open?
        restored = sum(len(p.inflight) for qs in self.state.values() for p in qs.values())
        if restored:
            log.info("%d messages in flight before the restart will be delivered again", restored)
        self._number_restored()

    def _number_restored(self) -> None:
        """Flights restored without a version (offsets handed out after the last flush)
        get one; each (group, topic)'s expiry heap is built."""
        for key, queues in self.state.items():
            heap = []
            for q, p in queues.items():
                for o, f in p.inflight.items():
                    if f.version == 0:
                        f.version = next(self._versions)
                    heap.append((f.visible_at, q, o, f.version))
            heapq.heapify(heap)
            self._expiry[key] = heap

    # groups -----------------------------------------------------------------------------

    def group(self, name: str) -> sg.GroupConfig:
        g = self.group_table.groups.get(name)
        if g is None:
            g = sg.GroupConfig(
                name,
                retry_max_times=self.config.default_retry_max_times,
                orderly=name in self.config.fifo_groups,
            )
            self.group_table.groups[name] = g
            self.group_table.counter += 1
            self.group_table.timestamp = now_ms()
            self.files.save_groups(self.group_table)
        return g

    def queue(self, group: str, topic: str, q: int) -> QueueProgress:
        queues = self.state.setdefault((group, topic), {})
        p = queues.get(q)
        if p is None:
            if self.config.start == "last":
                start = self.queues.max_offset(topic, q)
            else:
                start = self.queues.min_offset(topic, q)
            p = queues[q] = QueueProgress(committed=start, next=start)
            self.dirty = True
        return p

    # receive ------------------------------------------------------------------------------

    async def receive(
        self,
        group: str,
        topic: TopicConfig,
        filt: deliver.TagFilter,
        batch: int,
        invisible_ms: int,
        wait_s: float,
        renew_for: str = "",
    ) -> list[pb.Message]:
        """Up to ``batch`` messages, waiting up to ``wait_s`` for the first. With
        ``renew_for`` (a PushConsumer's client id, ``auto_renew``) their invisible time is
        extended while that client's Telemetry stream is open, up to ``renew_max_ms``."""
        g = self.group(group)
        if not g.consume_enable:
            raise BusinessError(pb.FORBIDDEN, f"consumer group {group} may not consume")
        batch = max(1, min(batch if batch > 0 else MAX_BATCH, MAX_BATCH))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_s, 0.0)
        while True:
            arrived = self.arrivals.event(topic.name)  # taken before the look: none missed
            self.changed.clear()
            out = await self._pop(g, topic, filt, batch, invisible_ms, renew_for)
            if out or loop.time() >= deadline:
                return out
            expiring = self._expiry.get((group, topic.name))  # woken by its next expiry too
            await self.arrivals.wait(topic, arrived, self.changed, deadline, expiring)

    async def _pop(
        self,
        g: sg.GroupConfig,
        topic: TopicConfig,
        filt: deliver.TagFilter,
        batch: int,
        invisible_ms: int,
        renew_for: str = "",
    ) -> list[pb.Message]:
        key = (g.name, topic.name)
        now = now_ms()
        taken: list[tuple[int, int, Flight]] = []  # (queue, offset, flight), handed out now
        dead: list[tuple[int, int, Flight]] = []
        nqueues = topic.read_queue_nums if topic.readable else 0
        queues = [self.queue(g.name, topic.name, q) for q in range(nqueues)]
        if g.orderly:
            self._pop_fifo(g, topic, queues, filt, batch, invisible_ms, now, taken, dead)
        else:
            self._pop_expired(g, key, queues, batch, invisible_ms, now, taken, dead)
            if len(taken) < batch:
                first = next(self._rotation)
                for i in range(nqueues):
                    q = (first + i) % nqueues
                    self._pop_new(
                        key,
                        topic.name,
                        q,
                        queues[q],
                        filt,
                        batch - len(taken),
                        invisible_ms,
                        now,
                        taken,
                    )
                    if len(taken) >= batch:
                        break
        if dead:
            try:
                await self._dead_letters(g, topic.name, dead)
            except BusinessError as e:  # the store refused or is away: try again soon
                log.warning("cannot move %d messages to %s%s: %s", len(dead), DLQ_PREFIX, g.name, e)
                for q, o, f in dead:
                    f.visible_at = now + DLQ_RETRY_MS
                    self._schedule(key, q, o, f)
        if not taken:
            return []
        if renew_for:
            until = now + self.config.renew_max_ms
            renewing = self._renewing.setdefault(key, set())
            for q, o, f in taken:
                f.renew_for, f.renew_until = renew_for, until
                renewing.add((q, o))
        return await self._read(g, topic.name, filt, taken, invisible_ms)

    def _pop_expired(self, g, key, queues, batch, invisible_ms, now, taken, dead) -> None:
        heap = self._expiry.get(key)
        while heap and heap[0][0] <= now and len(taken) < batch:
            _at, q, o, version = heapq.heappop(heap)
            if q >= len(queues):
                continue
            f = queues[q].inflight.get(o)
            if f is None or f.version != version or f.visible_at > now:
                continue  # settled, changed or renewed since
            if f.attempt >= g.max_attempts:
                dead.append((q, o, f))
                f.visible_at = now + 3_600_000  # being moved: not handed out meanwhile
                continue
            self._hand_out(key, q, o, f, invisible_ms, now)
            taken.append((q, o, f))

    def _schedule(self, key: Key, q: int, o: int, f: Flight) -> None:
        """Look at this flight again when its invisible time is over."""
        heapq.heappush(self._expiry.setdefault(key, []), (f.visible_at, q, o, f.version))

    def renew(self) -> int:
        """Extend the invisible time of auto-renewed messages whose time is nearly over and
        whose consumer is still connected; how many were extended. A renewal keeps the
        receipt handle valid (same version)."""
        now = now_ms()
        renewed = 0
        for key, entries in self._renewing.items():
            queues = self.state.get(key, {})
            for q, o in list(entries):
                p = queues.get(q)
                f = p.inflight.get(o) if p is not None else None
                if f is None or not f.renew_for or now >= f.renew_until:
                    entries.discard((q, o))
                    continue
                if f.visible_at - now > self.config.renew_before_ms or not self.alive(f.renew_for):
                    continue
                f.visible_at = now + self.config.auto_renew_ms
                self._schedule(key, q, o, f)
                self.dirty = True
                renewed += 1
        return renewed

    def _hand_out(self, key: Key, q: int, o: int, f: Flight, invisible_ms: int, now: int) -> None:
        self.on_event(key[0], key[1], "delivered", 1)
        if f.attempt > 0 or f.lost_track:
            self.on_event(key[0], key[1], "redelivered", 1)
            f.lost_track = False
        f.attempt += 1
        f.renew_for = ""
        f.visible_at = now + invisible_ms
        f.version = next(self._versions)
        self._schedule(key, q, o, f)
        self.dirty = True

    def _pop_new(
        self,
        key: Key,
        topic: str,
        q: int,
        p: QueueProgress,
        filt: deliver.TagFilter,
        want: int,
        invisible_ms: int,
        now: int,
        taken: list,
    ) -> None:
        units = self.queues.read(topic, q, p.next, want)
        if not units:
            low = self.queues.min_offset(topic, q) if p.next == p.committed else 0
            if low > p.next:  # the queue's start was deleted (retention): skip what is gone
                log.info(
                    "%s@%s queue %d: offsets %d..%d are gone; skipped",
                    topic,
                    key[0],
                    q,
                    p.next,
                    low,
                )
                p.reset(low)
                self.dirty = True
            return
        for u in units:
            p.next = u.queue_offset + 1
            if not filt.maybe(u.tags_code):
                p.settle(u.queue_offset)
                continue
            f = Flight(0, 0, 0, u.phy_offset, u.size)
            p.inflight[u.queue_offset] = f
            self._hand_out(key, q, u.queue_offset, f, invisible_ms, now)
            taken.append((q, u.queue_offset, f))
        self.dirty = True

    def _pop_fifo(self, g, topic, queues, filt, batch, invisible_ms, now, taken, dead) -> None:
        """One message per queue at a time: the next only once the previous is settled."""
        key = (g.name, topic.name)
        first = next(self._rotation)
        for i in range(len(queues)):
            q = (first + i) % len(queues)
            p = queues[q]
            if p.inflight:
                o = min(p.inflight)
                f = p.inflight[o]
                if f.visible_at > now:
                    continue  # locked: its message is being consumed
                if f.attempt >= g.max_attempts:  # expired for the last time
                    f.visible_at = now + 3_600_000
                    dead.append((q, o, f))
                    continue
                self._hand_out(key, q, o, f, invisible_ms, now)
                taken.append((q, o, f))
            else:
                self._pop_new(key, topic.name, q, p, filt, 1, invisible_ms, now, taken)
            if len(taken) >= batch:
                return

    def _resolve(self, topic: str, q: int, o: int, f: Flight) -> None:
        units = self.queues.read(topic, q, o, 1)
        if not units:
            raise BusinessError(pb.INTERNAL_SERVER_ERROR, f"{topic} queue {q} offset {o} is gone")
        f.phy, f.size = units[0].phy_offset, units[0].size

    async def records(self, flights: list[Flight]) -> list[commitlog.Record]:
        return await self.reads.records(flights)

    async def _read(
        self,
        g: sg.GroupConfig,
        topic: str,
        filt: deliver.TagFilter,
        taken: list[tuple[int, int, Flight]],
        invisible_ms: int,
    ) -> list[pb.Message]:
        try:
            for q, o, f in taken:
                if f.phy < 0:  # restored after a restart: looked up in the consume queue
                    self._resolve(topic, q, o, f)
            records = await self.records([f for _q, _o, f in taken])
        except BusinessError:
            for q, o, f in taken:  # not delivered: visible again at once, same attempt
                if self._current(g.name, topic, q, o, f):
                    f.attempt -= 1
                    f.visible_at = 0
                    self._schedule((g.name, topic), q, o, f)
            raise
        out = []
        for (q, o, f), r in zip(taken, records, strict=True):
            if not filt.matches(r.tags):
                self.settle(g.name, topic, q, o)
                continue
            out.append(deliver.message(r, topic, handle(q, o, f.version), f.attempt, invisible_ms))
        return out

    def _current(self, group: str, topic: str, q: int, o: int, f: Flight) -> bool:
        p = self.state.get((group, topic), {}).get(q)
        return p is not None and p.inflight.get(o) is f

    # settle -------------------------------------------------------------------------------

    def _flight(self, group: str, topic: str, receipt: str) -> tuple[QueueProgress, int, Flight]:
        q, o, version = parse_handle(receipt)
        p = self.state.get((group, topic), {}).get(q)
        f = p.inflight.get(o) if p is not None else None
        if p is None or f is None or f.version != version:
            raise BusinessError(
                pb.INVALID_RECEIPT_HANDLE,
                f"receipt handle {receipt} of {topic}@{group} is stale (settled, changed or "
                "delivered again since)",
            )
        return p, o, f

    def settle(self, group: str, topic: str, q: int, o: int) -> None:
        p = self.state[(group, topic)][q]
        p.settle(o)
        self.dirty = True
        self.changed.set()

    def ack(self, group: str, topic: str, receipt: str) -> None:
        p, o, _f = self._flight(group, topic, receipt)
        q = parse_handle(receipt)[0]
        self.settle(group, topic, q, o)
        self.on_event(group, topic, "acked", 1)

    def change(self, group: str, topic: str, receipt: str, invisible_ms: int) -> str:
        """Visible again ``invisible_ms`` from now; the new receipt handle."""
        _p, o, f = self._flight(group, topic, receipt)
        q = parse_handle(receipt)[0]
        f.visible_at = now_ms() + invisible_ms
        f.version = next(self._versions)
        f.renew_for = ""  # the consumer decided: a nack's delay is not extended
        self._schedule((group, topic), q, o, f)
        self.dirty = True
        if invisible_ms == 0:
            self.changed.set()
        return handle(q, o, f.version)

    async def forward(self, group: str, topic: str, receipt: str) -> None:
        """ForwardMessageToDeadLetterQueue: to ``%DLQ%<group>`` and settled."""
        _p, o, f = self._flight(group, topic, receipt)
        q = parse_handle(receipt)[0]
        log.info("%s queue %d offset %d forwarded to the dead-letter topic by a consumer of %s",
                 topic, q, o, group)  # fmt: skip
        await self._dead_letters(self.group(group), topic, [(q, o, f)])

    async def _dead_letters(
        self, g: sg.GroupConfig, topic: str, dead: list[tuple[int, int, Flight]]
    ) -> None:
        by_queue: dict[int, list[tuple[int, Flight]]] = {}
        for q, o, f in dead:
            by_queue.setdefault(q, []).append((o, f))
        records: list[tuple[int, int, commitlog.Record, int]] = []
        for q, entries in by_queue.items():
            for o, f in entries:
                if f.phy < 0:
                    self._resolve(topic, q, o, f)
            flights = [f for _o, f in entries]
            for (o, f), r in zip(entries, await self.records(flights), strict=True):
                records.append((q, o, r, f.attempt))
        await self.appender.put(
            [dead_letter(g.name, topic, r, attempts) for _q, _o, r, attempts in records]
        )
        for q, o, r, _a in records:
            self.settle(g.name, topic, q, o)
            log.info("message %s of %s moved to %s%s", r.uniq_key, topic, DLQ_PREFIX, g.name)
        self.on_event(g.name, topic, "dead_lettered", len(records))

    # reset -------------------------------------------------------------------------------

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Start the group again at these offsets (queue -> offset): in-flight messages of
        those queues are forgotten (their receipt handles become stale)."""
        for q, o in offsets.items():
            self.queue(group, topic, q).reset(o)
        self._expiry.pop((group, topic), None)
        self._number_restored()
        self.dirty = True
        self.flush()

    # durability ---------------------------------------------------------------------------

    def flush(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        self.files.save(self.state, self.offsets)

    def start(self, report: Report | None = None) -> None:
        self._flusher = asyncio.ensure_future(self._flush_loop(report))

    async def _flush_loop(self, report: Report | None) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(self.config.flush_interval_s)
            self.renew()
            try:
                self.flush()
            except OSError as e:
                self.dirty = True
                log.error("cannot write consumer progress: %s", e)
            ticks += 1
            if report is not None and ticks % OBSERVE_EVERY == 0:
                try:
                    await observe(self, report)
                except Exception:  # metrics must never stop the flushing
                    log.exception("consumer group metrics failed")

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        await self.arrivals.close()
        self.flush()
