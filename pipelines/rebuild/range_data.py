"""What one decoded byte range contributes to a rebuild, as compact numpy arrays.

Every record goes through ``rmqstore.dispatch.from_meta`` exactly as the online builders'
dispatch records do: consume-queue units for records that go to a consume queue, and index keys
(``dispatch.index_keys``) in commitlog order with their key hashes, offsets and store times.
"""

from dataclasses import dataclass, field

import numpy as np

from pipelines.source import ByteRange, RangeEnd, iter_range
from rmqstore import dispatch
from rmqstore.formats import commitlog
from rmqstore.formats.javahash import index_hashes

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

    @property
    def key_count(self) -> int:
        return len(self.key_hashes)

    def queue_spans(self) -> dict[tuple[str, int], tuple[int, int, int]]:
        """(first queue offset, last queue offset, units) of every queue in the range."""
        return {q: (int(a["queue_offset"][0]), int(a["queue_offset"][-1]), len(a))
                for q, a in self.queues.items()}


def decode_range(r: ByteRange, check_crc: bool = True) -> RangeData:
    """Decode one range into consume-queue units per queue and index keys."""
    cq: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    keys: list[str] = []
    key_counts: list[int] = []
    key_phys: list[int] = []
    key_times: list[int] = []
    records = 0
    end: RangeEnd | None = None
    for item in iter_range(r, check_crc, commitlog.decode_meta):
        if isinstance(item, RangeEnd):
            end = item
            break
        _, rec = item
        records += 1
        d = dispatch.from_meta(rec)
        if dispatch.goes_to_consume_queue(d.sys_flag):
            units = cq.get((d.topic, d.queue_id))
            if units is None:
                units = cq[(d.topic, d.queue_id)] = []
            units.append((d.queue_offset, d.phy_offset, d.size, d.tags_code))
        ks = dispatch.index_keys(d)
        if ks:
            keys.extend(ks)
            key_counts.append(len(ks))
            key_phys.append(d.phy_offset)
            key_times.append(d.store_timestamp)
    assert end is not None
    data = RangeData(number=r.number, end=end, records=records, bytes=end.position - r.begin)
    for q, units in cq.items():
        arr = np.array(units, dtype=CQ_DTYPE)
        if len(arr) > 1 and np.any(np.diff(arr["queue_offset"]) < 0):
            arr = arr[np.argsort(arr["queue_offset"], kind="stable")]
        data.queues[q] = arr
    if keys:
        counts = np.array(key_counts, dtype=np.int64)
        data.key_hashes = index_hashes(keys)
        data.key_phys = np.repeat(np.array(key_phys, dtype=np.int64), counts)
        data.key_times = np.repeat(np.array(key_times, dtype=np.int64), counts)
    return data
