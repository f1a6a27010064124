"""A MessagingService that consumes from nothing: every receive answers a full batch of the
same prebuilt 1 KiB messages (delivery form, with digest and receipt handle), every ack is
OK. The ceiling a consumer reaches on this machine, for ``bench_consume``.

``python -m benchmarks.noop_consume --listen HOST:PORT``
"""

import hashlib
import sys

from benchmarks.noop_messaging import OK, NoopMessaging, serve
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from services.proxy.routes import Router

BODY = b"x" * 1024


def _messages(topic: str) -> list[spb.ReceiveMessageResponse]:
    out = []
    for i in range(32):
        sp = pb.SystemProperties(
            message_id=f"01000000000000000000{i:014X}", body_encoding=pb.IDENTITY,
            body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(BODY).hexdigest().upper()),
            receipt_handle=f"0:{i}:1", delivery_attempt=1, message_type=pb.NORMAL, tag="bench",
        )  # fmt: skip
        sp.born_timestamp.GetCurrentTime()
        m = pb.Message(topic=pb.Resource(name=topic), body=BODY, system_properties=sp)
        out.append(spb.ReceiveMessageResponse(message=m))
    return out


class NoopConsume(NoopMessaging):
    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self._cache: dict[str, list[spb.ReceiveMessageResponse]] = {}

    async def ReceiveMessage(self, request, context):  # noqa: N802
        topic = request.message_queue.topic.name
        msgs = self._cache.get(topic)
        if msgs is None:
            msgs = self._cache[topic] = _messages(topic)
        yield spb.ReceiveMessageResponse(status=OK)
        for m in msgs[: max(1, min(request.batch_size or 32, 32))]:
            yield m

    async def AckMessage(self, request, context):  # noqa: N802
        entries = [
            spb.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=OK
            )  # fmt: skip
            for e in request.entries
        ]
        return spb.AckMessageResponse(status=OK, entries=entries)


def main() -> int:
    return serve("noop-consume", NoopConsume)


if __name__ == "__main__":
    sys.exit(main())
