"""Pull by queue offset with RocketMQ 4.9's ``getMessage`` statuses and offsets (spec §9.4).

The scan stays inside the consume-queue segment holding the offset and covers at most
``max(16000 B, max_messages * 20 B)`` of units. Units are filtered by tags code, then the
record's real TAGS string. A batch is full once it holds ``max_messages`` records, or (never
before the first record) 32 records / 256 KiB when the record is within 40 % of RAM from the
commitlog's end, 8 records / 64 KiB otherwise. ``next_offset`` is the offset plus the units
scanned.
"""

import enum
import os
from dataclasses import dataclass, field

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from rmqstore.formats.consume_queue import UNIT_SIZE
from rmqstore.formats.javahash import java_hash
from rmqstore.layout import validate_topic
from services.query.queue_reader import QueueCatalog
from services.query.record_source import RecordSource, read_some, record_at

DEFAULT_MAX_MESSAGES = 32
MAX_SCAN_BYTES = 16000
IN_MEMORY_MAX_BYTES, IN_MEMORY_MAX_COUNT = 256 * 1024, 32
ON_DISK_MAX_BYTES, ON_DISK_MAX_COUNT = 64 * 1024, 8
MEMORY_RATIO = 0.40
PREFETCH = 32
MAX_TAG_EXPRESSION = 65536


class PullStatus(enum.Enum):
    FOUND = 1
    NO_MATCHED_MESSAGE = 2
    OFFSET_TOO_SMALL = 3
    OFFSET_OVERFLOW_ONE = 4
    OFFSET_OVERFLOW_BADLY = 5
    NO_MESSAGE_IN_QUEUE = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    OFFSET_FOUND_NULL = 8
    MESSAGE_WAS_REMOVING = 9


@dataclass
class PullResult:
    status: PullStatus
    next_offset: int
    min_offset: int = 0
    max_offset: int = 0
    records: list[commitlog.Record] = field(default_factory=list)
    # queue offsets the answer moves the consumer over because their messages are gone:
    # up to the first one still stored (OFFSET_TOO_SMALL), or deleted while being read
    skipped: int = 0


@dataclass(frozen=True)
class TagFilter:
    """``*`` / empty (everything) or ``A||B``: tags codes first, then the exact tag."""

    tags: frozenset[str] | None
    codes: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, expression: str) -> "TagFilter":
        expr = expression.strip()
        if not expr or expr == "*":
            return cls(None)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags:
            return cls(None)
        return cls(tags, frozenset(java_hash(t) for t in tags))

    def matches_code(self, tags_code: int) -> bool:
        if self.tags is None:
            return True
        low = tags_code & 0xFFFFFFFF  # RocketMQ compares (int) tagsCode
        return (low - (1 << 32) if low & 0x80000000 else low) in self.codes

    def matches_record(self, rec: commitlog.Record) -> bool:
        return self.tags is None or rec.tags in self.tags


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


class Puller:
    def __init__(self, queues: QueueCatalog, source: RecordSource,
                 memory_bytes: int | None = None) -> None:
        self.queues = queues
        self.source = source
        mem = physical_memory() if memory_bytes is None else memory_bytes
        self.in_memory_span = int(mem * MEMORY_RATIO)

    async def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 0,
                   tag_expression: str = "") -> PullResult:
        validate_topic(topic)
        if queue_id < 0:
            raise InvalidArgumentError(f"queue id {queue_id} is negative")
        if offset < 0:
            raise InvalidArgumentError(f"queue offset {offset} is negative")
        if max_messages < 0:
            raise InvalidArgumentError(f"max messages {max_messages} is negative")
        max_messages = max_messages or DEFAULT_MAX_MESSAGES
        if len(tag_expression) > MAX_TAG_EXPRESSION:
            raise InvalidArgumentError(
                f"tag expression is {len(tag_expression)} characters long, "
                f"at most {MAX_TAG_EXPRESSION}"
            )
        tag_filter = TagFilter.parse(tag_expression)
        cl_min, cl_max = await self.source.bounds()
        view = self.queues.view(topic, queue_id, cl_min)
        if view is None:
            return PullResult(PullStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        mn, mx = view.min_offset, view.max_offset
        if mx == 0:
            return PullResult(PullStatus.NO_MESSAGE_IN_QUEUE, 0, mn, mx)
        if offset < mn:
            return PullResult(PullStatus.OFFSET_TOO_SMALL, mn, mn, mx, skipped=mn - offset)
        if offset == mx:
            return PullResult(PullStatus.OFFSET_OVERFLOW_ONE, offset, mn, mx)
        if offset > mx:
            return PullResult(PullStatus.OFFSET_OVERFLOW_BADLY, mn if mn == 0 else mx, mn, mx)
        seg = view.segment_of(offset)
        if seg is None:
            cap = view.segments[0].capacity
            return PullResult(PullStatus.OFFSET_FOUND_NULL, offset + cap - offset % cap, mn, mx)
        scan_units = max(MAX_SCAN_BYTES, max_messages * UNIT_SIZE) // UNIT_SIZE
        stop = min(seg.first + seg.capacity, mx, offset + scan_units)
        units = seg.units[offset - seg.first : stop - seg.first]
        phys = units["offset"].tolist()
        sizes = units["size"].tolist()
        codes = units["tags_code"].tolist()
        result = PullResult(PullStatus.NO_MATCHED_MESSAGE, offset, mn, mx)
        total_bytes = 0
        fetched: dict[int, commitlog.Record | None] = {}
        i = 0
        while i < len(phys):
            phy, size = phys[i], sizes[i]
            count = len(result.records)
            if total_bytes and count:  # RocketMQ's isTheBatchFull
                in_disk = cl_max - phy > self.in_memory_span
                max_b, max_c = (
                    (ON_DISK_MAX_BYTES, ON_DISK_MAX_COUNT) if in_disk
                    else (IN_MEMORY_MAX_BYTES, IN_MEMORY_MAX_COUNT)
                )
                if count >= max_messages or total_bytes + size > max_b or count >= max_c:
                    break
            if not tag_filter.matches_code(codes[i]):
                i += 1
                continue
            if phy < cl_min:
                if not result.records:
                    result.status = PullStatus.MESSAGE_WAS_REMOVING
                result.skipped += 1
                i += 1
                continue
            if phy not in fetched:
                want = self._prefetch(phys, sizes, codes, i, cl_min, tag_filter,
                                      max(1, max_messages - count))
                for p, raw in zip(want, await read_some(self.source, want), strict=True):
                    fetched[p] = record_at(raw, p)
            rec = fetched[phy]
            if rec is None:
                if not result.records:
                    result.status = PullStatus.MESSAGE_WAS_REMOVING
                result.skipped += 1
            elif rec.topic == topic and tag_filter.matches_record(rec):
                result.records.append(rec)
                total_bytes += rec.total_size
                result.status = PullStatus.FOUND
            i += 1
        result.next_offset = offset + i
        return result


    @staticmethod
    def _prefetch(phys: list[int], sizes: list[int], codes: list[int], i: int, cl_min: int,
                  tag_filter: TagFilter, count: int) -> list[int]:
        """Offsets of the next records the scan may return: at most ``count`` (and
        ``PREFETCH``) of them and, past the first, at most 256 KiB."""
        out: list[int] = []
        total = 0
        for j in range(i, len(phys)):
            if phys[j] < cl_min or not tag_filter.matches_code(codes[j]):
                continue
            if out and (len(out) >= min(count, PREFETCH) or total + sizes[j] > IN_MEMORY_MAX_BYTES):
                break
            out.append(phys[j])
            total += sizes[j]
        return out

