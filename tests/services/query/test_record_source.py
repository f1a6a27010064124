"""Record bytes from a real writer process: streams, the unary fallback, restarts, timeouts."""

import asyncio
import signal
import threading
import time

import pytest

from rmqstore.errors import OffsetOutOfRangeError, UnavailableError
from rmqstore.formats import commitlog
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.query.record_source import GrpcRecordSource, read_some
from tests import procs
from tests.aio import run

pytestmark = pytest.mark.integration


def _writer(store, listen="127.0.0.1:0"):
    return procs.start("services.commitlog", "--store", str(store), "--listen", listen,
                       "--commitlog-segment-size", str(1 << 20))  # fmt: skip


def _put(address, n):
    stub = commitlog_pb2_grpc.CommitLogStub(channel(address))
    msgs = [common_pb2.Message(topic="Src", body=f"b{i}".encode()) for i in range(n)]
    results = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs)).results
    return [r.phy_offset for r in results]


@pytest.fixture
def writer(tmp_path):
    p = _writer(tmp_path / "store")
    yield p
    p.stop()


def _bodies(raws):
    return [commitlog.decode(r).body for r in raws]


async def _ended(src: GrpcRecordSource) -> None:
    """Until the source's open streams have ended."""
    for stream in src._open:
        await stream.closed()


def _source(address: str, **kwargs) -> GrpcRecordSource:
    async def make() -> GrpcRecordSource:  # on the loop that will use its channel
        return GrpcRecordSource(address, **kwargs)

    return run(make())


@pytest.mark.parametrize("streams", [0, 1, 4])
def test_reads_are_exact_with_and_without_streams(writer, streams):
    offsets = _put(writer.address, 40)
    src = _source(writer.address, streams=streams)
    try:
        assert _bodies(run(src.read(offsets))) == [f"b{i}".encode() for i in range(40)]

        async def reader(k: int) -> None:  # more readers than streams: the rest go unary
            for i in range(k, 40, 8):
                assert _bodies(await src.read([offsets[i]])) == [f"b{i}".encode()]

        async def readers() -> None:
            await asyncio.wait_for(asyncio.gather(*(reader(k) for k in range(8))), 30)

        run(readers())
        assert len(src._open) == min(streams, 8)
    finally:
        run(src.close())


def test_a_refused_read_keeps_the_stream(writer):
    offsets = _put(writer.address, 3)
    src = _source(writer.address, streams=1)
    try:
        with pytest.raises(OffsetOutOfRangeError, match="does not start a record"):
            run(src.read([offsets[1] + 1]))
        assert run(read_some(src, [offsets[0], offsets[2] + 10**6, offsets[2]]))[1] is None
        assert _bodies(run(src.read([offsets[2]]))) == [b"b2"]
        assert len(src._open) == 1  # still the one stream
    finally:
        run(src.close())


@pytest.mark.parametrize("noticed", [False, True])
def test_reads_resume_after_the_writer_restarts(tmp_path, noticed):
    store = tmp_path / "store"
    w = _writer(store)
    address = w.address
    offsets = _put(address, 5)
    src = _source(address, streams=2, timeout=5)
    try:
        assert _bodies(run(src.read(offsets[:1]))) == [b"b0"]
        w.kill()
        if noticed:  # the idle stream has ended before the next read is written to it
            run(asyncio.wait_for(_ended(src), 10))
        with pytest.raises(UnavailableError):
            run(src.read(offsets[:1]))
        w = _writer(store, address)  # same port
        deadline = time.monotonic() + 30
        while True:  # the channel reconnects after its back-off
            try:
                raws = run(src.read(offsets))
                break
            except UnavailableError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert _bodies(raws) == [f"b{i}".encode() for i in range(5)]
    finally:
        run(src.close())
        w.stop()


def test_a_read_from_a_stalled_writer_times_out(writer):
    offsets = _put(writer.address, 2)
    src = _source(writer.address, streams=1, timeout=0.5)
    try:
        assert run(src.read(offsets[:1]))
        writer.proc.send_signal(signal.SIGSTOP)
        procs.wait_stopped(writer.proc.pid)
        t0 = time.monotonic()
        try:
            with pytest.raises(UnavailableError):
                run(src.read(offsets[1:]))
        finally:
            writer.proc.send_signal(signal.SIGCONT)
        assert time.monotonic() - t0 < 5  # the stream was cancelled, then a unary call failed
        assert not src._open
        assert _bodies(run(src.read(offsets))) == [b"b0", b"b1"]
    finally:
        run(src.close())


def test_a_writer_refusing_streams_is_read_over_unary_calls(writer):
    from services.commitlog.servicer import MAX_READ_STREAMS

    offsets = _put(writer.address, 2)
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    gate = threading.Event()

    def hold():
        yield commitlog_pb2.ReadRecordsRequest(offsets=offsets[:1])
        gate.wait(30)

    held = [stub.ReadRecordsStream(hold()) for _ in range(MAX_READ_STREAMS)]
    src = _source(writer.address, streams=2)
    try:
        for call in held:
            assert next(call).records  # every stream the writer allows is taken
        assert _bodies(run(src.read(offsets))) == [b"b0", b"b1"]  # refused, then unary
        assert not src._open
        assert _bodies(run(src.read(offsets[1:]))) == [b"b1"]
        assert not src._open  # no new stream is tried for a while
    finally:
        gate.set()
        for call in held:
            call.cancel()
        run(src.close())
