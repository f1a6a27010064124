"""Errors only the query service raises (the rest come from ``rmqstore.errors``)."""

from rmqstore.errors import StoreError


class IndexConfigError(StoreError):
    """An index file whose size does not match the configured slot and entry counts."""

    grpc_status = "FAILED_PRECONDITION"
