"""What one decoded byte range contributes to a rebuild, as compact numpy arrays.

A range is decoded as columns (``commitlog_columns``) and its dispatch fields computed over
whole arrays (``rmqstore.dispatch_columns``, the rules of ``rmqstore.dispatch`` that the online
builders' dispatch records follow): consume-queue units for records that go to a consume queue,
and index keys in commitlog order with their key hashes, offsets and store times.
"""

from dataclasses import dataclass, field

import numpy as np

from pipelines.source import ByteRange, RangeEnd, read_range_columns
from rmqstore.dispatch_columns import dispatch_columns

# one consume-queue unit and the queue offset it belongs at
CQ_DTYPE = np.dtype([("queue_offset", "<i8"), ("phy", "<i8"), ("size", "<i4"), ("tags", "<i8")])


@dataclass
class RangeData:
    number: int
    end: RangeEnd
    records: int = 0
    bytes: int = 0
    queues: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)  # CQ_DTYPE, ordered
    key_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    key_phys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    key_times: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    key_topics: set[str] = field(default_factory=set)  # topics with an index key in the range

    @property
    def key_count(self) -> int:
        return len(self.key_hashes)

    def queue_spans(self) -> dict[tuple[str, int], tuple[int, int, int]]:
        """(first queue offset, last queue offset, units) of every queue in the range."""
        return {q: (int(a["queue_offset"][0]), int(a["queue_offset"][-1]), len(a))
                for q, a in self.queues.items()}


def decode_range(r: ByteRange, check_crc: bool = True) -> RangeData:
    """Decode one range into consume-queue units per queue and index keys."""
    cols, end = read_range_columns(r, check_crc)
    d = dispatch_columns(cols)
    data = RangeData(number=r.number, end=end, records=len(cols), bytes=end.position - r.begin)
    units = np.flatnonzero(d.goes_to_consume_queue)
    queue = (cols.topic_id[units] << 32) | (cols.queue_id[units] & 0xFFFFFFFF)
    _, first, which = np.unique(queue, return_index=True, return_inverse=True)
    by_queue = np.argsort(which, kind="stable")  # each queue's units in commitlog order
    bounds = np.cumsum(np.bincount(which, minlength=len(first)))
    for q in np.argsort(first, kind="stable").tolist():  # queues by first appearance
        rows = units[by_queue[(bounds[q - 1] if q else 0) : bounds[q]]]
        arr = np.empty(len(rows), dtype=CQ_DTYPE)
        arr["queue_offset"] = cols.queue_offset[rows]
        arr["phy"] = cols.physical_offset[rows]
        arr["size"] = cols.total_size[rows]
        arr["tags"] = d.tags_code[rows]
        if len(arr) > 1 and np.any(np.diff(arr["queue_offset"]) < 0):
            arr = arr[np.argsort(arr["queue_offset"], kind="stable")]
        data.queues[(cols.topic_of(int(rows[0])), int(cols.queue_id[rows[0]]))] = arr
    data.key_hashes = d.key_hash
    data.key_phys = cols.physical_offset[d.key_record]
    data.key_times = cols.store_timestamp[d.key_record]
    data.key_topics = {cols.topics[t] for t in np.unique(cols.topic_id[d.key_record]).tolist()}
    return data
