"""Pop-style consumption for consumer groups: receive (with long polling), ack, change the
invisible time, dead letters. The state is ``progress.QueueProgress`` per (group, topic,
queue) — a group's retry topic ``%RETRY%<group>_<topic>`` is one more such topic; see
``progress`` for what survives a restart and ``redelivery`` for what happens when a message's
invisible time is over.

A receive of topic T by a non-FIFO group G pops across every readable queue of T (the
request's queue id is ignored, as RocketMQ does) and queue 0 of ``%RETRY%G_T``: first it moves
messages whose invisible time is over to the retry topic (or ``%DLQ%G`` after their last
delivery), then hands out messages never handed out, read from the consume queues from the
group's pop cursor. A message of the retry topic is delivered as a message of T (same id,
body and properties; attempt = its ``RECONSUME_TIME`` + 1) with a receipt handle naming the
retry topic (``r:<queue>:<offset>:<version>``; T's are ``<queue>:<offset>:<version>``).
Messages whose tag does not match the filter are settled without being delivered.

A nack is a ChangeInvisibleDuration with the group's back-off step: the message stays in
flight until then, and is copied to the retry topic when that time is over.

FIFO groups (``consumeMessageOrderly`` in subscriptionGroup.json, or ``--fifo-group``): a
queue with a message in flight hands out nothing else, so the messages of one message group
(always one queue) are delivered one at a time, in order, the next only once the previous is
acknowledged or dead-lettered; one that expires comes back first, in place (attempt + 1).
"""

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from rmqstore.formats import commitlog
from rmqstore.formats import subscription_groups as sg
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.queue_files import QueueFiles
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.times import now_ms
from services.proxy import copies, deliver
from services.proxy.appender import Appender
from services.proxy.arrivals import Arrivals
from services.proxy.committed_offsets import CommittedOffsets
from services.proxy.group_stats import Report, observe
from services.proxy.progress import Flight, Key, ProgressFiles, QueueProgress
from services.proxy.queue_bounds import GONE
from services.proxy.receipts import handle, parse_handle
from services.proxy.record_reads import RecordReads
from services.proxy.redelivery import MOVING_MS, DeadLetterTrouble, Entry
from services.proxy.status import BusinessError

log = logging.getLogger(__name__)
MAX_BATCH = 32
OBSERVE_EVERY = 5  # flushes between two looks at every group's lag


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


class Consumption(CommittedOffsets):
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
        # makes a topic unless it exists (name, queues, perm): the writer's Topics service
        self.create_topic: Callable[[str, int, int], Awaitable[object]] | None = None
        self._made_topics: set[str] = set()
        self._copied_to: dict[str, bool] = {}  # retry topic -> may hold messages
        # (group, retry topic) -> the topic its messages are of: two groups may share one
        # (a on b_c and a_b on c both retry through %RETRY%a_b_c)
        self._shown_as: dict[tuple[str, str], str] = {}
        self.dead_letter_trouble: dict[str, DeadLetterTrouble] = {}  # by group
        # (group, topic, queue) -> offsets skipped since the start: their messages were gone
        self.skipped: dict[tuple[str, str, int], int] = {}
        self._skips = 0  # times anything was skipped (a receive that skipped looks again)
        self._corrected: set[tuple[str, str, int]] = set()  # beyond the queue's end, logged
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
            if self.config.start == "last" and not topic.startswith(copies.RETRY_PREFIX):
                start = self.queues.max_offset(topic, q)
            else:
                start = self.low_offset(topic, q)
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
            skips = self._skips
            out = await self._pop(g, topic, filt, batch, invisible_ms, renew_for)
            if out or loop.time() >= deadline:
                return out
            if self._skips != skips:  # moved past messages no longer stored: look again
                continue
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
        now = now_ms()
        nqueues = topic.read_queue_nums if topic.readable else 0
        queues = [self.queue(g.name, topic.name, q) for q in range(nqueues)]
        taken: list[Entry] = []  # a FIFO group's, handed out now
        if g.orderly:
            dead = self._pop_fifo(g, topic, queues, filt, batch, invisible_ms, now, taken)
            await self.move_or_retry_later(g, topic.name, dead, to_retry=False)
            parts = [(topic.name, taken)]
        else:  # (state topic, what was handed out of it): the topic's, its retry topic's
            parts = await self._pop_any(g, topic.name, queues, filt, batch, invisible_ms, now)
        if renew_for:
            until = now + self.config.renew_max_ms
            for name, entries in parts:
                renewing = self._renewing.setdefault((g.name, name), set())
                for q, o, f in entries:
                    f.renew_for, f.renew_until = renew_for, until
                    renewing.add((q, o))
        out: list[pb.Message] = []
        for i, (name, entries) in enumerate(parts):
            if not entries:
                continue
            try:
                out += await self._read(g, name, filt, entries, invisible_ms)
            except BusinessError:
                for later_name, later in parts[i + 1 :]:
                    self._undo(g.name, later_name, later)
                if out:
                    return out
                raise
        return out

    async def _pop_any(self, g: sg.GroupConfig, topic: str, queues: list[QueueProgress],
                       filt: deliver.TagFilter, batch: int, invisible_ms: int, now: int,
                       ) -> list[tuple[str, list[Entry]]]:  # fmt: skip
        """A non-FIFO group's pop: due messages of the topic and of its retry topic moved
        on (or, with no retry topic, handed out again), then new ones of both."""
        retry = self.retry_target(g.name, topic)
        sources = [(topic, q, p) for q, p in enumerate(queues)]
        taken: dict[str, list[Entry]] = {topic: []}
        if retry is not None:
            self._shown_as[(g.name, retry)] = topic
            taken[retry] = []
            rq = self.queue(g.name, retry, 0)  # its progress is kept (and shown) from the start
            if self._has_copies(retry):  # else nothing to read there (saves a look per poll)
                sources.append((retry, 0, rq))
        room = batch
        for name, entries in taken.items():
            key = (g.name, name)
            again, to_retry, dead = self._expired(g, key, now, room, in_place=True)
            for q, o, f in again:
                self._hand_out(key, q, o, f, invisible_ms, now)
            entries += again
            room -= len(again)
            await self.move_or_retry_later(g, name, to_retry, to_retry=True)
            await self.move_or_retry_later(g, name, dead, to_retry=False)
        first = next(self._rotation)
        for i in range(len(sources)):
            if room <= 0:
                break
            name, q, p = sources[(first + i) % len(sources)]
            entries = taken[name]
            before = len(entries)
            self._pop_new((g.name, name), name, q, p, filt, room, invisible_ms, now, entries)
            room -= len(entries) - before
        return list(taken.items())

    def _has_copies(self, retry: str) -> bool:
        """The retry topic may hold messages: this process copied some there, or its
        consume queue existed when first looked at."""
        has = self._copied_to.get(retry)
        if has is None:
            has = self._copied_to[retry] = self.queues.layout.queue_dir(retry, 0).is_dir()
        return has

    def _hand_out(self, key: Key, q: int, o: int, f: Flight, invisible_ms: int, now: int) -> None:
        group, topic = key
        shown = self._shown_as.get(key, topic)
        self.on_event(group, shown, "delivered", 1)
        if f.attempt > 0 or f.lost_track or shown != topic:  # a retry topic's: a redelivery
            self.on_event(group, shown, "redelivered", 1)
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
        if units and units[0].phy_offset < self.reads.files.min_offset():
            self.skip_gone(key, q, p)  # retention deleted their records: skipped
            units = self.queues.read(topic, q, p.next, want)
        if not units:
            if p.next and not self.queues.written(topic, q, p.next - 1):
                self.correct_end(key, q, p)  # the queue ends below the group (a cut)
                self.skip_gone(key, q, p)  # or its files were deleted (retention)
            elif p.next == 0 and self.queues.min_offset(topic, q) > 0:
                self.skip_gone(key, q, p)
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

    def _pop_fifo(self, g, topic, queues, filt, batch, invisible_ms, now, taken) -> list[Entry]:
        """One message per queue at a time: the next only once the previous is settled.
        What is due for the dead-letter topic."""
        key = (g.name, topic.name)
        dead: list[Entry] = []
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
                    f.visible_at = now + MOVING_MS
                    dead.append((q, o, f))
                    continue
                self._hand_out(key, q, o, f, invisible_ms, now)
                taken.append((q, o, f))
            else:
                self._pop_new(key, topic.name, q, p, filt, 1, invisible_ms, now, taken)
            if len(taken) >= batch:
                break
        return dead

    def _resolve(self, topic: str, q: int, o: int, f: Flight) -> None:
        units = self.queues.read(topic, q, o, 1)
        if not units:  # its consume-queue unit is gone: ``drop_gone`` settles it
            f.phy, f.size = GONE, 0
            return
        f.phy, f.size = units[0].phy_offset, units[0].size

    async def records(self, flights: list[Flight]) -> list[commitlog.Record]:
        return await self.reads.records(flights)

    async def present_records(self, group: str, topic: str, entries: list[Entry],
                              ) -> tuple[list[Entry], list[commitlog.Record]]:  # fmt: skip
        """The entries whose records are still stored, and those records: the others are
        skipped (``drop_gone``). A read that fails is tried once more after a fresh look at
        the commitlog's minimum and the queues' ends (retention or a cut since the last)."""
        for q, o, f in entries:
            if f.phy < 0:  # restored after a restart: looked up in the consume queue
                self._resolve(topic, q, o, f)
        entries = self.drop_gone(group, topic, entries, fresh=False)
        try:
            return entries, await self.records([f for _q, _o, f in entries])
        except BusinessError:
            entries = self.drop_gone(group, topic, entries, fresh=True)
            return entries, await self.records([f for _q, _o, f in entries])

    async def _read(
        self,
        g: sg.GroupConfig,
        topic: str,
        filt: deliver.TagFilter,
        taken: list[tuple[int, int, Flight]],
        invisible_ms: int,
    ) -> list[pb.Message]:
        try:
            taken, records = await self.present_records(g.name, topic, taken)
        except BusinessError:
            self._undo(g.name, topic, taken)
            raise
        # a retry topic's message is one of its topic
        shown = self._shown_as.get((g.name, topic), topic)
        retry = shown != topic
        out = []
        for (q, o, f), r in zip(taken, records, strict=True):
            if not filt.matches(r.tags) or (
                retry and r.property_map.get(copies.RETRY_TOPIC, shown) != shown
            ):  # filtered out, or a copy of another group sharing the retry topic's name
                self.settle(g.name, topic, q, o)
                continue
            if retry:  # deliveries before the copy count
                f.attempt = copies.deliveries(r, f.attempt)
            h = handle(q, o, f.version, retry)
            out.append(deliver.message(r, shown, h, f.attempt, invisible_ms))
        return out

    def _undo(self, group: str, topic: str, taken: list[Entry]) -> None:
        """Handed out but not delivered: visible again at once, same attempt."""
        for q, o, f in taken:
            if self._current(group, topic, q, o, f):
                f.attempt -= 1
                f.visible_at = 0
                self._schedule((group, topic), q, o, f)

    # settle -------------------------------------------------------------------------------

    def _flight(self, group: str, topic: str, receipt: str) -> tuple[str, int, int, Flight]:
        """(state topic, queue, offset, flight) a receipt handle of ``topic`` names."""
        retry, q, o, version = parse_handle(receipt)
        name = self.retry_target(group, topic) if retry else topic
        p = self.state.get((group, name), {}).get(q) if name is not None else None
        f = p.inflight.get(o) if p is not None else None
        if name is None or f is None or f.version != version:
            raise BusinessError(
                pb.INVALID_RECEIPT_HANDLE,
                f"receipt handle {receipt} of {topic}@{group} is stale (settled, changed or "
                "delivered again since)",
            )
        return name, q, o, f

    def settle(self, group: str, topic: str, q: int, o: int) -> None:
        p = self.state[(group, topic)][q]
        p.settle(o)
        self.dirty = True
        self.changed.set()

    def ack(self, group: str, topic: str, receipt: str) -> None:
        name, q, o, _f = self._flight(group, topic, receipt)
        self.settle(group, name, q, o)
        self.on_event(group, topic, "acked", 1)

    def change(self, group: str, topic: str, receipt: str, invisible_ms: int) -> str:
        """Visible again ``invisible_ms`` from now; the new receipt handle."""
        name, q, o, f = self._flight(group, topic, receipt)
        f.visible_at = now_ms() + invisible_ms
        f.version = next(self._versions)
        f.renew_for = ""  # the consumer decided: a nack's delay is not extended
        self._schedule((group, name), q, o, f)
        self.dirty = True
        if invisible_ms == 0:
            self.changed.set()
        return handle(q, o, f.version, name != topic)

    async def forward(self, group: str, topic: str, receipt: str) -> None:
        """ForwardMessageToDeadLetterQueue: to ``%DLQ%<group>`` and settled."""
        name, q, o, f = self._flight(group, topic, receipt)
        log.info("%s queue %d offset %d forwarded to the dead-letter topic by a consumer of %s",
                 name, q, o, group)  # fmt: skip
        await self.move(self.group(group), name, [(q, o, f)], to_retry=False)

    # reset -------------------------------------------------------------------------------

    # durability ---------------------------------------------------------------------------

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self.files.save(self.state, self.offsets)

    async def _flush_aside(self) -> None:
        """``flush`` with the files written in a thread: a fsync must not stall receives."""
        if self.dirty:
            self.dirty = False
            await asyncio.to_thread(self.files.write, self.files.render(self.state, self.offsets))

    def start(self, report: Report | None = None) -> None:
        self._flusher = asyncio.ensure_future(self._flush_loop(report))

    async def _flush_loop(self, report: Report | None) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(self.config.flush_interval_s)
            self.renew()
            try:
                await self.sweep()
            except Exception:  # the flushing must go on (a sweep is tried again next time)
                log.exception("moving due messages to the retry topics failed")
            try:
                await self._flush_aside()
            except OSError as e:
                self.dirty = True
                log.error("cannot write consumer progress: %s", e)
            ticks += 1
            if ticks == 1 or ticks % OBSERVE_EVERY == 0:
                try:
                    self.check_bounds()
                except OSError as e:
                    log.error("cannot check consumer groups against their queues: %s", e)
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
