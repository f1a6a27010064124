"""What a put through the ``Appender`` ends with: where its messages were stored
(``Stored``), or an ``AppendError`` of one of three kinds; how the writer's gRPC errors and
stream replies become one; and the ``Waiter`` a ``submit`` is settled through."""

import logging
from collections.abc import Callable
from typing import NamedTuple

import grpc

from rmqstore.v1 import commitlog_pb2

log = logging.getLogger(__name__)
REFUSED = "refused"  # the writer refused the message (bad input): nothing written
BUSY = "busy"  # the writer is full or busy
UNAVAILABLE = "unavailable"  # the writer cannot be reached, or failed the put


class AppendError(Exception):
    """A put or read that failed: its ``kind`` (``REFUSED``, ``BUSY``, ``UNAVAILABLE``) and a
    message for the client. Each front end maps kinds to its protocol's codes in one place
    (the ``make_error`` it gives the ``Appender``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


ErrorFactory = Callable[[str, str], Exception]


class Stored(NamedTuple):
    """Where a message was stored."""

    phy_offset: int
    queue_offset: int
    status: int = 0  # the writer's PutStatus (PUT_OK; under sync_master maybe another)


Done = Callable[[list[Stored] | None, BaseException | None], None]  # results, or the error


class Waiter:
    """What a ``submit`` waits on: settled as a future would be, it calls ``done`` instead of
    waking a task (and ``left(sender, before)`` first: the appender counts the put out)."""

    __slots__ = ("_left", "_sender", "_done", "_settled", "before")

    def __init__(self, left: Callable[[str, int], None], sender: str, done: Done) -> None:
        self._left = left
        self._sender = sender
        self._done = done
        self._settled = False
        self.before = 0  # puts of the sender waiting before this one

    def done(self) -> bool:
        return self._settled

    def set_result(self, results: list[Stored]) -> None:
        self._settle(results, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, results: list[Stored] | None, error: BaseException | None) -> None:
        if self._settled:
            return
        self._settled = True
        self._left(self._sender, self.before)
        try:
            self._done(results, error)
        except Exception:  # a bug of the caller's: the other puts of the batch still settle
            log.exception("a put's callback failed")


def _kind(code: grpc.StatusCode) -> str:
    """A writer's refusal as an append failure's kind (one rule for calls and streams)."""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return REFUSED
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return BUSY
    return UNAVAILABLE


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def grpc_error(e: grpc.aio.AioRpcError) -> AppendError:
    kind = _kind(e.code())
    if kind == REFUSED:
        return AppendError(kind, e.details() or "refused by the store")
    if kind == BUSY:
        return AppendError(kind, e.details() or "store is full or busy")
    return AppendError(kind, f"store unavailable: {e.details()}")


def reply_outcome(reply: commitlog_pb2.PutStreamReply
                  ) -> commitlog_pb2.PutBatchResponse | AppendError:  # fmt: skip
    """A stream reply's response, or the AppendError it refuses the request with."""
    if reply.status_code:
        code = _CODES.get(reply.status_code, grpc.StatusCode.UNKNOWN)
        return AppendError(_kind(code), reply.error or "refused by the store")
    return reply.response
