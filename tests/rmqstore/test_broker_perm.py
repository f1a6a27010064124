"""The broker's permission: kept in ``config/brokerPermission.json`` across restarts, checked,
refused on a store served read-only; topic perms masked by it; read through the writer's
``Topics`` service, the last value kept while the writer cannot be asked."""

import asyncio
import json

import grpc
import pytest

from rmqstore import broker_perm as B
from rmqstore.errors import InvalidArgumentError, ReadOnlyError
from rmqstore.v1 import topics_pb2, topics_pb2_grpc
from tests import procs


def test_the_permission_survives_a_reopen_and_bad_values_are_refused(tmp_path) -> None:
    assert B.PermissionFile(tmp_path).perm == B.READ_WRITE  # no file: read-write
    assert B.PermissionFile(tmp_path).set(B.READ_ONLY) == B.READ_ONLY
    assert json.loads((tmp_path / "config" / B.FILE).read_text()) == {"brokerPermission": 4}
    assert B.PermissionFile(tmp_path).perm == B.READ_ONLY
    with pytest.raises(InvalidArgumentError, match="not 6 .read-write. or 4"):
        B.PermissionFile(tmp_path).set(2)
    with pytest.raises(ReadOnlyError, match="--read-only"):
        B.PermissionFile(tmp_path, read_only=True).set(B.READ_WRITE)
    (tmp_path / "config" / B.FILE).write_text('{"brokerPermission": 7}')
    with pytest.raises(ValueError, match="brokerPermission is not 6 or 4: 7"):
        B.PermissionFile(tmp_path)


def test_topic_perms_keep_their_own_bits_within_the_brokers() -> None:
    assert B.masked(6, B.READ_ONLY) == 4
    assert B.masked(7, B.READ_ONLY) == 5  # TBW102 keeps inherit, loses write
    assert B.masked(4, B.READ_WRITE) == 4  # a read-only topic stays read-only
    assert B.masked(2, B.READ_ONLY) == 0


def test_the_reader_asks_the_writer_and_keeps_the_last_value(tmp_path) -> None:
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0")  # fmt: skip

    async def main() -> None:
        async with grpc.aio.insecure_channel(writer.address) as channel:
            reader = B.PermissionReader(channel, cache_s=0)
            assert reader.known() is None  # not read yet: the caller asks current()
            assert await reader.current() == B.READ_WRITE
            assert reader.known() == B.READ_WRITE
            assert await reader.set(B.READ_ONLY) == B.READ_ONLY
            assert await B.PermissionReader(channel).current() == B.READ_ONLY  # first: waits
            assert await B.PermissionReader(channel).refresh() == B.READ_ONLY
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await reader.set(5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        async with grpc.aio.insecure_channel("127.0.0.1:1") as gone:
            stale = B.PermissionReader(gone, cache_s=0)
            stale.perm = B.READ_ONLY
            assert await stale.current() == B.READ_ONLY
            with pytest.raises(grpc.aio.AioRpcError):
                await stale.refresh()

    try:
        asyncio.run(main())
    finally:
        writer.stop()
    again = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                        "127.0.0.1:0")  # fmt: skip

    async def reopened() -> None:
        async with grpc.aio.insecure_channel(again.address) as channel:
            assert await B.PermissionReader(channel).current() == B.READ_ONLY

    try:
        asyncio.run(reopened())
    finally:
        again.stop()


class _SlowReads(topics_pb2_grpc.TopicsServicer):
    """A writer whose permission reads answer only once the test says so (after a set was
    answered): the order a loaded writer may answer in (its calls run concurrently)."""

    def __init__(self) -> None:
        self.perm = B.READ_WRITE
        self.set_done = asyncio.Event()
        self.reading = asyncio.Event()

    async def GetBrokerPermission(self, request, context):  # noqa: N802 (gRPC's name)
        before = self.perm
        self.reading.set()
        await self.set_done.wait()
        return topics_pb2.BrokerPermission(perm=before)  # read before the set: stale

    async def SetBrokerPermission(self, request, context):  # noqa: N802
        self.perm = request.perm
        return topics_pb2.BrokerPermission(perm=self.perm)


def test_a_read_that_a_set_overtook_does_not_undo_it() -> None:
    async def main() -> None:
        server = grpc.aio.server()
        writer = _SlowReads()
        topics_pb2_grpc.add_TopicsServicer_to_server(writer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                reader = B.PermissionReader(channel)
                reading = asyncio.ensure_future(reader.refresh())  # asks before the set...
                await writer.reading.wait()
                assert await reader.set(B.READ_ONLY) == B.READ_ONLY
                writer.set_done.set()
                await reading  # ...and is answered after it, with the old value
                assert reader.perm == B.READ_ONLY
        finally:
            await server.stop(None)

    asyncio.run(main())
