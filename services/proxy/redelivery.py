"""What happens to a message whose invisible time is over (mixed into
``consume.Consumption``).

Non-FIFO groups retry through RocketMQ's retry topics: a message delivered and neither
acknowledged nor renewed in time is copied to ``%RETRY%<group>_<topic>`` queue 0
(``copies.retry_copy``: ``RECONSUME_TIME`` = deliveries so far), and only once the writer has
taken the copy is the original settled, so the group's committed offset moves on. The copy
is delivered later as a message of the original topic (same id, attempt + 1). A message that
already had ``max_attempts`` deliveries goes to ``%DLQ%<group>`` instead. Both happen when a
receive finds the message due, or at the latest at the next ``sweep`` (the flush loop's,
every ``flush_interval``), so they happen with no one receiving.

Crash safety: copy, then settle. A crash between the two leaves the original in flight (it
is copied again: a duplicate retry, never a loss); a copy the writer refused keeps the
original in flight, tried again ``MOVE_RETRY_MS`` later.

FIFO groups (and a group whose retry topic name would not be a valid topic) redeliver in
place: the original offset is handed out again, attempt + 1. So does a message handed out
after the last flush before a crash (its first known delivery is then a redelivery).
"""

import asyncio
import functools
import heapq
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rmqstore.formats import commitlog, topics_json
from rmqstore.formats import subscription_groups as sg
from rmqstore.times import now_ms
from services.proxy import copies
from services.proxy.progress import Flight, Key, QueueProgress
from services.proxy.status import BusinessError

log = logging.getLogger(__name__)
MOVING_MS = 3_600_000  # a message being copied is not handed out meanwhile
MOVE_RETRY_MS = 5_000  # a copy the store did not take is tried again after this

Entry = tuple[int, int, Flight]  # (queue, offset, flight)


class Redelivery:
    state: dict[Key, dict[int, QueueProgress]]
    _expiry: dict[Key, list[tuple[int, int, int, int]]]
    _renewing: dict[Key, set[tuple[int, int]]]
    appender: Any
    config: Any
    dirty: bool
    on_event: Callable[[str, str, str, int], None]
    alive: Callable[[str], bool]
    # creates a topic unless it exists (queues, perm); None: the writer creates none
    create_topic: Callable[[str, int, int], Awaitable[object]] | None
    _made_topics: set[str]
    _copied_to: dict[str, bool]

    def group(self, name: str) -> sg.GroupConfig:
        raise NotImplementedError  # Consumption's

    def queue(self, group: str, topic: str, q: int) -> QueueProgress:
        raise NotImplementedError  # Consumption's

    def settle(self, group: str, topic: str, q: int, o: int) -> None:
        raise NotImplementedError  # Consumption's

    def _resolve(self, topic: str, q: int, o: int, f: Flight) -> None:
        raise NotImplementedError  # Consumption's

    async def present_records(self, group: str, topic: str, entries: list[Entry],
                              ) -> tuple[list[Entry], list[commitlog.Record]]:  # fmt: skip
        raise NotImplementedError  # Consumption's

    async def records(self, flights: list[Flight]) -> list[commitlog.Record]:
        raise NotImplementedError  # Consumption's

    def _schedule(self, key: Key, q: int, o: int, f: Flight) -> None:
        """Look at this flight again when its invisible time is over."""
        heapq.heappush(self._expiry.setdefault(key, []), (f.visible_at, q, o, f.version))

    def _current(self, group: str, topic: str, q: int, o: int, f: Flight) -> bool:
        p = self.state.get((group, topic), {}).get(q)
        return p is not None and p.inflight.get(o) is f

    @staticmethod
    @functools.lru_cache(maxsize=1 << 16)
    def retry_target(group: str, topic: str) -> str | None:
        """Where a due message of the group's ``topic`` (itself possibly a retry topic) is
        copied; None: redelivered in place."""
        if topic.startswith(copies.RETRY_PREFIX):
            return topic
        return copies.retry_topic(group, topic)

    def _expired(
        self, g: sg.GroupConfig, key: Key, now: int, limit: int, in_place: bool
    ) -> tuple[list[Entry], list[Entry], list[Entry]]:
        """Up to ``limit`` flights of ``key`` whose invisible time is over, as (to hand out
        again in place, to copy to the retry topic, to the dead-letter topic). The last two
        are kept invisible while being moved. Without ``in_place`` (a sweep), flights that
        would be handed out in place are left for a receive."""
        again: list[Entry] = []
        retry: list[Entry] = []
        dead: list[Entry] = []
        later: list[Entry] = []
        copy_to = None if g.orderly else self.retry_target(*key)
        queues = self.state.get(key, {})
        heap = self._expiry.get(key)
        while heap and heap[0][0] <= now and len(again) + len(retry) + len(dead) < limit:
            _at, q, o, version = heapq.heappop(heap)
            p = queues.get(q)
            f = p.inflight.get(o) if p is not None else None
            if f is None or f.version != version or f.visible_at > now:
                continue  # settled, changed or renewed since
            if f.attempt >= g.max_attempts:
                dead.append((q, o, f))
            elif copy_to is not None and f.attempt > 0:
                retry.append((q, o, f))
            elif in_place:
                again.append((q, o, f))
                continue
            else:
                later.append((q, o, f))
                continue
            f.visible_at = now + MOVING_MS
        for q, o, f in later:
            self._schedule(key, q, o, f)
        return again, retry, dead

    async def move(self, g: sg.GroupConfig, topic: str, entries: list[Entry],
                   to_retry: bool) -> None:  # fmt: skip
        """Copy these flights of ``topic`` to the group's retry topic (``to_retry``) or its
        dead-letter topic, then settle them. BusinessError when the store did not take the
        copies: nothing is settled then."""
        if not entries:
            return
        entries, records = await self.present_records(g.name, topic, entries)  # none gone
        if not entries:
            return
        target = self.retry_target(g.name, topic) if to_retry else None
        is_retry = topic.startswith(copies.RETRY_PREFIX)
        origin = topic
        out = []
        for (_q, _o, f), r in zip(entries, records, strict=True):
            if is_retry:
                origin = r.property_map.get(copies.RETRY_TOPIC) or topic
            n = copies.deliveries(r, f.attempt)
            if target is not None:
                out.append(copies.retry_copy(target, origin, r, n))
            else:
                out.append(copies.dead_letter(g.name, origin, r, n))
        if target is not None:
            await self._ensure_topic(target)
            self.queue(g.name, target, 0)  # the group reads it from before the first copy
        await self.appender.put(out)
        if target is not None:
            self._copied_to[target] = True
        for (q, o, f), r in zip(entries, records, strict=True):
            if self._current(g.name, topic, q, o, f):  # not acked (or reset) meanwhile
                self.settle(g.name, topic, q, o)
            if target is None:
                log.info("message %s of %s moved to %s%s", r.uniq_key, topic, copies.DLQ_PREFIX,
                         g.name)  # fmt: skip
        self.on_event(g.name, origin, "retried" if to_retry else "dead_lettered", len(out))

    async def _ensure_topic(self, name: str) -> None:
        """The retry topic's topics.json entry, as RocketMQ makes it: 1 queue, read-write."""
        if name in self._made_topics or self.create_topic is None:
            return
        await self.create_topic(name, 1, topics_json.PERM_READ_WRITE)
        self._made_topics.add(name)

    async def move_or_retry_later(self, g: sg.GroupConfig, topic: str, entries: list[Entry],
                                  to_retry: bool) -> int:  # fmt: skip
        """``move``; when the store does not take the copies, the flights are due again
        ``MOVE_RETRY_MS`` from now. How many were moved. A receive cancelled meanwhile (its
        client gone) does not stop it half-way."""
        if not entries:
            return 0
        return await asyncio.shield(self._move_or_retry_later(g, topic, entries, to_retry))

    async def _move_or_retry_later(self, g: sg.GroupConfig, topic: str, entries: list[Entry],
                                   to_retry: bool) -> int:  # fmt: skip
        try:
            await self.move(g, topic, entries, to_retry)
        except Exception as e:  # the store refused or is away (or worse): try again soon
            where = "retry" if to_retry else "dead-letter"
            log.warning("cannot copy %d messages of %s@%s to the %s topic (tried again in "
                        "%d s): %s", len(entries), topic, g.name, where, MOVE_RETRY_MS // 1000,
                        e, exc_info=not isinstance(e, BusinessError))  # fmt: skip
            at = now_ms() + MOVE_RETRY_MS
            for q, o, f in entries:
                if self._current(g.name, topic, q, o, f):
                    f.visible_at = at
                    self._schedule((g.name, topic), q, o, f)
            return 0
        return len(entries)

    async def sweep(self) -> int:
        """Move every due message of non-FIFO groups to its retry or dead-letter topic, with
        no receive needed; how many were moved."""
        now = now_ms()
        moved = 0
        for key in list(self._expiry):
            heap = self._expiry.get(key)
            if not heap or heap[0][0] > now:
                continue
            g = self.group(key[0])
            _again, retry, dead = self._expired(g, key, now, 1 << 30, in_place=False)
            moved += await self.move_or_retry_later(g, key[1], retry, to_retry=True)
            moved += await self.move_or_retry_later(g, key[1], dead, to_retry=False)
        return moved

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
