"""A dispatch batch as it goes to the builders: serialized once, sent to every subscriber.

Serialized protobuf messages concatenate into their merge: parsing ``a + b`` appends b's
repeated fields to a's and keeps b's scalars where b sets them. A batch's fields are all
repeated but ``next_offset`` and ``max_offset``, which the later chunk sets; so the chunks of
consecutive puts, joined, are the batch that covers them all, with no message built, merged or
serialized again per subscriber (merging 41 chunks of 100 records and serializing the result
took 2.6 ms for each subscriber; joining them takes 14 us).
"""

from collections.abc import Sequence
from typing import NamedTuple

from rmqstore.v1 import commitlog_pb2


class WireBatch(NamedTuple):
    data: bytes  # a serialized DispatchBatch
    records: int
    next_offset: int

    @classmethod
    def of(cls, batch: commitlog_pb2.DispatchBatch) -> "WireBatch":
        return cls(batch.SerializeToString(), len(batch.phy_offset), batch.next_offset)

    @classmethod
    def joined(cls, chunks: Sequence["WireBatch"]) -> "WireBatch":
        """Consecutive chunks as one batch (the last one's next offset)."""
        if len(chunks) == 1:
            return chunks[0]
        data = b"".join(c.data for c in chunks)
        return cls(data, sum(c.records for c in chunks), chunks[-1].next_offset)

    def parse(self) -> commitlog_pb2.DispatchBatch:
        return commitlog_pb2.DispatchBatch.FromString(self.data)
