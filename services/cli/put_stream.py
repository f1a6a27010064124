"""A producer's batches over one ``PutStream``, up to ``inflight`` unanswered, on asyncio.

The producer's one thread writes each request, reads each answer and times it on an event
loop (``grpc.aio``); a blocking stream would instead hand every request to gRPC's own thread
through a queue and wake the producer for every answer. ``rmqstore put`` and the put
benchmarks send their streams through ``send_all``.
"""

import collections
import time
from collections.abc import Iterable

import grpc

from rmqstore.v1 import commitlog_pb2

STATUS_NAMES = {s: commitlog_pb2.PutStatus.Name(s) for s in commitlog_pb2.PutStatus.values()}


class Refused(grpc.RpcError):
    """A batch the writer answered with an error status, or a stream it ended early;
    ``acknowledged``: the messages stored before it, when the raiser knows them."""

    def __init__(self, code: grpc.StatusCode, details: str, acknowledged: int = 0) -> None:
        super().__init__(details)
        self._code, self._details = code, details
        self.acknowledged = acknowledged

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def request(batch: list | commitlog_pb2.MessageColumns) -> commitlog_pb2.PutBatchRequest:
    """The stream's request for a batch of Messages or one MessageColumns (answers as
    columns: the cheapest to make and to read)."""
    if isinstance(batch, commitlog_pb2.MessageColumns):
        return commitlog_pb2.PutBatchRequest(columns=batch, columnar_results=True)
    return commitlog_pb2.PutBatchRequest(messages=batch, columnar_results=True)


async def send_all(
    stub, requests: Iterable[commitlog_pb2.PutBatchRequest], inflight: int,
    latencies: list[float], progress: list[int] | None = None,
    statuses: collections.Counter | None = None,
) -> int:  # fmt: skip
    """Send every request over one ``PutStream`` of ``stub`` (a ``grpc.aio`` stub), waiting
    for the oldest answer whenever ``inflight`` are unanswered; append each batch's time from
    sending to its answer to ``latencies``. Returns the messages acknowledged (also kept in
    ``progress[0]`` as they come, for a caller that must report them after a failure);
    counts the messages per put status name (PUT_OK, ...) in ``statuses``; raises
    ``Refused`` for a batch the writer refused, ``grpc.aio.AioRpcError`` if the call fails."""
    progress = [0] if progress is None else progress
    call = stub.PutStream()
    sent: collections.deque[float] = collections.deque()
    acknowledged = 0

    async def answer() -> int:
        reply = await call.read()
        if reply is grpc.aio.EOF:  # ended without an error status, yet owing answers
            raise Refused(
                grpc.StatusCode.UNKNOWN,
                f"the writer ended the stream with {len(sent)} batches unanswered",
            )
        latencies.append(time.perf_counter() - sent.popleft())
        if reply.status_code:
            code = next(c for c in grpc.StatusCode if c.value[0] == reply.status_code)
            raise Refused(code, reply.error)
        columns = reply.response.columns
        n = len(columns.phy_offset)
        progress[0] += n
        if statuses is not None:
            statuses[STATUS_NAMES[columns.status]] += n
        return n

    try:
        for r in requests:
            sent.append(time.perf_counter())
            await call.write(r)
            if len(sent) >= inflight:
                acknowledged += await answer()
        await call.done_writing()
        while sent:
            acknowledged += await answer()
    finally:
        call.cancel()  # nothing left to hear, or a failure to stop at
    return acknowledged
