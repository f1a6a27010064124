"""Serialized dispatch chunks, joined, are the batch their messages merge into."""

from hypothesis import given
from hypothesis import strategies as st

from rmqstore.v1 import commitlog_pb2
from services.commitlog.wire_batch import WireBatch

_INT = st.integers(0, 1 << 40)
_TEXT = st.text(max_size=6)


@st.composite
def _chunks(draw):
    chunks, next_offset = [], 0
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(0, 4))

        def column(values, n=n):
            return draw(st.lists(values, min_size=n, max_size=n))

        next_offset += draw(st.integers(1, 1000))
        chunks.append(
            commitlog_pb2.DispatchBatch(
                topic=column(_TEXT),
                queue_id=column(st.integers(0, 7)),
                queue_offset=column(_INT),
                phy_offset=column(_INT),
                size=column(st.integers(0, 100_000)),
                tags_code=column(_INT),
                store_timestamp=column(_INT),
                keys=column(_TEXT),
                unique_key=column(_TEXT),
                sys_flag=column(st.integers(0, 15)),
                prepared_transaction_offset=column(_INT),
                next_offset=next_offset,
                max_offset=next_offset + draw(st.integers(0, 1)),
            )
        )
    return chunks


@given(_chunks())
def test_joined_chunks_are_their_merge(chunks):
    merged = commitlog_pb2.DispatchBatch()
    for c in chunks:
        merged.MergeFrom(c)
    wire = WireBatch.joined([WireBatch.of(c) for c in chunks])
    assert wire.parse() == merged
    assert wire.records == len(merged.phy_offset)
    assert wire.next_offset == chunks[-1].next_offset == merged.next_offset
