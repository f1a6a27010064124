"""The proxy's appender puts through a writer over either transport, and batches as the
senders send (the requests a batch makes: ``tests/rmqstore/test_put_requests.py``)."""

import asyncio

import grpc
import pytest

from rmqstore.formats import commitlog
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.v1 import common_pb2
from services.proxy.appender import Appender, Plain
from services.proxy.status import BusinessError
from tests import procs


def _plain(i: int) -> Plain:
    return Plain("T", i % 4, f"body{i}".encode(), "t", "", f"ID{i}", "127.0.0.1:5000")


@pytest.mark.integration
@pytest.mark.parametrize("over", ["grpc", "socket"])
def test_puts_over_the_stream_or_the_put_socket_and_a_gone_writer_is_an_error(tmp_path, over):
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--commitlog-segment-size", str(1 << 20),
                         "--put-socket", path)  # fmt: skip

    async def run() -> tuple[list, list, bytes, BusinessError]:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, put_socket=path if over == "socket" else "")
        try:
            first = await appender.put([_plain(0), _plain(1)])
            second = await appender.put([common_pb2.Message(topic="T", body=b"m", queue_id=1)])
            record = await appender.read(second[0].phy_offset)
            writer.kill()
            with pytest.raises(BusinessError) as gone:
                await appender.put([_plain(2)])
            return first, second, record, gone.value
        finally:
            await appender.close()
            await channel.close()

    try:
        first, second, record, gone = asyncio.run(run())
    finally:
        writer.stop()
    assert [s.queue_offset for s in first] == [0, 0] and first[0].phy_offset == 0
    assert second[0].queue_offset == 1 and second[0].phy_offset > first[1].phy_offset
    assert commitlog.decode(record).body == b"m"
    assert gone.code == pb.INTERNAL_SERVER_ERROR and "store" in str(gone)


@pytest.mark.integration
def test_batches_wait_to_fill_only_for_a_sender_with_puts_overlapping_and_arriving(tmp_path):
    """With a 60 s batch spacing a synchronous sender (one put at a time) would wait it out
    on every put after the first if batches lingered for it; a pipelining sender's
    overlapping puts are stored as ever."""
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--put-socket", path)  # fmt: skip

    async def run() -> tuple[list, list, list]:
        channel = grpc.aio.insecure_channel(writer.address)
        slow, quick = (Appender(channel, spacing_s=s, put_socket=path) for s in (60, 0.01))
        # lingers (in 0.2 s steps) only while more puts come: a burst that all waits already
        # goes after one step, not after the 60 s
        lingering = Appender(channel, spacing_s=0.2, linger_s=60, put_socket=path)
        try:
            lone = [await asyncio.wait_for(slow.put([_plain(0)], sender="sync"), 30)
                    for _ in range(3)]  # fmt: skip
            many = await asyncio.wait_for(asyncio.gather(
                *(quick.put([_plain(1)], sender="async") for _ in range(20))), 30)  # fmt: skip
            burst = [await asyncio.wait_for(lingering.put([_plain(2)], sender="a"), 30)]
            burst += await asyncio.wait_for(asyncio.gather(
                *(lingering.put([_plain(2)], sender="a") for _ in range(20))), 30)  # fmt: skip
            return lone, many, burst
        finally:
            for a in (slow, quick, lingering):
                await a.close()
            await channel.close()

    try:
        lone, many, burst = asyncio.run(run())
    finally:
        writer.stop()
    assert [s.queue_offset for [s] in lone] == [0, 1, 2]  # queue 0
    assert sorted(s.queue_offset for [s] in many) == list(range(20))  # queue 1
    assert sorted(s.queue_offset for [s] in burst) == list(range(21))  # queue 2


class _Feeder:
    """A pipelining sender: overlapping puts of ``records``, two every 20 ms, until stopped."""

    def __init__(self, appender: Appender, records: list, sender: str) -> None:
        self.appender, self.records, self.sender = appender, records, sender
        self.flow: list[asyncio.Future] = []
        self._feeding = True
        self._task = asyncio.ensure_future(self._feed())

    async def _feed(self) -> None:
        while self._feeding:
            self.flow.extend(
                asyncio.ensure_future(self.appender.put(self.records, sender=self.sender))
                for _ in range(2)
            )
            await asyncio.sleep(0.02)

    async def stop(self) -> list:
        """Stop feeding; every put's result, in order."""
        self._feeding = False
        await self._task
        return await asyncio.wait_for(asyncio.gather(*self.flow), 30)


@pytest.mark.integration
@pytest.mark.parametrize("slots", [1, 2])
def test_a_lone_put_ends_a_pipelining_senders_linger(tmp_path, slots):
    """A pipelining sender whose puts keep coming would hold its batch for the whole 60 s
    linger; a synchronous sender's put (or the proxy's own) arriving meanwhile ends it (one
    slot), or goes in a batch of its own that does not linger (two)."""
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--put-socket", path)  # fmt: skip

    async def run() -> tuple[list, list]:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, 10_000, slots, 0.2, path, 60, 10_000)
        try:
            await appender.put([_plain(1)], sender="async")  # a batch started just now
            feeder = _Feeder(appender, [_plain(1)], "async")
            await asyncio.sleep(0.5)  # its batches linger by now
            lone = await asyncio.wait_for(appender.put([_plain(0)], sender="sync"), 30)
            return lone, await feeder.stop()
        finally:
            await appender.close()
            await channel.close()

    try:
        lone, flow = asyncio.run(run())
    finally:
        writer.stop()
    assert [s.queue_offset for s in lone] == [0]
    assert sorted(s.queue_offset for [s] in flow) == list(range(1, len(flow) + 1))


@pytest.mark.integration
def test_a_batch_stops_lingering_once_enough_messages_wait(tmp_path):
    """A sender of large requests that keep coming would hold its batch for the whole 60 s
    linger; once LINGER_BELOW messages wait, the batch goes."""
    path = str(tmp_path / "w.sock")
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"), "--listen",
                         "127.0.0.1:0", "--put-socket", path)  # fmt: skip

    async def run() -> list:
        channel = grpc.aio.insecure_channel(writer.address)
        appender = Appender(channel, 10_000, 1, 0.2, path, 60)
        try:
            await appender.put([_plain(1)], sender="gen")  # a batch started just now
            feeder = _Feeder(appender, [_plain(1)] * 20, "gen")  # requests of 20 messages
            await asyncio.sleep(0.5)  # its batches linger by now
            first = await asyncio.wait_for(asyncio.shield(feeder.flow[-1]), 30)
            return [first, *await feeder.stop()]
        finally:
            await appender.close()
            await channel.close()

    try:
        flow = asyncio.run(run())
    finally:
        writer.stop()
    assert all(len(stored) == 20 for stored in flow)
