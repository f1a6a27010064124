"""``put_stream.send_all`` against a real writer: answers counted and timed, refusals raised."""

import collections

import grpc
import pytest

from rmqstore.server import CHANNEL_OPTIONS
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.cli import put_stream
from tests.aio import run
from tests.services.cli.dispatched import dispatched

pytestmark = pytest.mark.integration


def _columns(topic: str, first: int, n: int) -> commitlog_pb2.MessageColumns:
    return commitlog_pb2.MessageColumns(
        topic=topic, body_size=[3] * n, bodies=b"abc" * n, queue_id=[0],
        keys=[f"k-{i}" for i in range(first, first + n)],
    )  # fmt: skip


def _send(address: str, batches: list, inflight: int, latencies: list[float]) -> int:
    async def go() -> int:
        async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as ch:
            stub = commitlog_pb2_grpc.CommitLogStub(ch)
            return await put_stream.send_all(stub, map(put_stream.request, batches), inflight,
                                             latencies)  # fmt: skip

    return run(go())


def _stored(address: str) -> collections.Counter:
    """Messages in the writer's commitlog, by topic."""
    return collections.Counter(t for b in dispatched(address) for t in b.topic)


@pytest.mark.parametrize("inflight", [1, 3, 10])
def test_every_batch_is_answered_and_timed(writer, inflight):
    latencies: list[float] = []
    batches = [_columns("Streamed", 7 * k, 7) for k in range(5)]
    batches.insert(2, [common_pb2.Message(topic="Streamed", body=b"one")])  # Messages too
    assert _send(writer.address, batches, inflight, latencies) == 36
    assert len(latencies) == 6 and all(t > 0 for t in latencies)
    assert _stored(writer.address) == {"Streamed": 36}


def test_a_refused_batch_raises_its_status_and_stores_nothing_of_it(writer):
    latencies: list[float] = []
    batches = [_columns("Good", 0, 4), _columns("../evil", 4, 4), _columns("Good", 8, 4)]
    with pytest.raises(put_stream.Refused) as e:
        _send(writer.address, batches, 1, latencies)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "topic" in e.value.details()
    assert len(latencies) == 2  # the first batch's answer, then the refusal
    assert _stored(writer.address) == {"Good": 4}
    assert _send(writer.address, [_columns("Good", 12, 2)], 1, []) == 2  # still serving
    assert _stored(writer.address) == {"Good": 6}


def test_a_writer_that_is_gone_fails_the_call(writer):
    address = writer.address
    writer.stop()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        _send(address, [_columns("Gone", 0, 1)], 1, [])
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
