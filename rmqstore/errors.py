"""Typed store errors. Each carries the gRPC status name it maps to on the wire.

The mapping to grpc.StatusCode happens in one place (`rmqstore.server`), so this
module stays importable without grpc (Spark executors use it too).
"""


class StoreError(Exception):
    """Base of every error the store raises on purpose."""

    grpc_status = "INTERNAL"


class InvalidArgumentError(StoreError):
    """The request itself is wrong: bad topic, queue id, offset, id, cursor …"""

    grpc_status = "INVALID_ARGUMENT"


class MessageIllegalError(InvalidArgumentError):
    """A message RocketMQ would refuse with MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED."""


class CorruptRecordError(StoreError):
    """Bytes that do not decode as a record (bad magic, length, CRC, truncated)."""

    grpc_status = "DATA_LOSS"

    def __init__(self, message: str, offset: int = -1, size: int = -1) -> None:
        super().__init__(message)
        self.offset = offset
        self.size = size


class OffsetOutOfRangeError(StoreError):
    """An offset outside [min, max) or not on a record boundary."""

    grpc_status = "OUT_OF_RANGE"


class NotFoundError(StoreError):
    grpc_status = "NOT_FOUND"


class StoreLockedError(StoreError):
    """Another writer holds the store's lock file."""

    grpc_status = "FAILED_PRECONDITION"


class WrongStoreError(StoreError):
    """A service of one store called a writer of another one."""

    grpc_status = "FAILED_PRECONDITION"


class ReadOnlyError(StoreError):
    """A write to a store served read-only."""

    grpc_status = "FAILED_PRECONDITION"


class DiskFullError(StoreError):
    """No room for the next segment or record; nothing was written."""

    grpc_status = "RESOURCE_EXHAUSTED"


class ResourceExhaustedError(StoreError):
    """A bounded resource (subscribers, memory, a budget) is used up."""

    grpc_status = "RESOURCE_EXHAUSTED"


class BudgetExhaustedError(StoreError):
    grpc_status = "RESOURCE_EXHAUSTED"


class UnavailableError(StoreError):
    """The service is starting, recovering or shutting down."""

    grpc_status = "UNAVAILABLE"


class NotMasterError(StoreError):
    """A put sent to a slave: only its master takes puts."""

    grpc_status = "FAILED_PRECONDITION"


class NoClusterError(StoreError):
    """A cluster-wide lookup asked of a query service that knows no name server."""

    grpc_status = "FAILED_PRECONDITION"
