"""RocketMQ 5 business statuses: a ``Status{code, message}`` in the reply, never a gRPC error."""

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.v1 import commitlog_pb2

Code = pb.Code


class BusinessError(Exception):
    """A refused request: its RocketMQ ``Code`` and a message for the client."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=Code.OK, message=message)


def of(err: BusinessError) -> pb.Status:
    return pb.Status(code=err.code, message=str(err))  # type: ignore[arg-type]


def name(code: int) -> str:
    try:
        return Code.Name(code)
    except ValueError:
        return str(code)


# A stored message's replica status as RocketMQ 5 answers it (spec rocketmq-ha.md §5): the
# message IS stored; resending it would store it twice.
REPLICA_STATUSES: dict[int, pb.Status] = {
    commitlog_pb2.FLUSH_SLAVE_TIMEOUT: pb.Status(
        code=Code.SLAVE_PERSISTENCE_TIMEOUT,
        message="stored on the master, but no slave acknowledged it in time "
        "(FLUSH_SLAVE_TIMEOUT): do not resend, it would be stored twice",
    ),
    commitlog_pb2.SLAVE_NOT_AVAILABLE: pb.Status(
        code=Code.HA_NOT_AVAILABLE,
        message="stored on the master, but no slave is available (SLAVE_NOT_AVAILABLE): do "
        "not resend, it would be stored twice",
    ),
}
