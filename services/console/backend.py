"""The console's gRPC clients: the query service, the writer (the store's offsets) and the
proxy (consumer groups), the last two optional.

Errors come back as :class:`BackendError` with the HTTP status the console answers with.
"""

from dataclasses import dataclass
from typing import Any

import grpc

from rmqstore import access_keys
from rmqstore.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    groups_pb2,
    groups_pb2_grpc,
    query_pb2,
    query_pb2_grpc,
)

HTTP_OF_GRPC = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class BackendError(Exception):
    """A call that failed: ``status`` is the HTTP status, ``code`` the gRPC status name."""

    def __init__(self, message: str, status: int, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass
class Backend:
    query: query_pb2_grpc.QueryStub
    writer: commitlog_pb2_grpc.CommitLogStub | None
    channels: list[grpc.aio.Channel]
    timeout: float = 30.0
    groups: groups_pb2_grpc.ConsumerGroupsStub | None = None
    proxy_keys: tuple[str, str] = ("", "")  # access key, secret: the proxy's calls signed

    @classmethod
    def connect(cls, query: grpc.aio.Channel, writer: grpc.aio.Channel | None,
                timeout: float = 30.0, proxy: grpc.aio.Channel | None = None,
                proxy_keys: tuple[str, str] = ("", "")) -> "Backend":
        """Stubs over channels made on the event loop that serves the console."""
        return cls(query_pb2_grpc.QueryStub(query),
                   commitlog_pb2_grpc.CommitLogStub(writer) if writer is not None else None,
                   [c for c in (query, writer, proxy) if c is not None], timeout,
                   groups_pb2_grpc.ConsumerGroupsStub(proxy) if proxy is not None else None,
                   proxy_keys)

    async def close(self) -> None:
        for c in self.channels:
            await c.close()

    async def _call(self, method: Any, request: Any, metadata: Any = ()) -> Any:
        try:
            return await method(request, timeout=self.timeout, metadata=metadata)
        except grpc.aio.AioRpcError as e:
            code = e.code()
            raise BackendError(e.details() or code.name, HTTP_OF_GRPC.get(code, 502),
                               code.name) from None

    async def by_key(self, topic: str, key: str, begin: int, end: int, max_results: int,
                     cursor: str, cluster: bool = False) -> query_pb2.QueryByKeyResponse:
        return await self._call(self.query.QueryByKey, query_pb2.QueryByKeyRequest(
            topic=topic, key=key, begin_timestamp=begin, end_timestamp=end,
            max_results=max_results, cursor=cursor, scope=_scope(cluster)))

    async def by_id(self, msg_id: str, topic: str, cluster: bool = False
                    ) -> query_pb2.QueryByIdResponse:
        return await self._call(self.query.QueryById, query_pb2.QueryByIdRequest(
            id=msg_id, topic=topic, scope=_scope(cluster)))

    async def pull(self, topic: str, queue: int, offset: int, max_messages: int
                   ) -> query_pb2.PullResponse:
        return await self._call(self.query.Pull, query_pb2.PullRequest(
            topic=topic, queue_id=queue, offset=offset, max_messages=max_messages))

    async def offsets(self, topic: str, queue: int) -> tuple[int, int]:
        r = await self._call(self.query.QueueOffsets,
                             query_pb2.QueueOffsetsRequest(topic=topic, queue_id=queue))
        return r.min_offset, r.max_offset

    async def offset_by_time(self, topic: str, queue: int, ms: int, upper: bool) -> int:
        r = await self._call(self.query.OffsetByTime, query_pb2.OffsetByTimeRequest(
            topic=topic, queue_id=queue, timestamp=ms,
            boundary=query_pb2.UPPER if upper else query_pb2.LOWER))
        return int(r.offset)

    async def commitlog(self) -> commitlog_pb2.Offsets | None:
        """The writer's offsets, None when no writer address was given."""
        if self.writer is None:
            return None
        return await self._call(self.writer.GetOffsets, commitlog_pb2.GetOffsetsRequest())

    async def writer_status(self) -> commitlog_pb2.WriterStatus | None:
        """The writer's background services, None when no writer address was given."""
        if self.writer is None:
            return None
        return await self._call(self.writer.GetStatus, commitlog_pb2.GetStatusRequest())

    def _groups(self) -> groups_pb2_grpc.ConsumerGroupsStub:
        if self.groups is None:
            raise BackendError("consumer groups are not shown: the proxy is not configured "
                               "(start the console with --proxy HOST:PORT)", 503,
                               "PROXY_NOT_CONFIGURED")
        return self.groups

    async def list_groups(self) -> groups_pb2.ListGroupsResponse:
        return await self._call(self._groups().ListGroups, groups_pb2.ListGroupsRequest(),
                                access_keys.metadata(*self.proxy_keys))

    async def describe_group(self, group: str) -> groups_pb2.DescribeGroupResponse:
        return await self._call(self._groups().DescribeGroup,
                                groups_pb2.DescribeGroupRequest(group=group),
                                access_keys.metadata(*self.proxy_keys))


def _scope(cluster: bool) -> query_pb2.Scope:
    return query_pb2.SCOPE_CLUSTER if cluster else query_pb2.SCOPE_BROKER
