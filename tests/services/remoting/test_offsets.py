"""``GroupOffsets``' pulls' commits against a ConsumerGroups server of the test's own (a table
and the calls it got, in order): kept and coalesced per queue, passed on within the linger,
read back at once, passed on before an explicit commit of the queue and at a graceful stop,
and counted (not raised) when the proxy cannot be asked."""

import asyncio
import logging

import grpc

from rmqstore.v1 import groups_pb2, groups_pb2_grpc
from services.remoting.offsets import GroupOffsets


class Table(groups_pb2_grpc.ConsumerGroupsServicer):
    def __init__(self) -> None:
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.calls: list[tuple[str, str, int, int]] = []

    async def CommitOffset(self, request, context):  # noqa: N802
        key = (request.group, request.topic, request.queue_id)
        self.calls.append((*key, request.offset))
        self.offsets[key] = request.offset
        return groups_pb2.CommitOffsetResponse(applied=True, committed=request.offset)

    async def QueryOffset(self, request, context):  # noqa: N802
        key = (request.group, request.topic, request.queue_id)
        return groups_pb2.QueryOffsetResponse(found=key in self.offsets,
                                              offset=self.offsets.get(key, 0))  # fmt: skip


def run(test, linger_s: float) -> Table:
    table = Table()

    async def main() -> None:
        server = grpc.aio.server()
        groups_pb2_grpc.add_ConsumerGroupsServicer_to_server(table, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                offsets = GroupOffsets(channel, linger_s=linger_s)
                await asyncio.wait_for(test(offsets, table), 30)
        finally:
            await server.stop(None)

    asyncio.run(main())
    return table


def test_a_queues_commits_are_kept_and_the_latest_passed_on_once_within_the_linger() -> None:
    async def test(offsets: GroupOffsets, table: Table) -> None:
        for offset in range(1, 101):
            offsets.commit_later("G", "T", 0, offset)  # a pull does not wait
        offsets.commit_later("G", "T", 1, 7)
        assert table.calls == []
        while offsets.commits < 2:
            await asyncio.sleep(0.01)

    table = run(test, linger_s=0.1)
    assert sorted(table.calls) == [("G", "T", 0, 100), ("G", "T", 1, 7)]


def test_a_query_reads_back_a_kept_commit_without_waiting_for_the_linger() -> None:
    async def test(offsets: GroupOffsets, _table: Table) -> None:
        offsets.commit_later("G", "T", 0, 5)
        assert await offsets.query("G", "T", 0) == 5  # the linger is 1 h: passed on now
        assert await offsets.query("G", "T", 1) is None

    table = run(test, linger_s=3600)
    assert table.calls == [("G", "T", 0, 5)]


def test_an_explicit_commit_comes_after_the_kept_one_of_its_queue() -> None:
    async def test(offsets: GroupOffsets, _table: Table) -> None:
        offsets.commit_later("G", "T", 0, 9)
        assert await offsets.commit("G", "T", 0, 4)  # a reset by the consumer: it wins
        assert await offsets.query("G", "T", 0) == 4

    table = run(test, linger_s=3600)
    assert table.calls == [("G", "T", 0, 9), ("G", "T", 0, 4)]


def test_a_graceful_stop_passes_on_what_is_kept() -> None:
    async def test(offsets: GroupOffsets, _table: Table) -> None:
        offsets.commit_later("G", "T", 2, 11)
        offsets.commit_later("H", "T", 2, 12)
        await offsets.close()

    table = run(test, linger_s=3600)
    assert sorted(table.calls) == [("G", "T", 2, 11), ("H", "T", 2, 12)]


def test_commits_the_proxy_cannot_take_are_counted_and_logged_once(caplog) -> None:
    async def main() -> None:
        offsets = GroupOffsets(None, linger_s=3600)  # no --proxy
        for round_ in range(3):  # three rounds, each passed on at once by close()
            offsets.commit_later("G", "T", 0, round_)
            await offsets.close()
        assert offsets.lost == 3 and offsets.commits == 0

    with caplog.at_level(logging.WARNING, logger="rmqstore.remoting"):
        asyncio.run(main())
    warned = [r.getMessage() for r in caplog.records if "not passed on" in r.getMessage()]
    assert len(warned) == 1 and "without --proxy" in warned[0], warned


def test_commits_keep_flowing_while_a_query_waits() -> None:
    """Commits of other queues arriving without pause never keep a query waiting."""

    async def test(offsets: GroupOffsets, _table: Table) -> None:
        stop = asyncio.Event()

        async def pulls() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                offsets.commit_later("G", "T", 1 + n % 3, n)
                await asyncio.sleep(0.001)

        busy = asyncio.ensure_future(pulls())
        await asyncio.sleep(0.1)
        offsets.commit_later("G", "T", 0, 42)
        assert await offsets.query("G", "T", 0) == 42
        stop.set()
        await busy
        await offsets.close()

    table = run(test, linger_s=0.05)
    assert ("G", "T", 0, 42) in table.calls
