"""RocketMQ 5 business statuses: a ``Status{code, message}`` in the reply, never a gRPC error."""

from rmqstore.rocketmq import definition_pb2 as pb

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
