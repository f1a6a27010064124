"""A CommitLog server that stores nothing: the gRPC transport ceiling for put benchmarks.

It runs on the same kind of server as the writer (``AsyncService``, one event loop), so a
ratio to it is the store's own cost."""

import sys

import grpc

from rmqstore.server import AsyncService
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc


class NoopCommitLog(commitlog_pb2_grpc.CommitLogServicer):
    async def GetOffsets(self, request, context):
        return commitlog_pb2.Offsets()

    async def PutStream(self, request_iterator, context):
        async for request in request_iterator:
            yield commitlog_pb2.PutStreamReply(response=await self.PutBatch(request, context))

    async def PutBatch(self, request, context):
        if request.HasField("columns"):  # read every column, as the writer does
            c = request.columns
            n, queues = len(c.body_size), list(c.queue_id)
            if len(c.bodies) != sum(c.body_size):  # the bodies are read, as by the writer
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bodies do not add up")
            keys, uniqs = list(c.keys), list(c.unique_key)
            return commitlog_pb2.PutBatchResponse(
                columns=commitlog_pb2.PutResultColumns(
                    msg_id=[f"7F00000100002A9F{i:016X}" for i in range(n)],
                    unique_key=uniqs or [f"7F0000010000000000000000{i:08X}" for i in range(n)],
                    phy_offset=range(n),
                    queue_offset=range(n),
                    size=[s + len(k) for s, k in zip(c.body_size, keys or [""] * n, strict=True)],
                    store_timestamp=1,
                    topic=[c.topic] * n,
                    queue_id=queues if len(queues) == n else queues * n,
                )
            )
        if request.columnar_results:
            msgs = request.messages
            return commitlog_pb2.PutBatchResponse(
                columns=commitlog_pb2.PutResultColumns(
                    msg_id=[f"7F00000100002A9F{i:016X}" for i in range(len(msgs))],
                    unique_key=[m.unique_key or "7F000001000000000000000000000000" for m in msgs],
                    phy_offset=range(len(msgs)),
                    queue_offset=range(len(msgs)),
                    size=[len(m.body) for m in msgs],
                    store_timestamp=1,
                    topic=[m.topic for m in msgs],
                    queue_id=[m.queue_id for m in msgs],
                )
            )
        return commitlog_pb2.PutBatchResponse(
            results=[
                commitlog_pb2.PutResult(
                    msg_id="7F00000100002A9F0000000000000000",
                    unique_key=m.unique_key or "7F000001000000000000000000000000",
                    phy_offset=i,
                    queue_offset=i,
                    size=len(m.body),
                    store_timestamp=1,
                    topic=m.topic,
                    queue_id=m.queue_id,
                )
                for i, m in enumerate(request.messages)
            ]
        )


def main() -> int:
    service = AsyncService(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:0")
    service.add(
        commitlog_pb2_grpc.add_CommitLogServicer_to_server,
        NoopCommitLog(),
        commitlog_pb2.DESCRIPTOR,
        "CommitLog",
    )
    service.serve("noop", lambda: service.stop(0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
