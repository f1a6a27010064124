"""gRPC Query servicer: proto in, domain call, proto out. No lookup logic lives here.

Methods are ``async``: the service runs them on one ``grpc.aio`` event loop."""

import functools
import time
from collections.abc import Callable, Iterable
from typing import Any

from rmqstore.errors import InvalidArgumentError, NoClusterError, StoreError
from rmqstore.formats import commitlog
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.server import grpc_errors, status_code
from rmqstore.v1 import query_pb2, query_pb2_grpc
from services.query.cluster_lookup import ClusterAnswer, ClusterLookup, fanout_timeout
from services.query.lookup import KeyLookup
from services.query.metrics import QueryObserver
from services.query.offset_by_time import Boundary, TimeSearch
from services.query.pull import Puller


def add_stored_messages(messages: Any, records: Iterable[commitlog.Record]) -> None:
    """Append the records to a response's repeated ``StoredMessage`` field, each filled in
    place (a message built apart and then handed to the response would be copied)."""
    add = messages.add
    for rec in records:
        m = add()
        m.msg_id = offset_msg_id(rec.store_host.ip, rec.store_host.port, rec.physical_offset)
        m.unique_key = rec.uniq_key
        m.topic = rec.topic
        m.queue_id = rec.queue_id
        m.queue_offset = rec.queue_offset
        m.phy_offset = rec.physical_offset
        m.size = rec.total_size
        m.store_timestamp = rec.store_timestamp
        m.born_timestamp = rec.born_timestamp
        m.born_host = str(rec.born_host)
        m.store_host = str(rec.store_host)
        m.sys_flag = rec.sys_flag
        m.flag = rec.flag
        m.reconsume_times = rec.reconsume_times
        m.body_crc = rec.body_crc
        m.keys = rec.keys
        m.tags = rec.tags
        add_property = m.properties.add
        for name, value in rec.property_map.items():
            p = add_property()  # then set: a third cheaper than add(name=..., value=...)
            p.name = name
            p.value = value
        m.body = rec.body
        m.prepared_transaction_offset = rec.prepared_transaction_offset


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
    if isinstance(response, (query_pb2.QueryByKeyResponse, query_pb2.QueryByIdResponse)) \
            and response.partial:
        return "partial"  # a cluster-wide answer some broker is missing from
    if isinstance(response, query_pb2.QueryByKeyResponse):
        if response.truncated:
            return "truncated"
        return "found" if response.messages else "not_found"
    if isinstance(response, query_pb2.QueryByIdResponse):
        return "found" if response.messages else "not_found"
    return "found"


def _cluster_fields(response: Any, answer: ClusterAnswer) -> None:
    response.messages.extend(answer.messages)
    response.message_brokers.extend(answer.brokers)
    response.brokers.extend(a.proto() for a in answer.statuses)
    response.partial = answer.partial


class QueryServicer(query_pb2_grpc.QueryServicer):
    def __init__(self, keys: KeyLookup, puller: Puller, times: TimeSearch,
                 observer: QueryObserver | None = None,
                 cluster: ClusterLookup | None = None) -> None:  # fmt: skip
        self.keys = keys
        self.puller = puller
        self.times = times
        self.observer = observer or QueryObserver(None)
        self.cluster = cluster

    def _cluster(self) -> ClusterLookup:
        if self.cluster is None:
            raise NoClusterError("this query service is in no cluster: a cluster-wide lookup "
                                 "needs it started with --namesrv (serve --namesrv)")
        return self.cluster

    @grpc_errors
    @_observed("key")
    async def QueryByKey(self, request, context):  # noqa: N802
        if request.scope == query_pb2.SCOPE_CLUSTER:
            timeout = fanout_timeout(context.time_remaining() if context else None)
            answer = await self._cluster().by_key(request, timeout)
            response = query_pb2.QueryByKeyResponse(
                truncated=answer.truncated, cursor=answer.cursor,
                budget_exhausted=answer.budget_exhausted, chain_hops=answer.hops)
            _cluster_fields(response, answer)
            return response
        return await self.local_by_key(request)

    async def local_by_key(self, request: Any, into: Any = None) -> query_pb2.QueryByKeyResponse:
        """This broker's own answer (built in ``into`` when given: no copy)."""
        res = await self.keys.by_key(
            request.topic, request.key, request.begin_timestamp, request.end_timestamp,
            request.max_results, request.cursor, request.below_phy_offset,
        )
        self.observer.key_walk("key", res.hops, len(res.records), res.truncated,
                               res.budget_exhausted)
        response = query_pb2.QueryByKeyResponse() if into is None else into
        response.truncated = res.truncated
        response.cursor = res.cursor
        response.budget_exhausted = res.budget_exhausted
        response.chain_hops = res.hops
        add_stored_messages(response.messages, res.records)
        return response

    @grpc_errors
    @_observed("id")
    async def QueryById(self, request, context):  # noqa: N802
        if request.scope == query_pb2.SCOPE_CLUSTER:
            timeout = fanout_timeout(context.time_remaining() if context else None)
            answer = await self._cluster().by_id(request, timeout)
            response = query_pb2.QueryByIdResponse()
            _cluster_fields(response, answer)
            return response
        return await self.local_by_id(request)

    async def local_by_id(self, request: Any, into: Any = None) -> query_pb2.QueryByIdResponse:
        recs = await self.keys.by_id(request.id, request.topic)
        response = query_pb2.QueryByIdResponse() if into is None else into
        add_stored_messages(response.messages, recs)
        return response

    async def PeerStream(self, requests, context):  # noqa: N802
        """A peer's parts of cluster-wide lookups, one at a time, each observed as a call."""
        async for request in requests:
            kind = request.WhichOneof("request")
            t0 = time.perf_counter()
            reply = query_pb2.PeerReply()
            try:
                if kind == "by_key":
                    reply.by_key.SetInParent()  # present even when empty
                    await self.local_by_key(request.by_key, reply.by_key)
                elif kind == "by_id":
                    reply.by_id.SetInParent()
                    await self.local_by_id(request.by_id, reply.by_id)
                else:
                    raise InvalidArgumentError("a peer request asks nothing")
                outcome = _outcome(reply.by_key if kind == "by_key" else reply.by_id)
            except StoreError as e:
                reply = query_pb2.PeerReply()
                reply.status_code = status_code(e).value[0]
                reply.error = str(e)
                outcome = e.grpc_status.lower()
            self.observer.answered("key" if kind == "by_key" else "id", outcome,
                                   time.perf_counter() - t0)  # fmt: skip
            yield reply

    @grpc_errors
    @_observed("queue")
    async def Pull(self, request, context):  # noqa: N802
        res = await self.puller.pull(
            request.topic, request.queue_id, request.offset, request.max_messages,
            request.tag_expression,
        )
        self.observer.pull_skipped(res.skipped)
        response = query_pb2.PullResponse(
            status=query_pb2.PullStatus.Name(res.status.value),
            next_offset=res.next_offset,
            min_offset=res.min_offset,
            max_offset=res.max_offset,
        )
        add_stored_messages(response.messages, res.records)
        return response

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
