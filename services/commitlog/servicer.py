"""gRPC face of the writer: translates protos to engine calls and back, nothing else.

It runs on ``AsyncService``'s event loop. Appends, reads and offsets are quick and run there,
one at a time. Nothing on the loop waits: a sync-flush put awaits a future the flush thread
settles, and a dispatch stream waits for new records in a worker thread (``run_blocking``).
"""

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from rmqstore.errors import (
    MessageIllegalError,
    ResourceExhaustedError,
    StoreError,
    WrongStoreError,
)
from rmqstore.put_socket import Answer
from rmqstore.server import MAX_MESSAGE_BYTES, grpc_errors, status_code
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.commitlog.append_ahead import appended_ahead
from services.commitlog.config_copy import read_config
from services.commitlog.delivery import DeliveryService
from services.commitlog.engine import DURABLE_TIMEOUT_S, CommitLogEngine, flush_timeout
from services.commitlog.ha_master import PUT_OK, Replication
from services.commitlog.observe import WriterObserver
from services.commitlog.promotion import PromoteRefusedError, Roles
from services.commitlog.read_only import Store
from services.commitlog.retention import Retention
from services.commitlog.stored import PutResult, Stored

MAX_READ_STREAMS = 8
MAX_PUT_STREAMS = 32
_STREAM_LIMITS = {"read": (MAX_READ_STREAMS, "ReadRecords"), "put": (MAX_PUT_STREAMS, "PutBatch")}
READ_MAX_BYTES = MAX_MESSAGE_BYTES - 1024 * 1024  # room for the reply's own framing

RunBlocking = Callable[..., Awaitable[Any]]  # AsyncService.run_blocking
# what ``_append`` gives: stored, end offset, start time, replica status (or its future)
Appended = tuple[Stored, int, float, "int | asyncio.Future"]


def _result(r: PutResult, status: Any) -> commitlog_pb2.PutResult:
    return commitlog_pb2.PutResult(
        status=status,
        msg_id=r.msg_id,
        unique_key=r.unique_key,
        phy_offset=r.phy_offset,
        queue_offset=r.queue_offset,
        size=r.size,
        store_timestamp=r.store_timestamp,
        topic=r.topic,
        queue_id=r.queue_id,
    )


def _columns(s: Stored, offsets_only: bool = False) -> dict[str, Any]:
    """A PutResultColumns' fields, for a constructor to build the message where it goes (a
    message built apart is copied again when set: 14 us of a 100-message reply's 26)."""
    if offsets_only:
        return {"phy_offset": s.phy_offsets, "queue_offset": s.queue_offsets,
                "store_timestamp": s.store_timestamp, "status": s.status}  # fmt: skip
    return {
        "status": s.status,
        "msg_id": s.msg_ids(),
        "unique_key": s.unique_keys,
        "phy_offset": s.phy_offsets,
        "queue_offset": s.queue_offsets,
        "size": s.sizes,
        "store_timestamp": s.store_timestamp,
        "topic": s.topics,
        "queue_id": s.queue_ids,
    }


def _add_results(response: commitlog_pb2.PutBatchResponse, s: Stored) -> None:
    add = response.results.add  # filled in place: no per-result message copied
    ts, status = s.store_timestamp, s.status
    for msg_id, uniq, phy, qo, size, topic, qid in zip(
        s.msg_ids(), s.unique_keys, s.phy_offsets, s.queue_offsets, s.sizes, s.topics,
        s.queue_ids, strict=True,
    ):  # fmt: skip
        add(msg_id=msg_id, unique_key=uniq, phy_offset=phy, queue_offset=qo, size=size,
            store_timestamp=ts, topic=topic, queue_id=qid, status=status)  # fmt: skip


def _batch(request: commitlog_pb2.PutBatchRequest):
    """A batch's messages, or its columns."""
    if not request.HasField("columns"):
        return request.messages
    if request.messages:
        raise MessageIllegalError("a batch holds messages or columns, not both")
    return request.columns


class CommitLogServicer(commitlog_pb2_grpc.CommitLogServicer):
    def __init__(
        self, engine: Store, observer: WriterObserver | None,
        run_blocking: RunBlocking, delivery: DeliveryService | None = None,
        retention: Retention | None = None, replication: Replication | None = None,
    ) -> None:  # fmt: skip
        self.engine = engine
        self.replication = replication
        self.delivery = delivery
        self.retention = retention
        self.observer = observer or WriterObserver(engine, None)
        self._run_blocking = run_blocking
        self._read_streams = threading.BoundedSemaphore(MAX_READ_STREAMS)
        self._put_streams = threading.BoundedSemaphore(MAX_PUT_STREAMS)
        self._sync = engine.config.flush == "sync"
        # a put's answer waits: for its group commit (sync flush) or a slave (sync_master)
        self._waits = self._sync or (replication is not None and replication.sync)
        self.roles: Roles | None = None  # a writable store's: Promote

    def use(self, roles: Roles) -> None:
        """Serve with what runs for the writer's role (again after a promotion)."""
        self.roles = roles
        self.replication, self.delivery, self.retention = (
            roles.replication, roles.delivery, roles.retention)
        self._waits = self._sync or (self.replication is not None and self.replication.sync)

    async def _put(self, messages) -> Stored:
        return await self._acknowledge(self._append(messages))

    def _append(self, messages) -> Appended:
        """Append Messages, or a batch request's messages or columns."""
        t0 = time.perf_counter()
        replication = self.replication
        try:
            if isinstance(messages, commitlog_pb2.PutBatchRequest):
                messages = _batch(messages)
            if replication is not None:
                replication.check_put()  # --min-sync-replicas: before a byte is written
            stored, end = self.engine.append(messages)
        except StoreError as e:
            self.observer.put_failed(e.grpc_status.lower())
            raise
        return stored, end, t0, PUT_OK if replication is None else replication.replicated(end)

    async def _acknowledge(self, appended: Appended) -> Stored:
        """Wait until an appended batch is durable (sync flush) and replicated (sync_master),
        then count it."""
        if self._sync:
            try:
                await self._durable(appended[1])
            except StoreError as e:
                self.observer.put_failed(e.grpc_status.lower())
                raise
        replica = appended[3]
        if isinstance(replica, asyncio.Future):  # settled by the slaves' acks or a timer
            appended[0].status = await replica
        return self._counted(appended)

    def _counted(self, appended: Appended) -> Stored:
        stored, _end, t0, replica = appended
        if not isinstance(replica, asyncio.Future):
            stored.status = replica
        self.observer.puts(stored, time.perf_counter() - t0)
        return stored

    async def _durable(self, end: int) -> None:
        """Until the group commit that covers ``end``; the flush thread wakes the loop once
        per flush for every put it made durable, and no thread waits for any one put."""
        loop = asyncio.get_running_loop()
        durable = loop.create_future()

        def settle(ok: bool) -> None:
            if not durable.done():
                durable.set_result(ok)

        def done(ok: bool) -> None:  # in the flush thread
            with contextlib.suppress(RuntimeError):  # a closed loop: the call is gone anyway
                loop.call_soon_threadsafe(settle, ok)

        self.engine.on_durable(end, done)
        try:
            ok = await asyncio.wait_for(durable, DURABLE_TIMEOUT_S)
        except TimeoutError:
            ok = False
        if not ok:
            raise flush_timeout(end)

    @grpc_errors
    async def Put(self, request, context):
        stored = await self._put([request.message])
        return _result(stored[0], stored.status)

    @grpc_errors
    async def PutBatch(self, request, context):
        return self._response(request, await self._put(request))

    @grpc_errors
    async def PutStream(self, request_iterator, context):
        async for reply in self.put_replies(request_iterator):
            yield reply

    async def put_replies(self, request_iterator: AsyncIterable) -> AsyncIterator[Any]:
        """``PutStream``'s replies to its requests, in order; a StoreError ends the stream."""
        if not self._waits:  # answered as soon as appended

            async def answer(request) -> commitlog_pb2.PutStreamReply:
                stored = await self._acknowledge(self._append(request))
                return self._reply(request, stored)

            async for reply in self._stream(
                "put", self._put_streams, request_iterator, answer, commitlog_pb2.PutStreamReply
            ):
                yield reply
            return

        async def durable(item: tuple) -> commitlog_pb2.PutStreamReply:
            request, appended = item
            if isinstance(appended, StoreError):
                raise appended
            stored = await self._acknowledge(appended)
            return self._reply(request, stored)

        ahead = appended_ahead(request_iterator, self._append)
        try:
            async for reply in self._stream(
                "put", self._put_streams, ahead, durable, commitlog_pb2.PutStreamReply
            ):
                yield reply
        finally:
            await ahead.aclose()

    def answer_put(self, request: commitlog_pb2.PutBatchRequest) -> Answer:
        """A put-socket request (``rmqstore.put_socket``), appended now: its reply (async
        flush), or a coroutine that returns it once durable (sync flush)."""
        appended = self._append(request)
        if not self._waits:
            return self._reply(request, self._counted(appended))
        return self._durable_reply(request, appended)

    async def _durable_reply(self, request, appended) -> commitlog_pb2.PutStreamReply:
        return self._reply(request, await self._acknowledge(appended))

    def open_put_stream(self) -> None:
        self._open_stream("put", self._put_streams)

    def close_put_stream(self) -> None:
        self._close_stream("put", self._put_streams)

    def _open_stream(self, kind: str, slots: threading.BoundedSemaphore) -> None:
        """Count a stream in: at most the semaphore's count of streams at once."""
        if not slots.acquire(blocking=False):
            limit, unary = _STREAM_LIMITS[kind]
            raise ResourceExhaustedError(f"{limit} {kind} streams are open already: use {unary}")
        self.observer.stream(kind, 1)

    def _close_stream(self, kind: str, slots: threading.BoundedSemaphore) -> None:
        self.observer.stream(kind, -1)
        slots.release()

    async def _stream(
        self, kind: str, slots: threading.BoundedSemaphore, requests: AsyncIterable,
        answer: Callable[[Any], Awaitable[Any]], reply: Callable[..., Any],
    ):  # fmt: skip
        """One ``await answer(request)`` per request; a StoreError becomes ``reply(status_code,
        error)`` and the stream goes on."""
        self._open_stream(kind, slots)
        try:
            async for request in requests:
                try:
                    yield await answer(request)
                except StoreError as e:
                    yield reply(status_code=status_code(e).value[0], error=str(e))
        finally:
            self._close_stream(kind, slots)

    def _response(self, request, s: Stored) -> commitlog_pb2.PutBatchResponse:
        if request.columnar_results:
            return commitlog_pb2.PutBatchResponse(columns=_columns(s, request.offsets_only))
        response = commitlog_pb2.PutBatchResponse()
        _add_results(response, s)
        return response

    def _reply(self, request, s: Stored) -> commitlog_pb2.PutStreamReply:
        """``_response`` inside a stream's reply, built there rather than copied into it."""
        if request.columnar_results:
            return commitlog_pb2.PutStreamReply(
                response={"columns": _columns(s, request.offsets_only)})
        reply = commitlog_pb2.PutStreamReply()
        _add_results(reply.response, s)
        return reply

    def _check_store(self, store_id: str) -> None:
        """Refuse a reader or builder of another store (an empty id is not checked)."""
        if store_id and store_id != self.engine.store_id:
            raise WrongStoreError(
                f"this writer serves store {self.engine.store_id}, not {store_id}: check the "
                "--commitlog address and the --store of the caller")

    @grpc_errors
    async def ReadRecords(self, request, context):
        self._check_store(request.store_id)
        return commitlog_pb2.ReadRecordsResponse(records=self._read(request.offsets))

    def _read(self, offsets, store_id: str = "") -> list[bytes]:
        self._check_store(store_id)
        try:
            records = self.engine.read(offsets, READ_MAX_BYTES)
        except StoreError as e:
            self.observer.read_failed(e.grpc_status.lower(), len(offsets))
            raise
        self.observer.reads(records)
        return records

    @grpc_errors
    async def ReadRecordsStream(self, request_iterator, context):
        async def answer(request) -> commitlog_pb2.ReadRecordsReply:
            return commitlog_pb2.ReadRecordsReply(
                records=self._read(request.offsets, request.store_id))

        async for reply in self._stream(
            "read", self._read_streams, request_iterator, answer, commitlog_pb2.ReadRecordsReply
        ):
            yield reply

    @grpc_errors
    async def GetOffsets(self, request, context):
        e = self.engine
        return commitlog_pb2.Offsets(
            min_offset=e.min_offset,
            max_offset=e.max_offset,
            flushed_offset=e.flushed_offset,
            segment_size=e.config.segment_size,
            epoch=e.epochs.current,
            cut_offset=e.epochs.cut_offset_since(request.since_epoch),
            store_host=e.config.store_host,
            store_id=e.store_id,
            read_only=e.read_only,
        )

    @grpc_errors
    async def Subscribe(self, request, context):
        """Dispatch batches, each waited for in a worker thread (the engine blocks until
        records arrive); the call's end stops the wait within its next check."""
        self._check_store(request.store_id)
        ended = threading.Event()
        context.add_done_callback(lambda _call: ended.set())
        batches = self.engine.subscribe(
            request.subscriber,
            request.from_offset,
            request.max_batch_records,
            lambda: not ended.is_set(),
            not request.no_linger,
        )
        try:
            while (batch := await self._run_blocking(next, batches, None)) is not None:
                self.observer.dispatched(request.subscriber, batch.records)
                yield batch.data  # serialized already: see add_to_server
        finally:
            ended.set()

    @grpc_errors
    async def Ack(self, request, context):
        self.engine.ack(request.subscriber, request.durable_offset)
        return commitlog_pb2.AckResponse()

    @grpc_errors
    async def GetStatus(self, request, context):
        out = commitlog_pb2.WriterStatus()
        if self.delivery is not None:
            d = await self._run_blocking(self.delivery.status)
            levels = d.pop("levels")
            out.delivery.CopyFrom(commitlog_pb2.DeliveryStatus(**d))
            out.delivery.levels.extend(commitlog_pb2.DelayLevelStatus(**lv) for lv in levels)
        if self.retention is not None:
            out.retention.CopyFrom(commitlog_pb2.RetentionStatus(**self.retention.status()))
        if self.replication is not None:
            out.replication.CopyFrom(self.replication.status())
        else:
            out.replication.role = self.engine.config.role
        return out

    @grpc_errors
    async def Promote(self, request, context):
        if self.roles is None:
            raise PromoteRefusedError("this writer serves a store read-only: it cannot be "
                                      "promoted")  # fmt: skip
        return await self.roles.promote(request)

    @grpc_errors
    async def GetTerms(self, request, context):
        e = self.engine
        history = e.terms.history if isinstance(e, CommitLogEngine) else []
        return commitlog_pb2.Terms(
            terms=[commitlog_pb2.Term(term=t, start_offset=o) for t, o in history],
            max_offset=e.max_offset, role=e.config.role, store_id=e.store_id)  # fmt: skip

    @grpc_errors
    async def GetConfig(self, request, context):
        files = await self._run_blocking(read_config, self.engine.layout)
        return commitlog_pb2.ConfigFiles(files=files)


SUBSCRIBE_METHOD = (
    f"/{commitlog_pb2.DESCRIPTOR.services_by_name['CommitLog'].full_name}/Subscribe"
)


class _SubscribeAsIs(grpc.GenericRpcHandler):
    """A service's generic handler, but with ``subscribe`` for Subscribe."""

    def __init__(self, inner: grpc.GenericRpcHandler, subscribe: grpc.RpcMethodHandler) -> None:
        self.inner, self.subscribe = inner, subscribe

    def service(self, handler_call_details):
        if handler_call_details.method == SUBSCRIBE_METHOD:
            return self.subscribe
        return self.inner.service(handler_call_details)


class _Registrar:
    """Stands in for the server while the generated code registers the service, and swaps
    Subscribe's handler for one that sends its already serialized batches as they are
    (generated code registers generic handlers, and newer code registered methods too)."""

    def __init__(self, server: grpc.Server | grpc.aio.Server, servicer: CommitLogServicer) -> None:
        self.server = server
        self.subscribe = grpc.unary_stream_rpc_method_handler(
            servicer.Subscribe,
            request_deserializer=commitlog_pb2.SubscribeRequest.FromString,
            response_serializer=None,  # bytes go out as they are
        )
        self.swapped = False

    def add_generic_rpc_handlers(self, generic_handlers) -> None:
        self.server.add_generic_rpc_handlers(
            tuple(_SubscribeAsIs(h, self.subscribe) for h in generic_handlers)
        )
        self.swapped = True

    def add_registered_method_handlers(self, service_name: str, handlers: dict) -> None:
        if "Subscribe" not in handlers:
            raise RuntimeError(f"{service_name} has no Subscribe method to register")
        handlers = {**handlers, "Subscribe": self.subscribe}
        self.server.add_registered_method_handlers(service_name, handlers)


def add_to_server(servicer: CommitLogServicer, server: grpc.Server | grpc.aio.Server) -> None:
    """The generated registration, but Subscribe sends ``WireBatch`` bytes without parsing and
    serializing them again (the client reads them as the DispatchBatch they are)."""
    registrar = _Registrar(server, servicer)
    commitlog_pb2_grpc.add_CommitLogServicer_to_server(servicer, registrar)
    if not registrar.swapped:
        raise RuntimeError("the generated code did not register the CommitLog service")
