"""What a 4.x pull finds, read from the store's files on this machine: the queue's consume-queue
units and the records' bytes, through mappings of the segments (``pull_files``), with the
writer asked only for records the files cannot give. No call to the query service and
no record decoded: a unit's tags code filters, its size counts towards the batch.

RocketMQ 4.9's ``getMessage`` rules (spec §9.4), as the query service's ``Pull`` keeps them:
the queue's minimum is its first unit whose record is still in the commitlog; an offset below
it is OFFSET_TOO_SMALL, at the end OFFSET_OVERFLOW_ONE, beyond it OFFSET_OVERFLOW_BADLY (the
next offset the minimum when that is 0, else the end); a segment retention removed is
OFFSET_FOUND_NULL. The scan stays in the offset's segment and covers at most
``max(16000 B, max_messages * 20 B)`` of units; a batch is full at ``max_messages``, or (never
before the first record) 32 records / 256 KiB when the record is within 40 % of RAM from the
commitlog's end, 8 / 64 KiB otherwise. A record gone (below the commitlog's minimum, or
unreadable) is skipped, and is MESSAGE_WAS_REMOVING when nothing was found.
"""

import bisect
import time
from collections.abc import Sequence
from itertools import accumulate
from operator import lt
from pathlib import Path

import grpc

from rmqstore.formats.consume_queue import UNIT_SIZE
from rmqstore.queue_files import QueueFiles
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.query.pull import (
    IN_MEMORY_MAX_BYTES,
    IN_MEMORY_MAX_COUNT,
    MAX_SCAN_BYTES,
    MEMORY_RATIO,
    ON_DISK_MAX_BYTES,
    ON_DISK_MAX_COUNT,
    TagFilter,
    physical_memory,
)
from services.query.queue_reader import PRE_BLANK_SIZE
from services.remoting.pull_files import PullFiles

READ_TIMEOUT_S = 30.0
REFUSED = (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DATA_LOSS)  # fmt: skip
END_TTL_S = 1.0  # the commitlog's end (for the in-memory batch limits) is asked this often


class Found:
    """What a pull found: its status (the query service's PullStatus names), offsets and
    records."""

    __slots__ = ("_wanted", "columns", "count", "gone", "max_offset", "min_offset",
                 "next_offset", "records", "status")  # fmt: skip

    def __init__(
        self, status: str, next_offset: int, min_offset: int = 0, max_offset: int = 0,
        wanted: list[tuple[int, int]] | None = None, gone: int = 0,
        columns: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> None:  # fmt: skip
        self.status = status
        self.next_offset = next_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        # the records' bytes, to be joined: a piece per record, or per run of adjacent records
        self.records: Sequence[bytes | memoryview] = ()
        self.count = 0  # records in them
        self._wanted = wanted
        self.gone = gone  # matching units whose record is below the commitlog's minimum
        # ``wanted`` as two columns (commitlog offsets, sizes) when ``scan`` read them so: in
        # commitlog order (checked), never empty
        self.columns = columns

    @property
    def wanted(self) -> list[tuple[int, int]]:
        """The records the pull takes: (commitlog offset, size) each (made from ``columns``
        when asked: a pull answered from the columns never makes it)."""
        if self._wanted is None:
            self._wanted = [] if self.columns is None else list(zip(*self.columns, strict=True))
        return self._wanted


class PullReads:
    def __init__(self, store: Path, writer: commitlog_pb2_grpc.CommitLogStub) -> None:
        self.queues = QueueFiles(store)  # long polling's looks at one unit
        self.files = PullFiles(store)
        self.writer = writer
        self.in_memory_span = int(physical_memory() * MEMORY_RATIO)
        self._end = (0, -END_TTL_S)  # (commitlog's end, monotonic time asked)

    async def _commitlog_end(self) -> int:
        end, when = self._end
        if time.monotonic() - when >= END_TTL_S:
            offsets = await self.writer.GetOffsets(
                commitlog_pb2.GetOffsetsRequest(), timeout=READ_TIMEOUT_S
            )
            end = offsets.max_offset
            self._end = (end, time.monotonic())
        return end

    def written(self, topic: str, queue: int, offset: int) -> bool:
        """Whether the queue's unit at ``offset`` is written (one ``pread``)."""
        return self.queues.written(topic, queue, offset)

    def pull_now(
        self, topic: str, queue: int, offset: int, max_messages: int, tags: TagFilter
    ) -> Found | None:
        """``pull`` when it needs no wait: None when the writer would have to be asked (the
        commitlog's end is due, or a record the files cannot give)."""
        end, when = self._end
        if time.monotonic() - when >= END_TTL_S:
            return None
        found = self.scan(topic, queue, offset, max_messages, tags, end)
        columns = found.columns
        if columns is not None:  # in commitlog order (checked), never empty
            runs = self.files.ordered_runs(*columns)
            if runs is None:  # (ordered_runs tried already: each record's head checked)
                runs = self.files.runs(found.wanted)
                if runs is None:
                    return None
            found.records, found.count = runs, len(columns[0])
        elif found.wanted:
            runs = self.files.runs(found.wanted)
            if runs is None:
                return None
            found.records, found.count = runs, len(found.wanted)
        return _settled(found)

    async def pull(
        self, topic: str, queue: int, offset: int, max_messages: int, tags: TagFilter
    ) -> Found:
        found = self.scan(topic, queue, offset, max_messages, tags, await self._commitlog_end())
        if found.wanted:
            found.records = [r for r in await self._records(found.wanted) if r is not None]
            found.count = len(found.records)
        return _settled(found)

    def scan(
        self, topic: str, queue: int, offset: int, max_messages: int, tags: TagFilter,
        cl_max: int,
    ) -> Found:  # fmt: skip
        """The pull's status and offsets, and the records it takes (``wanted``; the status
        NO_MATCHED_MESSAGE until they are read), from the consume queue alone; ``cl_max``:
        the commitlog's end."""
        pf = self.files
        segs = pf.queue(topic, queue)
        if not segs.starts:  # no segment file (the queue's directory listed just now)
            return Found("NO_MATCHED_LOGIC_QUEUE", 0)
        cl_min = pf.commitlog_min()
        mx = pf.max_offset(topic, queue, segs)
        mn = pf.first_present(segs, cl_min, mx)
        if mx == 0:
            return Found("NO_MESSAGE_IN_QUEUE", 0, mn, mx)
        if offset < mn:
            return Found("OFFSET_TOO_SMALL", mn, mn, mx)
        if offset == mx:
            return Found("OFFSET_OVERFLOW_ONE", offset, mn, mx)
        if offset > mx:
            return Found("OFFSET_OVERFLOW_BADLY", mn if mn == 0 else mx, mn, mx)
        cap = len(segs.maps[0]) // UNIT_SIZE
        scan = max(MAX_SCAN_BYTES, max_messages * UNIT_SIZE) // UNIT_SIZE
        every = tags.tags is None
        if every:  # no unit from the minimum on is filtered out or gone: the batch is these
            scan = min(scan, max_messages)
        count = min(scan, mx - offset, cap - offset % cap)
        far = cl_max - self.in_memory_span  # a record below is "on disk"
        if every:
            columns = pf.columns(segs, offset, count)
            whole = None if columns is None else _whole(*columns, max_messages, cl_min, far)
            if whole is not None:
                phys, sizes = whole
                return Found("NO_MATCHED_MESSAGE", offset + len(phys), mn, mx, columns=whole)
        units = pf.units(segs, offset, count)
        if not units:  # the segment holding the offset was removed
            return Found("OFFSET_FOUND_NULL", offset + cap - offset % cap, mn, mx)
        wanted, taken, gone = _batch(units, max_messages, tags, cl_min, far)
        return Found("NO_MATCHED_MESSAGE", offset + taken, mn, mx, wanted=wanted, gone=gone)

    async def pull_units(
        self, units: Sequence[tuple[int, int, int]], offset: int, max_messages: int,
        tags: TagFilter, min_offset: int, end: int,
    ) -> Found:  # fmt: skip
        """A pull answered from the queue's units from ``offset`` on that its consume-queue
        file does not hold yet (the writer's dispatch stream delivered them: the builder is a
        step behind), with ``scan``'s filter and batch limits; ``end``: the queue's end."""
        far = await self._commitlog_end() - self.in_memory_span
        cl_min = self.files.commitlog_min()
        wanted, taken, gone = _batch(units, max_messages, tags, cl_min, far)
        found = Found("NO_MATCHED_MESSAGE", offset + taken, min_offset, end, wanted=wanted,
                      gone=gone)  # fmt: skip
        if wanted:
            found.records = [r for r in await self._records(wanted) if r is not None]
            found.count = len(found.records)
        return _settled(found)

    async def _records(self, wanted: list[tuple[int, int]]) -> list[bytes | memoryview | None]:
        """The records' bytes from the files; those the files cannot give from the writer,
        whose refusal of an offset (not a record: removed meanwhile) is None."""
        got: list[bytes | memoryview | None] = list(self.files.records(wanted))
        missing = [i for i, r in enumerate(got) if r is None]
        raws = await self._from_writer([wanted[i][0] for i in missing])
        for i, raw in zip(missing, raws, strict=True):
            got[i] = raw
        return got

    async def _from_writer(self, offsets: list[int]) -> list[bytes | None]:
        if not offsets:
            return []
        try:
            answer = await self.writer.ReadRecords(
                commitlog_pb2.ReadRecordsRequest(offsets=offsets), timeout=READ_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as e:
            if e.code() not in REFUSED:
                raise
            if len(offsets) == 1:
                return [None]
            return [r for o in offsets for r in await self._from_writer([o])]  # which one
        raws = list(answer.records)
        return [r or None for r in raws] if len(raws) == len(offsets) else [None] * len(offsets)


def _batch(
    units: Sequence[tuple[int, int, int]], max_messages: int, tags: TagFilter, cl_min: int,
    far: int,
) -> tuple[list[tuple[int, int]], int, int]:  # fmt: skip
    """The records a pull takes from these units (commitlog offset, size, tags code), one by
    one: RocketMQ's batch limits (``far``: a record below is "on disk"), the tag filter, the
    records below the commitlog's minimum skipped; (the records' (offset, size), the units
    looked at, those whose record is gone)."""
    every = tags.tags is None
    wanted: list[tuple[int, int]] = []
    total, gone, i, n = 0, 0, 0, 0
    for phy, size, code in units:
        if n:  # RocketMQ's isTheBatchFull
            if n >= max_messages:
                break
            if phy < far:
                if total + size > ON_DISK_MAX_BYTES or n >= ON_DISK_MAX_COUNT:
                    break
            elif total + size > IN_MEMORY_MAX_BYTES or n >= IN_MEMORY_MAX_COUNT:
                break
        i += 1
        if not every and not tags.matches_code(code):
            continue
        if phy < cl_min or (phy == 0 and size == PRE_BLANK_SIZE):  # deleted, or no message
            gone += 1
            continue
        wanted.append((phy, size))
        total += size
        n += 1
    return wanted, i, gone


def _whole(
    phys: tuple[int, ...], sizes: tuple[int, ...], max_messages: int, cl_min: int, far: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``scan``'s batch when every unit is taken (no tag filter), from the units' commitlog
    offsets and sizes without a step per unit in Python: the units in commitlog order, no
    offset twice (checked), the first at or above the commitlog's minimum (so are the others)
    and not the commitlog's first, all of them "in memory" or all "on disk"; the batch limits
    then are a count and, only when the sizes add up to more than the byte limit, a bisection
    of their running total. None when these do not hold (``scan`` takes the units one by
    one)."""
    if phys[0] < max(cl_min, 1) or not all(map(lt, phys, phys[1:])):  # strictly ascending
        return None
    if phys[0] >= far:
        max_bytes, max_count = IN_MEMORY_MAX_BYTES, IN_MEMORY_MAX_COUNT
    elif phys[-1] < far:
        max_bytes, max_count = ON_DISK_MAX_BYTES, ON_DISK_MAX_COUNT
    else:
        return None
    k = min(len(phys), max_messages, max_count)
    if k < len(phys):
        phys, sizes = phys[:k], sizes[:k]
    if sum(sizes) > max_bytes:  # the record that passes the limit, never the first
        k = max(1, bisect.bisect_right(list(accumulate(sizes)), max_bytes))
        phys, sizes = phys[:k], sizes[:k]
    return phys, sizes


def _settled(found: Found) -> Found:
    """The status once the records are read: FOUND, or MESSAGE_WAS_REMOVING when the units
    matched but no record was there."""
    if found.count:
        found.status = "FOUND"
    elif found.wanted or found.gone:
        found.status = "MESSAGE_WAS_REMOVING"
    return found
