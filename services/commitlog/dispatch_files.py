"""Dispatch batches decoded from the segment files, for subscribers behind the in-memory cache
(a builder catching up after a restart, or building a store it has never seen).

A segment's run of records is decoded at once (``commitlog_columns``, the writer's own data, so
no CRC check) and turned into the dispatch record's fields by ``dispatch_columns``. Builders
that catch up together ask for the same batches: ``RecentBatches`` keeps the last few, so the
second gets the first's instead of decoding them again (serialized once: ``WireBatch``).
"""

import threading
from collections import OrderedDict
from collections.abc import Callable

from rmqstore.dispatch_columns import property_texts, tags_codes
from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog_columns import decode_columns
from rmqstore.v1 import commitlog_pb2
from services.commitlog.segment_files import SegmentQueue
from services.commitlog.wire_batch import WireBatch


def decode_dispatch(
    segments: SegmentQueue, pos: int, end: int, max_records: int, max_offset: int
) -> commitlog_pb2.DispatchBatch:
    """Up to ``max_records`` dispatch records from commitlog offset ``pos`` (a record start)
    to ``end``; the batch's next offset is where the next one starts."""
    fields: tuple[list, ...] = tuple([] for _ in range(11))
    left = max_records
    while pos < end and left > 0:
        seg = segments.find(pos)
        limit = min(seg.wrote, end - seg.start)
        cols, at, error = decode_columns(seg.map, pos - seg.start, limit, False, seg.start, left)
        if error is not None:
            raise error
        segs = props_fmt.segments(cols.properties)  # shared by the three names looked up
        tags = tags_codes(cols, segs)
        for out, values in zip(
            fields,
            (
                [cols.topics[t] for t in cols.topic_id.tolist()],
                cols.queue_id.tolist(),
                cols.queue_offset.tolist(),
                cols.physical_offset.tolist(),
                cols.total_size.tolist(),
                tags.tolist(),
                cols.store_timestamp.tolist(),
                property_texts(cols, props_fmt.KEYS, segs),
                property_texts(cols, props_fmt.UNIQ_KEY, segs),
                cols.sys_flag.tolist(),
                cols.prepared_transaction_offset.tolist(),
            ),
            strict=True,
        ):
            out += values
        left -= len(cols)
        pos = seg.start + at
        if left > 0 and at < limit:  # the walk met an end marker before the data's end
            if commitlog.peek(seg.map, at).magic != commitlog.BLANK_MAGIC:
                raise CorruptRecordError("zeros where records should go on", pos, limit - at)
            pos = seg.end  # the segment's end marker: go on in the next one
            continue
        break
    return commitlog_pb2.DispatchBatch(
        topic=fields[0],
        queue_id=fields[1],
        queue_offset=fields[2],
        phy_offset=fields[3],
        size=fields[4],
        tags_code=fields[5],
        store_timestamp=fields[6],
        keys=fields[7],
        unique_key=fields[8],
        sys_flag=fields[9],
        prepared_transaction_offset=fields[10],
        next_offset=pos,
        max_offset=max_offset,
    )


class RecentBatches:
    """The last ``capacity`` batches decoded from files, by the offset they start at; a
    subscriber asking for a batch another is decoding right now waits for that one.

    Records below the writer's max offset never change while it runs, so a batch decoded for
    one subscriber is right for any other at the same offset that takes at least as many
    records (one that stopped early, at the in-memory cache or the head, is merely short)."""

    def __init__(self, capacity: int = 32, wait_s: float = 5.0) -> None:
        self.capacity = capacity
        self.wait_s = wait_s
        self._batches: OrderedDict[int, WireBatch] = OrderedDict()
        self._decoding: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def get_or_decode(
        self, pos: int, max_records: int, decode: Callable[[], WireBatch]
    ) -> WireBatch:
        with self._lock:
            batch = self._fitting(pos, max_records)
            if batch is not None:
                return batch
            underway = self._decoding.get(pos)
            if underway is None:
                self._decoding[pos] = threading.Event()
        if underway is not None:
            underway.wait(self.wait_s)
            with self._lock:
                batch = self._fitting(pos, max_records)
            return batch if batch is not None else decode()
        try:
            batch = decode()
            with self._lock:
                self._batches[pos] = batch
                while len(self._batches) > self.capacity:
                    self._batches.popitem(last=False)
            return batch
        finally:
            with self._lock:
                self._decoding.pop(pos).set()

    def _fitting(self, pos: int, max_records: int) -> WireBatch | None:
        batch = self._batches.get(pos)
        if batch is None or batch.records > max_records:
            return None
        return batch
