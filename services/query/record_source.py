"""Where the query service gets record bytes: the commitlog writer's reads.

``RecordSource`` is the interface the lookups use, awaited (the service runs on one event
loop); ``GrpcRecordSource`` talks to the writer over ``grpc.aio``. Offsets that do not start a
record (or lie outside the commitlog) raise ``OffsetOutOfRangeError``; a batch with one bad
offset is retried one offset at a time so the good records of the batch are still returned
(``read_some``).
"""

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Protocol

import grpc

from rmqstore.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreError,
    UnavailableError,
    WrongStoreError,
)
from rmqstore.formats import commitlog
from rmqstore.server import CHANNEL_OPTIONS
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc

log = logging.getLogger(__name__)
STREAM_RETRY_S = 30  # after the writer refuses a read stream, read over unary calls this long


class RecordSource(Protocol):
    async def read(self, offsets: Sequence[int]) -> list[bytes]:
        """Raw records starting at ``offsets``, in order; any bad offset fails the call."""
        ...

    async def bounds(self) -> tuple[int, int]:
        """(min offset, max offset) of the commitlog: the readable range [min, max)."""
        ...


async def read_some(source: RecordSource, offsets: Sequence[int]) -> list[bytes | None]:
    """Like ``source.read`` but a bad offset yields None instead of failing the batch."""
    if not offsets:
        return []
    try:
        return list(await source.read(offsets))
    except OffsetOutOfRangeError:
        if len(offsets) == 1:
            return [None]
    out: list[bytes | None] = []
    for off in offsets:
        try:
            out.append((await source.read([off]))[0])
        except OffsetOutOfRangeError:
            out.append(None)
    return out


def record_at(raw: bytes | None, phy: int) -> commitlog.Record | None:
    """The record read for offset ``phy``, or None if nothing (or not that record) was read:
    a bad record is skipped, as RocketMQ skips it, never returned."""
    if raw is None:
        return None
    try:
        rec = commitlog.decode(raw)
    except CorruptRecordError:
        return None
    return rec if rec.physical_offset == phy else None


_BAD_OFFSET = {
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.DATA_LOSS,
}
_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _translate(code: grpc.StatusCode, details: str | None, what: str) -> StoreError:
    if code in _BAD_OFFSET:
        return OffsetOutOfRangeError(f"commitlog writer refused {what}: {details}")
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return WrongStoreError(f"commitlog writer refused {what}: {details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return UnavailableError(f"commitlog writer unavailable for {what}: {details}")
    return StoreError(f"commitlog writer failed {what}: {code.name} {details}")


class _Refused(Exception):
    """The writer answered a read with a status instead of records."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Ended(Exception):
    """The writer closed a read stream (it is stopping)."""


class _ReadStream:
    """One open ``ReadRecordsStream`` call carrying one read at a time."""

    def __init__(self, stub: commitlog_pb2_grpc.CommitLogStub) -> None:
        self._call = stub.ReadRecordsStream()

    async def read(self, offsets: list[int], store_id: str) -> list[bytes]:
        """Records, or _Refused; grpc.RpcError or _Ended when the stream itself ended."""
        try:
            await self._call.write(commitlog_pb2.ReadRecordsRequest(offsets=offsets,
                                                                    store_id=store_id))
        except asyncio.InvalidStateError:  # the call has ended (the writer stopped or refused)
            await self._call.read()  # raises its error if it ended with one
            raise _Ended() from None
        reply = await self._call.read()
        if reply is grpc.aio.EOF:  # the writer ended the stream without an error
            raise _Ended()
        if reply.status_code:
            raise _Refused(_CODES.get(reply.status_code, grpc.StatusCode.UNKNOWN), reply.error)
        return list(reply.records)

    def close(self) -> None:
        self._call.cancel()

    async def closed(self) -> None:
        """Once the call has ended (after ``close``: once its cancellation is processed)."""
        await self._call.code()


class GrpcRecordSource:
    """Reads records from the commitlog writer over ``grpc.aio``; bounds are cached briefly.

    Create it on the event loop that uses it. Reads go over up to ``streams`` long-lived
    ``ReadRecordsStream`` calls (about half the latency of a unary call here); past that, or
    for 30 s after the writer refuses a stream, over ``ReadRecords``. A read that outlives
    ``timeout`` cancels its stream and fails with UNAVAILABLE.
    """

    def __init__(self, address: str, timeout: float = 10.0, bounds_ttl: float = 0.2,
                 grpc_channel: grpc.aio.Channel | None = None, streams: int = 4,
                 store_id: str = "") -> None:
        self.address = address
        self.store_id = store_id  # sent with every read: another store's writer refuses it
        self._channel = grpc_channel or grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._stub = commitlog_pb2_grpc.CommitLogStub(self._channel)
        self._timeout = timeout
        self._ttl = bounds_ttl
        self._bounds: tuple[int, int] = (0, 0)
        self._bounds_at = -1e9
        self._max_streams = streams
        self._idle: list[_ReadStream] = []
        self._open: set[_ReadStream] = set()
        self._closed = False
        self._streams_off_until = 0.0  # the writer refused streams: unary reads until then

    async def read(self, offsets: Sequence[int]) -> list[bytes]:
        for off in offsets:
            if off < 0:
                raise OffsetOutOfRangeError(f"commitlog offset {off} is negative")
        offsets = list(offsets)
        what = f"ReadRecords of {len(offsets)} offsets"
        try:
            records = await self._read_once(offsets)
        except _Refused as e:
            if e.code == grpc.StatusCode.RESOURCE_EXHAUSTED and len(offsets) > 1:
                half = len(offsets) // 2  # the answer was too large for one message
                return await self.read(offsets[:half]) + await self.read(offsets[half:])
            raise _translate(e.code, e.details, what) from None
        if len(records) != len(offsets):
            raise StoreError(
                f"commitlog writer returned {len(records)} records for {len(offsets)} offsets"
            )
        return records

    async def _read_once(self, offsets: list[int]) -> list[bytes]:
        stream = self._checkout()
        if stream is not None:
            try:
                async with asyncio.timeout(self._timeout):  # no task made, unlike wait_for
                    records = await stream.read(offsets, self.store_id)
            except TimeoutError as e:
                self._discard(stream)
                log.warning("a read from the commitlog writer took over %.1f s", self._timeout)
                raise _Refused(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {self._timeout} s"
                ) from e
            except _Ended:
                self._discard(stream)
            except grpc.RpcError as e:  # the stream ended: writer restarted or refused it
                self._discard(stream)
                if e.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED):
                    self._streams_off_until = time.monotonic() + STREAM_RETRY_S
                    log.info("reading over unary calls for %d s: %s", STREAM_RETRY_S, e.details())
            except _Refused:
                self._checkin(stream)
                raise
            except BaseException:  # cancelled mid-read: the stream's next answer is this one's
                self._discard(stream)
                raise
            else:
                self._checkin(stream)
                return records
        try:
            reply = await self._stub.ReadRecords(
                commitlog_pb2.ReadRecordsRequest(offsets=offsets, store_id=self.store_id),
                timeout=self._timeout,
            )
        except grpc.RpcError as e:
            raise _Refused(e.code(), e.details() or "") from e
        return list(reply.records)

    def _checkout(self) -> "_ReadStream | None":
        if self._idle:
            return self._idle.pop()
        if (
            len(self._open) >= self._max_streams
            or self._closed
            or time.monotonic() < self._streams_off_until
        ):
            return None
        stream = _ReadStream(self._stub)
        self._open.add(stream)
        return stream

    def _checkin(self, stream: _ReadStream) -> None:
        if stream in self._open:
            self._idle.append(stream)

    def _discard(self, stream: _ReadStream) -> None:
        self._open.discard(stream)
        stream.close()

    async def bounds(self) -> tuple[int, int]:
        now = time.monotonic()
        if now - self._bounds_at <= self._ttl:
            return self._bounds
        try:
            resp = await self._stub.GetOffsets(
                commitlog_pb2.GetOffsetsRequest(), timeout=self._timeout
            )
        except grpc.RpcError as e:
            raise _translate(e.code(), e.details(), "GetOffsets") from e
        self._bounds = (resp.min_offset, resp.max_offset)
        self._bounds_at = now
        return self._bounds

    async def close(self) -> None:
        self._closed = True
        streams, self._idle = list(self._open), []
        self._open.clear()
        for s in streams:
            s.close()
        for s in streams:  # their last callbacks run before the loop may end
            await s.closed()
        await self._channel.close()
