"""What a put stored: one PutResult per message, or all of them as columns (``Stored``)."""

from collections.abc import Sequence
from typing import NamedTuple, overload

from rmqstore.formats.hosts import Host
from rmqstore.formats.msgid import offset_msg_id, offset_msg_ids


class PutResult(NamedTuple):
    msg_id: str
    unique_key: str
    phy_offset: int
    queue_offset: int
    size: int
    store_timestamp: int
    topic: str
    queue_id: int


class Stored(Sequence[PutResult]):
    """What one put stored, as columns: entry i answers message i (topic and queue as
    stored, i.e. the schedule topic for a delayed message). Indexing gives a PutResult.
    ``status``: the put's ``PutStatus`` (how durable it is, one for the whole put)."""

    __slots__ = (
        "store_host", "phy_offsets", "queue_offsets", "sizes", "store_timestamp", "topics",
        "queue_ids", "unique_keys", "status",
    )  # fmt: skip

    def __init__(
        self,
        store_host: Host,
        phy_offsets: Sequence[int],
        queue_offsets: Sequence[int],
        sizes: Sequence[int],
        store_timestamp: int,
        topics: Sequence[str],
        queue_ids: Sequence[int],
        unique_keys: Sequence[str],
    ) -> None:
        self.store_host = store_host
        self.phy_offsets, self.queue_offsets, self.sizes = phy_offsets, queue_offsets, sizes
        self.store_timestamp = store_timestamp
        self.topics, self.queue_ids, self.unique_keys = topics, queue_ids, unique_keys
        self.status = 0  # PutStatus (PUT_OK), set once replication has answered

    def msg_ids(self) -> list[str]:
        return offset_msg_ids(self.store_host.ip, self.store_host.port, self.phy_offsets)

    def __len__(self) -> int:
        return len(self.phy_offsets)

    @overload
    def __getitem__(self, i: int) -> PutResult: ...
    @overload
    def __getitem__(self, i: slice) -> list[PutResult]: ...
    def __getitem__(self, i: int | slice) -> PutResult | list[PutResult]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        phy = self.phy_offsets[i]
        return PutResult(
            offset_msg_id(self.store_host.ip, self.store_host.port, phy), self.unique_keys[i],
            phy, self.queue_offsets[i],
            self.sizes[i], self.store_timestamp, self.topics[i], self.queue_ids[i],
        )  # fmt: skip
