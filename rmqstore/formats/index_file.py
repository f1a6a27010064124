"""Index file: hash slots chaining entries, RocketMQ 4.9 layout (``index/<yyyyMMddHHmmssSSS>``).

┌─────────────────────┬───────────────────────────────┬────────────────────────────────────┐
│ header (40 B)       │ slot table: slots × int32     │ entries: entries × 20 B            │
└─────────────────────┴───────────────────────────────┴────────────────────────────────────┘
header: begin ts (int64) │ end ts (int64) │ begin phy (int64) │ end phy (int64)
        │ hash slot count (int32) │ index count (int32: next entry number, 0 when empty)
slot:   number of the newest entry whose key hash falls in this slot (0 = empty)
entry:  key hash (int32) │ phy offset (int64) │ seconds since begin ts (int32) │ prev entry (int32)
Entry 0 is never used, so a file holds ``entries - 1`` keys. Chains run newest first.

Unlike RocketMQ, the first entry of every file takes its own store time as the file's begin
(RocketMQ measures it against the previous file's end, so it reads back shifted).
"""

import struct
from typing import NamedTuple

import numpy as np

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats.javahash import index_hash

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
# the header's begin ts, end ts and index count, the other fields skipped
SPAN = struct.Struct(">qq16x4xi")
assert SPAN.size == HEADER_SIZE
SLOT = struct.Struct(">i")
SLOT_SIZE = SLOT.size  # 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE
DEFAULT_SLOTS = 5_000_000
DEFAULT_ENTRIES = 20_000_000
INT_MAX = 2**31 - 1
KEY_SEPARATOR = "#"


def file_size(slots: int = DEFAULT_SLOTS, entries: int = DEFAULT_ENTRIES) -> int:
    return HEADER_SIZE + SLOT_SIZE * slots + ENTRY_SIZE * entries


def infer_shape(size: int, slots: int | None, entries: int | None,
                name: str = "index file") -> tuple[int, int]:
    """Slot and entry counts of an index file of ``size`` bytes."""
    rest = size - HEADER_SIZE
    formula = "size = 40 + 4*slots + 20*entries"
    if slots is not None and entries is not None:
        if file_size(slots, entries) != size:
            raise InvalidArgumentError(
                f"{name} is {size} bytes but {slots} slots and {entries} entries make "
                f"{file_size(slots, entries)} ({formula})"
            )
        return slots, entries
    if slots is not None:
        left = rest - SLOT_SIZE * slots
        if left <= 0 or left % ENTRY_SIZE:
            raise InvalidArgumentError(
                f"{name} is {size} bytes: no whole entry count fits {slots} slots ({formula})"
            )
        return slots, left // ENTRY_SIZE
    if entries is not None:
        left = rest - ENTRY_SIZE * entries
        if left <= 0 or left % SLOT_SIZE:
            raise InvalidArgumentError(
                f"{name} is {size} bytes: no whole slot count fits {entries} entries ({formula})"
            )
        return left // SLOT_SIZE, entries
    if size == file_size():
        return DEFAULT_SLOTS, DEFAULT_ENTRIES
    per = SLOT_SIZE + 4 * ENTRY_SIZE  # RocketMQ's default ratio: 4 entries per slot
    if rest > 0 and rest % per == 0:
        return rest // per, 4 * (rest // per)
    raise InvalidArgumentError(
        f"cannot infer the slot and entry counts of {name} ({size} bytes): it matches neither "
        f"the defaults ({DEFAULT_SLOTS} slots, {DEFAULT_ENTRIES} entries) nor 4 entries "
        f"per slot; pass --index-slots and/or --index-entries ({formula})"
    )


def build_key(topic: str, key: str) -> str:
    return f"{topic}{KEY_SEPARATOR}{key}"


class IndexHeader(NamedTuple):
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    @property
    def entries(self) -> int:
        """Entries written (index_count counts the unused entry 0 once anything is written)."""
        return max(self.index_count - 1, 0)


class Hit(NamedTuple):
    phy_offset: int
    time: int  # begin + whole seconds: the store time truncated to the second
    key_hash: int


class IndexFile:
    """An index file over a writable (or read-only, for queries) buffer such as an mmap."""

    def __init__(self, buf, slots: int = DEFAULT_SLOTS, entries: int = DEFAULT_ENTRIES) -> None:
        if len(buf) < file_size(slots, entries):
            raise ValueError(
                f"index buffer holds {len(buf)} bytes, {file_size(slots, entries)} needed"
            )
        self.buf = buf
        self.slots = slots
        self.entries = entries
        self.entry_base = HEADER_SIZE + SLOT_SIZE * slots  # where entry 0 begins
        h = HEADER.unpack_from(buf, 0)
        self.header = IndexHeader(*h)

    # -- reading -------------------------------------------------------------------------
    def read_header(self) -> IndexHeader:
        self.header = IndexHeader(*HEADER.unpack_from(self.buf, 0))
        return self.header

    def read_span(self) -> tuple[int, int, int]:
        """(begin ts, end ts, index count) as the header holds them now (``header`` is left
        as it was): what a reader needs per query, read in one go."""
        return SPAN.unpack_from(self.buf, 0)

    def slot(self, n: int) -> int:
        return SLOT.unpack_from(self.buf, HEADER_SIZE + SLOT_SIZE * n)[0]

    def entry(self, n: int) -> tuple[int, int, int, int]:
        return ENTRY.unpack_from(self.buf, self.entry_base + ENTRY_SIZE * n)

    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.entries

    @property
    def free(self) -> int:
        return self.entries - max(self.header.index_count, 1)

    def is_time_matched(self, begin: int, end: int) -> bool:
        fb, fe = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe

    def walk(
        self,
        key_hash: int,
        begin: int,
        end: int,
        max_hits: int,
        slack_ms: int = 0,
        max_hops: int | None = None,
    ) -> tuple[list[Hit], int]:
        """Follow the slot chain of ``key_hash`` newest first; return (hits, hops walked).

        ``slack_ms=0`` is RocketMQ's ``selectPhyOffset``: an entry's time is its truncated
        second. With ``slack_ms=999`` an entry counts if its real store time may lie in
        [begin, end], so a hit at the exact begin is never dropped (callers then check the
        record's real store time). Hash matches only: callers check the key.
        """
        hdr = self.header
        count = hdr.index_count
        hits: list[Hit] = []
        hops = 0
        if count <= 1:
            return hits, hops
        n = self.slot(key_hash % self.slots)
        if n <= 0 or n > count:
            return hits, hops
        base, entry, buf = self.entry_base, ENTRY, self.buf
        while len(hits) < max_hits:
            if max_hops is not None and hops >= max_hops:
                break
            hops += 1
            kh, phy, diff, prev = entry.unpack_from(buf, base + ENTRY_SIZE * n)
            if diff < 0:
                break
            t = hdr.begin_timestamp + diff * 1000
            if kh == key_hash and begin <= t + slack_ms and t <= end:
                hits.append(Hit(phy, t, kh))
            if prev <= 0 or prev > count or prev == n or t + slack_ms < begin:
                break
            n = prev
        return hits, hops

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """RocketMQ's ``IndexFile.selectPhyOffset`` for one file (hash matches only)."""
        hits, _ = self.walk(index_hash(key), begin, end, max_num)
        return [h.phy_offset for h in hits]

    # -- writing -------------------------------------------------------------------------
    def _write_header(self, h: IndexHeader) -> None:
        HEADER.pack_into(self.buf, 0, *h)
        self.header = h

    def put(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add one entry; False when the file is full (roll to a new one)."""
        return (
            self.put_many(
                np.array([key_hash], dtype=np.int64),
                np.array([phy_offset], dtype=np.int64),
                np.array([store_timestamp], dtype=np.int64),
            )
            == 1
        )

    def put_many(
        self,
        key_hashes: np.ndarray,
        phy_offsets: np.ndarray,
        store_timestamps: np.ndarray,
        chains: "Chains | None" = None,
    ) -> int:
        """Add entries in order, as repeated ``putKey`` would; return how many fit.

        ``chains`` (``batch_chains`` of the keys' slots) may be given when computed elsewhere,
        such as in parallel tasks of a rebuild."""
        h = self.header
        count = max(h.index_count, 1)
        n = min(len(key_hashes), self.entries - count)
        if n <= 0:
            return 0
        hashes = np.asarray(key_hashes[:n], dtype=np.int64)
        phys = np.asarray(phy_offsets[:n], dtype=np.int64)
        times = np.asarray(store_timestamps[:n], dtype=np.int64)
        begin_ts, begin_phy = h.begin_timestamp, h.begin_phy_offset
        if h.index_count <= 1:  # first entry: the file begins at its own time (fixes RocketMQ Q2)
            begin_ts, begin_phy = int(times[0]), int(phys[0])
        if begin_ts <= 0:
            diffs = np.zeros(n, dtype=np.int64)
        else:
            diffs = np.minimum(np.maximum(times - begin_ts, 0) // 1000, INT_MAX)
        slot_ids = hashes % self.slots
        if chains is None or n < len(key_hashes):  # a cut batch chains anew
            chains = batch_chains(slot_ids)
        slot_view = np.frombuffer(self.buf, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
        first = chains.prev < 0
        old = slot_view[slot_ids[first]].astype(np.int64)
        old[(old <= 0) | (old > count)] = 0  # RocketMQ treats such a slot as empty
        prev = count + chains.prev.astype(np.int64)
        prev[first] = old
        start = self.entry_base + ENTRY_SIZE * count
        written = np.frombuffer(self.buf, dtype=ENTRY_DTYPE, count=n, offset=start)
        written["hash"] = hashes
        written["phy"] = phys
        written["diff"] = diffs
        written["prev"] = prev
        last = np.flatnonzero(chains.last)
        slot_view[slot_ids[last]] = count + last
        self._write_header(
            IndexHeader(
                begin_timestamp=begin_ts,
                end_timestamp=int(times[-1]),
                begin_phy_offset=begin_phy,
                end_phy_offset=int(phys[-1]),
                hash_slot_count=h.hash_slot_count + int(np.count_nonzero(old == 0)),
                index_count=count + n,
            )
        )
        return n


class Chains(NamedTuple):
    """How a batch of keys chains among itself, slot by slot."""

    prev: np.ndarray  # int32: the batch index of the key before it in its slot, -1 if none
    last: np.ndarray  # bool: the key is the last of its slot in the batch


def batch_chains(slot_ids: np.ndarray) -> Chains:
    """The chains of keys put in this order into these slots."""
    n = len(slot_ids)
    order = np.argsort(slot_ids, kind="stable").astype(np.int32)
    s_slots = slot_ids[order]
    first = np.ones(n, dtype=bool)
    first[1:] = s_slots[1:] != s_slots[:-1]
    s_prev = np.empty(n, dtype=np.int32)
    s_prev[1:] = order[:-1]
    s_prev[first] = -1
    prev = np.empty(n, dtype=np.int32)
    prev[order] = s_prev
    last = np.empty(n, dtype=bool)
    last[order[:-1]] = first[1:]
    if n:
        last[order[-1]] = True
    return Chains(prev, last)
