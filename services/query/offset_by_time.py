"""Queue offset of a time: LOWER = first message stored at or after it, UPPER = last at or
before it; with equal store times, the first (LOWER) or last (UPPER) of the run.

A k-ary search over the units in [min, max) reads the store times of up to ``PROBES``
records per round trip to the writer. LOWER past every message gives max (the next offset to
be written); UPPER before every message gives min - 1.
"""

import enum
from collections.abc import Callable

from rmqstore.errors import CorruptRecordError, InvalidArgumentError, NotFoundError, StoreError
from rmqstore.formats import commitlog
from rmqstore.layout import validate_topic
from services.query.queue_reader import QueueCatalog, QueueView
from services.query.record_source import RecordSource, read_some

PROBES = 16


class Boundary(enum.Enum):
    LOWER = 0
    UPPER = 1


def store_time(raw: bytes) -> int:
    """STORETIMESTAMP of a raw record, read from its header."""
    hdr = commitlog.HEAD.unpack_from(raw, 0)
    sys_flag = hdr[7]
    at = commitlog.store_timestamp_at(sys_flag)
    return int.from_bytes(raw[at : at + 8], "big", signed=True)


class TimeSearch:
    def __init__(self, queues: QueueCatalog, source: RecordSource) -> None:
        self.queues = queues
        self.source = source

    async def view(self, topic: str, queue_id: int) -> QueueView:
        validate_topic(topic)
        if queue_id < 0:
            raise InvalidArgumentError(f"queue id {queue_id} is negative")
        cl_min, _ = await self.source.bounds()
        view = self.queues.view(topic, queue_id, cl_min)
        if view is None:
            if not self.queues.topic_exists(topic):
                raise NotFoundError(
                    f"topic {topic!r} is not in this store (no consume queue is built for it)"
                )
            raise NotFoundError(f"topic {topic!r} has no queue {queue_id}")
        return view

    async def offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        v = await self.view(topic, queue_id)
        return v.min_offset, v.max_offset

    async def offset_by_time(self, topic: str, queue_id: int, timestamp: int,
                             boundary: Boundary = Boundary.LOWER) -> int:
        view = await self.view(topic, queue_id)
        lo, hi = view.min_offset, view.max_offset
        if boundary is Boundary.LOWER:
            return await self._first(view, lo, hi, lambda t: t >= timestamp)
        return await self._first(view, lo, hi, lambda t: t > timestamp) - 1

    async def _first(self, view: QueueView, lo: int, hi: int, pred: Callable[[int], bool]) -> int:
        """First offset in [lo, hi) whose store time satisfies ``pred`` (hi if none)."""
        while lo < hi:
            if hi - lo <= PROBES:
                probes = list(range(lo, hi))
            else:
                probes = sorted({lo + (hi - lo) * j // PROBES for j in range(PROBES)})
            times = await self._times(view, probes)
            new_lo, new_hi = lo, hi
            for p, t in zip(probes, times, strict=True):
                if pred(t):
                    new_hi = p
                    break
                new_lo = p + 1
            lo, hi = new_lo, new_hi
        return lo

    async def _times(self, view: QueueView, offsets: list[int]) -> list[int]:
        phys = []
        for off in offsets:
            unit = view.unit(off)
            if unit is None:
                raise StoreError(f"consume queue unit {off} vanished while searching")
            phys.append(unit[0])
        out = []
        raws = await read_some(self.source, phys)
        for off, phy, raw in zip(offsets, phys, raws, strict=True):
            try:
                if raw is None:
                    raise CorruptRecordError("not readable", phy)
                out.append(store_time(raw))
            except (CorruptRecordError, ValueError) as e:
                raise StoreError(
                    f"queue offset {off} points at commitlog offset {phy}, which cannot be "
                    f"read: {e}"
                ) from e
        return out
