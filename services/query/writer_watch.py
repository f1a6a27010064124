"""The query service's watch on its writer: health follows whether it can be used.

Every ``interval`` seconds the service asks the writer for its offsets. It is SERVING only
while the writer answers and announces this store's identity (``rmqstore.identity``); a
change is logged once, at WARNING with the reason (a refused TLS handshake, the writer down)
or at ERROR for a writer of another store. The expected id is read again each time, so a
store whose writer creates its id after the query service started is accepted then.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc

from rmqstore.errors import WrongStoreError
from rmqstore.layout import StoreLayout
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from rmqstore.writer_link import check_identity
from services.query.record_source import GrpcRecordSource

log = logging.getLogger(__name__)
INTERVAL_S = 1.0


class WriterWatch:
    """Probes over a channel of its own (``probe_channel``): failed probes while the writer is
    away must not put the channel that reads records into gRPC's reconnect back-off."""

    def __init__(self, source: GrpcRecordSource, layout: StoreLayout,
                 set_serving: Callable[[bool], Awaitable[None]],
                 probe_channel: grpc.aio.Channel, interval: float = INTERVAL_S) -> None:
        self.source, self.layout = source, layout
        self._channel = probe_channel
        self._stub = commitlog_pb2_grpc.CommitLogStub(probe_channel)
        self.set_serving = set_serving
        self.interval = interval
        self.problem: str | None = None  # None: not checked yet; "": fine
        self._task: asyncio.Task | None = None

    async def check(self) -> str:
        """Ask once; returns the problem ("" when the writer is usable) and updates health."""
        try:
            offsets = await self._stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(),
                                                  timeout=max(self.interval * 3, 2.0))
            self.source.store_id = check_identity(self.layout, offsets, self.source.address)
            problem = ""
        except grpc.RpcError as e:
            code, detail = e.code().name, e.details()  # type: ignore[attr-defined]
            problem = f"the writer at {self.source.address} cannot be used ({code}: {detail})"
        except (WrongStoreError, ValueError) as e:
            problem = str(e)
        if problem != self.problem:
            if problem:
                level = logging.ERROR if "another store" in problem else logging.WARNING
                log.log(level, "query: %s; NOT_SERVING until it can", problem)
            elif self.problem is not None:
                log.warning("query: the writer at %s is usable again; SERVING",
                            self.source.address)
            await self.set_serving(not problem)
        self.problem = problem
        return problem

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    def start(self) -> None:
        """Keep checking on the running loop until ``stop``."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()
