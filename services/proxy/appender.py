"""The proxy's appender: ``rmqstore.appender`` with its failures as RocketMQ 5 business
statuses (``BusinessError``)."""

from typing import Any

from rmqstore import appender as shared
from rmqstore.appender import Plain, Record, Stored
from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy.status import BusinessError

__all__ = ["Appender", "Plain", "Record", "Stored", "business_error"]

CODES = {
    shared.REFUSED: pb.BAD_REQUEST,
    shared.BUSY: pb.TOO_MANY_REQUESTS,
    shared.UNAVAILABLE: pb.INTERNAL_SERVER_ERROR,
}


def business_error(kind: str, message: str) -> BusinessError:
    return BusinessError(CODES.get(kind, pb.INTERNAL_SERVER_ERROR), message)


class Appender(shared.Appender):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("make_error", business_error)
        super().__init__(*args, **kwargs)
