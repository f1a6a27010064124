"""gRPC Query servicer: proto in, domain call, proto out. No lookup logic lives here.

Methods are ``async``: the service runs them on one ``grpc.aio`` event loop."""

import functools
import time
from collections.abc import Callable
from typing import Any

from rmqstore.errors import InvalidArgumentError, StoreError
from rmqstore.formats import commitlog
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.server import grpc_errors
from rmqstore.v1 import common_pb2, query_pb2, query_pb2_grpc
from services.query.lookup import KeyLookup
from services.query.metrics import QueryObserver
from services.query.offset_by_time import Boundary, TimeSearch
from services.query.pull import Puller


def stored_message(rec: commitlog.Record) -> common_pb2.StoredMessage:
    props = rec.property_map
    return common_pb2.StoredMessage(
        msg_id=offset_msg_id(rec.store_host.ip, rec.store_host.port, rec.physical_offset),
        unique_key=rec.uniq_key,
        topic=rec.topic,
        queue_id=rec.queue_id,
        queue_offset=rec.queue_offset,
        phy_offset=rec.physical_offset,
        size=rec.total_size,
        store_timestamp=rec.store_timestamp,
        born_timestamp=rec.born_timestamp,
        born_host=str(rec.born_host),
        store_host=str(rec.store_host),
        sys_flag=rec.sys_flag,
        flag=rec.flag,
        reconsume_times=rec.reconsume_times,
        body_crc=rec.body_crc,
        keys=rec.keys,
        tags=rec.tags,
        properties=[common_pb2.Property(name=k, value=v) for k, v in props.items()],
        body=rec.body,
        prepared_transaction_offset=rec.prepared_transaction_offset,
    )


def _observed(kind: str) -> Callable[[Callable], Callable]:
    """Count and time a method by kind and outcome (inside ``grpc_errors``, so a StoreError's
    status is its outcome)."""

    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        async def inner(self: "QueryServicer", request: Any, context: Any) -> Any:
            t0 = time.perf_counter()
            outcome = "error"
            try:
                response = await method(self, request, context)
                outcome = _outcome(response)
                return response
            except StoreError as e:
                outcome = e.grpc_status.lower()
                raise
            finally:
                self.observer.answered(kind, outcome, time.perf_counter() - t0)

        return inner

    return wrap


def _outcome(response: Any) -> str:
    if isinstance(response, query_pb2.PullResponse):
        return query_pb2.PullStatus.Name(response.status).lower()
    if isinstance(response, query_pb2.QueryByKeyResponse):
        if response.truncated:
            return "truncated"
        return "found" if response.messages else "not_found"
    if isinstance(response, query_pb2.QueryByIdResponse):
        return "found" if response.messages else "not_found"
    return "found"


class QueryServicer(query_pb2_grpc.QueryServicer):
    def __init__(self, keys: KeyLookup, puller: Puller, times: TimeSearch,
                 observer: QueryObserver | None = None) -> None:
        self.keys = keys
        self.puller = puller
        self.times = times
        self.observer = observer or QueryObserver(None)

    @grpc_errors
    @_observed("key")
    async def QueryByKey(self, request, context):  # noqa: N802
        res = await self.keys.by_key(
            request.topic, request.key, request.begin_timestamp, request.end_timestamp,
            request.max_results, request.cursor,
        )
        self.observer.key_walk("key", res.hops, len(res.records), res.truncated,
                               res.budget_exhausted)
        return query_pb2.QueryByKeyResponse(
            messages=[stored_message(r) for r in res.records],
            truncated=res.truncated,
            cursor=res.cursor,
            budget_exhausted=res.budget_exhausted,
            chain_hops=res.hops,
        )

    @grpc_errors
    @_observed("id")
    async def QueryById(self, request, context):  # noqa: N802
        recs = await self.keys.by_id(request.id, request.topic)
        return query_pb2.QueryByIdResponse(messages=[stored_message(r) for r in recs])

    @grpc_errors
    @_observed("queue")
    async def Pull(self, request, context):  # noqa: N802
        res = await self.puller.pull(
            request.topic, request.queue_id, request.offset, request.max_messages,
            request.tag_expression,
        )
        return query_pb2.PullResponse(
            status=query_pb2.PullStatus.Name(res.status.value),
            messages=[stored_message(r) for r in res.records],
            next_offset=res.next_offset,
            min_offset=res.min_offset,
            max_offset=res.max_offset,
        )

    @grpc_errors
    @_observed("time")
    async def OffsetByTime(self, request, context):  # noqa: N802
        if request.boundary not in (query_pb2.LOWER, query_pb2.UPPER):
            raise InvalidArgumentError(
                f"boundary {request.boundary} is neither LOWER (0) nor UPPER (1)"
            )
        offset = await self.times.offset_by_time(
            request.topic, request.queue_id, request.timestamp, Boundary(request.boundary)
        )
        return query_pb2.OffsetByTimeResponse(offset=offset)

    @grpc_errors
    @_observed("offsets")
    async def QueueOffsets(self, request, context):  # noqa: N802
        mn, mx = await self.times.offsets(request.topic, request.queue_id)
        return query_pb2.QueueOffsetsResponse(min_offset=mn, max_offset=mx)
