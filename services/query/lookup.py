"""Lookups by key and by message id over the index files, checked against the real records.

The index only narrows the search: every candidate record is fetched and kept only if its
topic is the query's, its KEYS tokens contain the key (or its UNIQ_KEY equals it) and its real
store time lies in [begin, end]. The limit applies after that, results come newest first, and
a cursor continues a truncated answer. Walks assume store times do not go backwards in
commitlog order (the writer assigns them under its append lock), as RocketMQ does.
"""

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from rmqstore.errors import (
    BudgetExhaustedError,
    InvalidArgumentError,
    NotFoundError,
)
from rmqstore.formats import commitlog
from rmqstore.formats.hosts import Host
from rmqstore.formats.index_file import build_key
from rmqstore.formats.javahash import index_hash, utf16_len
from rmqstore.formats.msgid import (
    OFFSET_ID_LENGTHS,
    decode_offset_msg_id,
    is_v5_id,
    month_start_ms,
)
from rmqstore.formats.properties import MAX_PROPERTIES_LENGTH
from rmqstore.layout import StoreLayout, validate_topic
from services.query import cursor as cursor_fmt
from services.query.budget import Budget, BudgetLimits
from services.query.index_reader import PAUSE, POS_INF, IndexCatalog, IndexEntry, KeyWalk
from services.query.record_source import RecordSource, read_some, record_at

DEFAULT_LIMIT = 64
MAX_KEY_LENGTH = MAX_PROPERTIES_LENGTH
FETCH_BATCH = 32
UNIQ_KEY_SKEW_MS = 60_000  # producer clock ahead of the broker's, tolerated
UNIQ_KEY_MAX_MONTHS = 240
ID_LOOKUP_LIMIT = 32
MAX_PORT = 0xFFFF  # an offset id's 4-byte port field; a UNIQ_KEY has its pid's bits there
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass
class KeyResult:
    records: list[commitlog.Record] = field(default_factory=list)
    truncated: bool = False
    cursor: str = ""
    budget_exhausted: bool = False
    hops: int = 0


def record_matches(rec: commitlog.Record, topic: str, key: str, begin: int, end: int) -> bool:
    """The exact filter: topic, key among the KEYS tokens or equal to UNIQ_KEY, store time."""
    if rec.topic != topic or not begin <= rec.store_timestamp <= end or not key:
        return False
    return rec.uniq_key == key or key in rec.keys.split(" ")


class KeyLookup:
    """Query by key and time range, and by message id, over one store."""

    def __init__(self, layout: StoreLayout, catalog: IndexCatalog, source: RecordSource,
                 limits: BudgetLimits | None = None, fetch_batch: int = FETCH_BATCH) -> None:
        self.layout = layout
        self.catalog = catalog
        self.source = source
        self.limits = limits or BudgetLimits()
        self.fetch_batch = fetch_batch

    # -- by key ------------------------------------------------------------------------------
    def check_topic(self, topic: str) -> None:
        """A valid topic of this store: with a consume queue, or seen by the index builder
        (the index is the truth for keys and ids: a topic of prepared messages only, or one
        the consume-queue builder has not reached yet, has no consume queue)."""
        validate_topic(topic)
        if not (self.layout.consumequeue_dir / topic).is_dir() and \
                topic not in self.layout.indexed_topics():
            raise NotFoundError(f"topic {topic!r} is not in this store (no message of it is "
                                "indexed)")

    async def by_key(self, topic: str, key: str, begin: int = 0, end: int | None = None,
                     limit: int = 0, cursor: str = "", below_phy: int = 0) -> KeyResult:
        """``below_phy`` (> 0) keeps only records below that physical offset: where a
        cluster-wide page stopped inside this broker's page (see ``cluster_lookup``)."""
        if begin < 0:
            raise InvalidArgumentError(f"begin timestamp {begin} is negative")
        if end is None or end == 0:
            end = POS_INF
        if end < begin:
            raise InvalidArgumentError(f"begin timestamp {begin} is after end timestamp {end}")
        if limit < 0:
            raise InvalidArgumentError(f"max results {limit} is negative")
        if utf16_len(key) > MAX_KEY_LENGTH:
            raise InvalidArgumentError(
                f"key is {utf16_len(key)} characters long, at most {MAX_KEY_LENGTH} "
                "(the properties of a message hold at most that)"
            )
        limit = limit or DEFAULT_LIMIT
        self.check_topic(topic)
        qhash = cursor_fmt.query_hash(topic, key, begin, end)
        start = cursor_fmt.decode(cursor, qhash) if cursor else None
        if below_phy < 0:
            raise InvalidArgumentError(f"below physical offset {below_phy} is negative")
        return await self._search(topic, key, begin, end, limit, start, qhash,
                                  below_phy=below_phy)

    async def _search(self, topic: str, key: str, begin: int, end: int, limit: int,
                      start: cursor_fmt.Position | None, qhash: bytes,
                      budget: Budget | None = None, below_phy: int = 0) -> KeyResult:
        result = KeyResult()
        budget = budget or Budget(self.limits)
        names = self.catalog.names()
        if start is not None:
            names = [n for n in names if n <= start.file]
        last_phy = start.last_phy if start is not None else POS_INF
        if below_phy:
            last_phy = min(last_phy, below_phy)
        walk = KeyWalk(self.catalog, names, index_hash(build_key(topic, key)), begin, end,
                       budget, (start.file, start.entry) if start is not None else None)
        entries = iter(walk)
        seen = last_phy
        done = False
        fetched_any = budget.bytes > 0  # a shared budget (id lookups) may be spent already
        records_seen = 0
        while not done:
            batch: list[IndexEntry] = []
            # enough for the page plus the one that says "truncated", at least a few
            size = max(4, min(self.fetch_batch, limit + 1 - len(result.records)))
            if records_seen:  # large records: fewer per fetch, within the byte budget
                avg = max(budget.bytes // records_seen, 1)
                size = max(1, min(size, (self.limits.bytes - budget.bytes) // avg + 1))
            for e in entries:
                if e is PAUSE:
                    await asyncio.sleep(0)  # a long walk lets other queries run
                    continue
                if e.phy_offset >= seen:
                    continue  # the same record indexed twice (several keys, re-dispatch)
                seen = e.phy_offset
                batch.append(e)
                if len(batch) >= size:
                    break
            else:
                done = True
            if not batch:
                break
            if fetched_any and (budget.bytes >= self.limits.bytes or budget.timed_out):
                walk.cut_at = (batch[0].file, batch[0].number)  # every page fetches one batch
                break
            fetched_any = True
            raws = await read_some(self.source, [e.phy_offset for e in batch])
            for e, raw in zip(batch, raws, strict=True):
                if raw is None:
                    continue
                budget.bytes += len(raw)
                records_seen += 1
                rec = record_at(raw, e.phy_offset)
                if rec is None or not record_matches(rec, topic, key, begin, end):
                    continue
                if len(result.records) >= limit:
                    result.truncated = True
                    result.cursor = cursor_fmt.encode(
                        qhash, cursor_fmt.Position(e.file, e.number, last_phy)
                    )
                    result.hops = budget.hops
                    return result
                result.records.append(rec)
                last_phy = rec.physical_offset
        if walk.cut_at is not None:
            result.truncated = True
            result.budget_exhausted = True
            result.cursor = cursor_fmt.encode(
                qhash, cursor_fmt.Position(walk.cut_at[0], walk.cut_at[1], last_phy)
            )
        result.hops = budget.hops
        return result

    # -- by id -------------------------------------------------------------------------------
    async def by_id(self, msg_id: str, topic: str = "", now_ms: int | None = None
                    ) -> list[commitlog.Record]:
        """An offset message id read directly, else a UNIQ_KEY looked up in the index (a
        RocketMQ 5 client's 34-character id is a UNIQ_KEY)."""
        if is_v5_id(msg_id):
            if topic:
                self.check_topic(topic)
            return await self._by_uniq_key(msg_id.upper(), topic, now_ms)
        if len(msg_id) not in OFFSET_ID_LENGTHS or not set(msg_id) <= _HEX:
            raise InvalidArgumentError(
                f"message id {msg_id[:80]!r} is not 32, 34 (RocketMQ 5) or 56 hexadecimal "
                "characters"
            )
        if topic:
            self.check_topic(topic)
        rec = await self._by_offset_id(msg_id, topic)
        if rec is not None:
            return [rec]
        return await self._by_uniq_key(msg_id.upper(), topic, now_ms)

    async def _by_offset_id(self, msg_id: str, topic: str) -> commitlog.Record | None:
        ip, port, offset = decode_offset_msg_id(msg_id)
        if not 0 <= port <= MAX_PORT or offset < 0:
            return None  # no store has that port (or offset): not an offset id; a UNIQ_KEY?
        raw = (await read_some(self.source, [offset]))[0]
        rec = record_at(raw, offset)  # None outside the log
        if rec is None or rec.store_host != Host(ip, port):
            return None
        if topic and rec.topic != topic:
            return None
        return rec

    def topics(self) -> list[str]:
        return self.layout.topics()

    async def _by_uniq_key(self, uniq_key: str, topic: str, now_ms: int | None
                           ) -> list[commitlog.Record]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        topics = [topic] if topic else self.topics()
        oldest = self._oldest_index_time()
        if oldest is None or not topics:
            return []
        budget = Budget(self.limits)  # one budget for every window and topic
        for begin, end in uniq_key_windows(uniq_key, now, oldest):
            found: list[commitlog.Record] = []
            for t in topics:
                res = await self._search(t, uniq_key, begin, end, ID_LOOKUP_LIMIT, None,
                                         cursor_fmt.query_hash(t, uniq_key, begin, end), budget)
                found.extend(r for r in res.records if r.uniq_key == uniq_key)
                if res.budget_exhausted and not found:
                    raise BudgetExhaustedError(
                        f"unique key {uniq_key} not found within the query budget "
                        f"({budget.hops} index entries, {budget.bytes} bytes read)"
                    )
            if found:
                found.sort(key=lambda r: r.physical_offset, reverse=True)
                return found
        return []

    def _oldest_index_time(self) -> int | None:
        for name in reversed(self.catalog.names()):
            index = self.catalog.open(name)
            if index is not None and index.read_header().index_count > 1:
                return index.header.begin_timestamp
        return None


def uniq_key_windows(uniq_key: str, now_ms: int, oldest_ms: int
                     ) -> Iterator[tuple[int, int]]:
    """Store-time windows to search for a UNIQ_KEY, newest first.

    The key holds milliseconds since the start of the (local) month it was made in, not the
    month itself; every month from now back to the oldest indexed time is a candidate. Window k
    runs from candidate k's time minus a clock-skew allowance up to where window k-1 begins.
    """
    raw = bytes.fromhex(uniq_key)
    ip_len = len(raw) - 12
    span = int.from_bytes(raw[ip_len + 6 : ip_len + 10], "big")
    month = month_start_ms(now_ms)
    upper = POS_INF
    for _ in range(UNIQ_KEY_MAX_MONTHS):
        t = month + span
        if t <= now_ms + UNIQ_KEY_SKEW_MS:
            begin = max(t - UNIQ_KEY_SKEW_MS, 0)
            if begin <= upper:
                yield begin, upper
                upper = begin - 1
        if upper < oldest_ms or upper < 0:
            return
        month = month_start_ms(month - 1)
    if upper >= 0:
        yield 0, upper

