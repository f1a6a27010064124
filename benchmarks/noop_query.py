"""A Query server that looks nothing up: the gRPC ceiling for the query benchmarks.

``python -m benchmarks.noop_query --method M --response FILE [--commitlog HOST:PORT]``
answers every call of method ``M`` with the response serialized in ``FILE`` (one the real
query service gave), so requests and answers have the real shapes. With ``--commitlog`` each
call first reads the records of the response's messages from the writer, through the query
service's own record source, and decodes nothing: what every query costs in this design
before the query service does any work of its own. It runs on the same kind of server as
the query service (``AsyncService``, one event loop), so a ratio to it is the query
service's own cost."""

import argparse
import sys
from typing import Any

from rmqstore.server import AsyncService
from rmqstore.v1 import query_pb2, query_pb2_grpc
from services.query.record_source import GrpcRecordSource

RESPONSES: dict[str, Any] = {
    "QueryByKey": query_pb2.QueryByKeyResponse,
    "QueryById": query_pb2.QueryByIdResponse,
    "Pull": query_pb2.PullResponse,
}


class NoopQuery(query_pb2_grpc.QueryServicer):
    """Answers ``method`` with ``response``; every other method is unimplemented."""

    def __init__(self, method: str, response: Any, source: GrpcRecordSource | None) -> None:
        self._response = response
        self._offsets = [m.phy_offset for m in response.messages]
        self._source = source
        setattr(self, method, self._answer)

    async def _answer(self, request: Any, context: Any) -> Any:
        if self._source is not None and self._offsets:
            await self._source.read(self._offsets)
        return self._response


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.noop_query", description=__doc__)
    p.add_argument("--method", required=True, choices=sorted(RESPONSES))
    p.add_argument("--response", required=True, help="file holding one serialized response")
    p.add_argument("--commitlog", help="writer to read the response's records from")
    p.add_argument("--listen", default="127.0.0.1:0")
    args = p.parse_args(argv)
    with open(args.response, "rb") as f:
        response = RESPONSES[args.method].FromString(f.read())
    service = AsyncService(args.listen)

    async def open_source() -> GrpcRecordSource:  # the channel belongs to the service's loop
        return GrpcRecordSource(args.commitlog)

    source = service.call(open_source()) if args.commitlog else None
    service.add(
        query_pb2_grpc.add_QueryServicer_to_server,
        NoopQuery(args.method, response, source),
        query_pb2.DESCRIPTOR,
        "Query",
    )
    service.serve("noop-query", lambda: service.stop(0, then=source.close if source else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
