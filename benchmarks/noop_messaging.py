"""A MessagingService that stores nothing: the ceiling the official clients reach on this
machine, for ``bench_proxy``. Same server kind as the proxy (``AsyncService``); it answers
what a producer needs: routes to itself, the Settings reply, and OK to every send.

``python -m benchmarks.noop_messaging --listen HOST:PORT``
"""

import argparse
import sys

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import AsyncService
from services.proxy import settings
from services.proxy.routes import Router

OK = pb.Status(code=pb.OK, message="OK")


class NoopMessaging(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, router: Router) -> None:
        self.router = router

    async def QueryRoute(self, request, context):  # noqa: N802
        from rmqstore.formats.topics_json import TopicConfig

        queues = self.router.queues(TopicConfig(request.topic.name))
        return spb.QueryRouteResponse(status=OK, message_queues=queues)

    async def Heartbeat(self, request, context):  # noqa: N802
        return spb.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(self, request, context):  # noqa: N802
        return spb.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context):  # noqa: N802
        async for command in request_iterator:
            if command.HasField("settings"):
                yield settings.reply(command.settings, 4 * 1024 * 1024)

    async def SendMessage(self, request, context):  # noqa: N802
        entries = [
            spb.SendResultEntry(status=OK, message_id=m.system_properties.message_id)
            for m in request.messages
        ]
        return spb.SendMessageResponse(status=OK, entries=entries)


def serve(name: str, servicer: type[NoopMessaging]) -> int:
    """Run ``servicer`` as a MessagingService on ``--listen`` until SIGTERM."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name.replace('-', '_')}")
    p.add_argument("--listen", default="127.0.0.1:0")
    args = p.parse_args()
    service = AsyncService(args.listen)
    service.add(
        service_pb2_grpc.add_MessagingServiceServicer_to_server,
        servicer(Router("noop", service.address)),
        spb.DESCRIPTOR,
        "MessagingService",
    )
    service.serve(name, service.stop)
    return 0


def main() -> int:
    return serve("noop-messaging", NoopMessaging)


if __name__ == "__main__":
    sys.exit(main())
