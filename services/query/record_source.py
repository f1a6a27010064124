"""Where the query service gets record bytes: the commitlog writer's ``ReadRecords``.

``RecordSource`` is the interface the lookups use; ``GrpcRecordSource`` talks to the writer.
Offsets that do not start a record (or lie outside the commitlog) raise
``OffsetOutOfRangeError``; a batch with one bad offset is retried one offset at a time so the
good records of the batch are still returned (``read_some``).
"""

import threading
import time
from collections.abc import Sequence
from typing import Protocol

import grpc

from rmqstore.errors import OffsetOutOfRangeError, StoreError, UnavailableError
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc


class RecordSource(Protocol):
    def read(self, offsets: Sequence[int]) -> list[bytes]:
        """Raw records starting at ``offsets``, in order; any bad offset fails the call."""
        ...

    def bounds(self) -> tuple[int, int]:
        """(min offset, max offset) of the commitlog: the readable range [min, max)."""
        ...


def read_some(source: RecordSource, offsets: Sequence[int]) -> list[bytes | None]:
    """Like ``source.read`` but a bad offset yields None instead of failing the batch."""
    if not offsets:
        return []
    try:
        return list(source.read(offsets))
    except OffsetOutOfRangeError:
        if len(offsets) == 1:
            return [None]
    out: list[bytes | None] = []
    for off in offsets:
        try:
            out.append(source.read([off])[0])
        except OffsetOutOfRangeError:
            out.append(None)
    return out


_BAD_OFFSET = {
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.DATA_LOSS,
}


def _translate(e: grpc.RpcError, what: str) -> StoreError:
    code = e.code()
    if code in _BAD_OFFSET:
        return OffsetOutOfRangeError(f"commitlog writer refused {what}: {e.details()}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return UnavailableError(f"commitlog writer unavailable for {what}: {e.details()}")
    return StoreError(f"commitlog writer failed {what}: {code.name} {e.details()}")


class GrpcRecordSource:
    """Reads records from the commitlog writer over gRPC; bounds are cached briefly."""

    def __init__(self, address: str, timeout: float = 10.0, bounds_ttl: float = 0.2,
                 grpc_channel: grpc.Channel | None = None) -> None:
        self.address = address
        self._channel = grpc_channel or channel(address)
        self._stub = commitlog_pb2_grpc.CommitLogStub(self._channel)
        self._timeout = timeout
        self._ttl = bounds_ttl
        self._lock = threading.Lock()
        self._bounds: tuple[int, int] = (0, 0)
        self._bounds_at = -1e9

    def read(self, offsets: Sequence[int]) -> list[bytes]:
        for off in offsets:
            if off < 0:
                raise OffsetOutOfRangeError(f"commitlog offset {off} is negative")
        try:
            resp = self._stub.ReadRecords(
                commitlog_pb2.ReadRecordsRequest(offsets=list(offsets)), timeout=self._timeout
            )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and len(offsets) > 1:
                half = len(offsets) // 2  # the answer was too large for one message
                return self.read(offsets[:half]) + self.read(offsets[half:])
            raise _translate(e, f"ReadRecords of {len(offsets)} offsets") from e
        if len(resp.records) != len(offsets):
            raise StoreError(
                f"commitlog writer returned {len(resp.records)} records for {len(offsets)} offsets"
            )
        return list(resp.records)

    def bounds(self) -> tuple[int, int]:
        now = time.monotonic()
        with self._lock:
            if now - self._bounds_at <= self._ttl:
                return self._bounds
        try:
            resp = self._stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=self._timeout)
        except grpc.RpcError as e:
            raise _translate(e, "GetOffsets") from e
        with self._lock:
            self._bounds = (resp.min_offset, resp.max_offset)
            self._bounds_at = now
            return self._bounds

    def wait_ready(self, timeout: float) -> None:
        """Block until the writer answers (its channel connects), or raise UnavailableError."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError as e:
            raise UnavailableError(
                f"commitlog writer at {self.address} not reachable in {timeout} s"
            ) from e

    def close(self) -> None:
        self._channel.close()

