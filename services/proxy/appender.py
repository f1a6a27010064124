"""Appends through the commitlog writer, batching concurrent sends into ``PutBatch``.

Each send waits on a future; one task per batch slot takes whatever has queued up (at most
``batch_max``) and puts it as one batch on its own long-lived ``PutStream`` (a stream costs
less per batch than a call), so under load many sends share a batch and at rest a send goes
out at once. The writer validates a whole batch before writing any of it: when it
refuses one, every message of that batch is retried alone, so only the bad one fails.
Messages that must be stored together (a commit and its op record) are one group.
"""

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import grpc

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.proxy.status import BusinessError

Group = tuple[list[common_pb2.Message], asyncio.Future]


class Stored(NamedTuple):
    """Where a message was stored."""

    phy_offset: int
    queue_offset: int


def _error(e: grpc.aio.AioRpcError) -> BusinessError:
    if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
        return BusinessError(pb.BAD_REQUEST, e.details() or "refused by the store")
    if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return BusinessError(pb.TOO_MANY_REQUESTS, e.details() or "store is full or busy")
    return BusinessError(pb.INTERNAL_SERVER_ERROR, f"store unavailable: {e.details()}")


class Appender:
    def __init__(self, channel: grpc.aio.Channel, batch_max: int = 256, slots: int = 4) -> None:
        self.stub = commitlog_pb2_grpc.CommitLogStub(channel)
        self.batch_max = batch_max
        self._queue: asyncio.Queue[Group] = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._run()) for _ in range(slots)]
        self._streams: dict[int, Any] = {}  # slot -> its PutStream call
        self.batches = 0  # puts made (for tests and metrics)
        self.on_batch: Callable[[int], None] | None = None  # called with each put's size

    async def put(self, messages: Sequence[common_pb2.Message]) -> list[Stored]:
        """Store ``messages`` (all or none of them); their results in order."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((list(messages), future))
        return await future

    async def read(self, offset: int) -> bytes:
        return (await self.read_many([offset]))[0]

    async def read_many(self, offsets: Sequence[int]) -> list[bytes]:
        """Raw records at these commitlog offsets (each must start a record)."""
        try:
            reply = await self.stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=offsets))
        except grpc.aio.AioRpcError as e:
            raise _error(e) from None
        return list(reply.records)

    async def _run(self) -> None:
        slot = len(self._streams)
        self._streams[slot] = None
        while True:
            groups = [await self._queue.get()]
            count = len(groups[0][0])
            while not self._queue.empty() and count < self.batch_max:
                g = self._queue.get_nowait()
                groups.append(g)
                count += len(g[0])
            await self._put(slot, groups)

    async def _call(self, slot: int, request: commitlog_pb2.PutBatchRequest
                    ) -> commitlog_pb2.PutBatchResponse:  # fmt: skip
        """One batch over the slot's stream (opened on first use, again after a failure)."""
        stream = self._streams[slot]
        if stream is None:
            stream = self._streams[slot] = self.stub.PutStream()
        try:
            await stream.write(request)
            reply = await stream.read()
        except BaseException:
            self._streams[slot] = None
            stream.cancel()
            raise
        if reply is grpc.aio.EOF:
            self._streams[slot] = None
            raise BusinessError(pb.INTERNAL_SERVER_ERROR, "the store closed the stream")
        if reply.status_code:
            raise BusinessError(
                pb.BAD_REQUEST if reply.status_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
                else pb.INTERNAL_SERVER_ERROR, reply.error or "refused by the store",
            )  # fmt: skip
        return reply.response

    async def _put(self, slot: int, groups: list[Group]) -> None:
        messages = [m for ms, _f in groups for m in ms]
        try:
            reply = await self._call(
                slot, commitlog_pb2.PutBatchRequest(messages=messages, columnar_results=True)
            )
        except BusinessError as e:
            if e.code == pb.BAD_REQUEST and len(groups) > 1:
                for g in groups:  # find the bad one: each group alone
                    await self._put(slot, [g])
                return
            for _ms, f in groups:
                if not f.done():
                    f.set_exception(e)
            return
        except grpc.aio.AioRpcError as e:
            for _ms, f in groups:
                if not f.done():
                    f.set_exception(_error(e))
            return
        except Exception as e:  # never leave a sender waiting
            for _ms, f in groups:
                if not f.done():
                    f.set_exception(e)
            return
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(len(messages))
        c = reply.columns
        results = [Stored(*r) for r in zip(c.phy_offset, c.queue_offset, strict=True)]
        at = 0
        for ms, f in groups:
            if not f.done():
                f.set_result(results[at : at + len(ms)])
            at += len(ms)

    async def close(self) -> None:
        for stream in self._streams.values():
            if stream is not None:
                stream.cancel()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
