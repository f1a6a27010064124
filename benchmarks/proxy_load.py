"""A load generator of our own speaking RocketMQ 5's protocol: SendMessage requests of many
messages each (the protocol allows it; the official clients send one), several in flight.

``python -m benchmarks.proxy_load TARGET TOPIC COUNT BATCH CONCURRENCY BODY_BYTES`` prints
``ready`` once connected, waits for a line on stdin, sends, and prints ``{"start": t0, "end":
t1, "sent": n, "refused": r, "cpu": s}`` (s: CPU seconds used while sending). Requests are
built once and re-sent (message ids repeat across rounds), so the generator spends its time
sending, not building.
"""

import asyncio
import json
import sys
import time

import grpc

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import CHANNEL_OPTIONS

POOL = 16  # distinct requests


def requests(topic: str, batch: int, size: int, salt: int) -> list[bytes]:
    body = b"x" * size
    out = []
    for r in range(POOL):
        msgs = [
            pb.Message(
                topic=pb.Resource(name=topic),
                body=body,
                system_properties=pb.SystemProperties(
                    message_id=f"01{salt:012X}{r:08X}{i:012X}",
                    message_type=pb.NORMAL,
                    body_encoding=pb.IDENTITY,
                    tag="bench",
                ),
            )
            for i in range(batch)
        ]
        out.append(spb.SendMessageRequest(messages=msgs).SerializeToString())
    return out


async def run(target: str, topic: str, count: int, batch: int, concurrency: int,
              size: int) -> dict:  # fmt: skip
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        send = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=spb.SendMessageResponse.FromString,
        )
        md = (("x-mq-client-id", f"bench@{id(channel)}"),)
        await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=md)
        pool = requests(topic, batch, size, id(channel) & 0xFFFFFFFFFFFF)
        rounds = max(1, count // batch)
        todo = iter(range(rounds))
        refused = 0

        async def worker() -> None:
            nonlocal refused
            for r in todo:
                reply = await send(pool[r % POOL], metadata=md)
                if reply.status.code != pb.OK:
                    refused += 1
                    raise RuntimeError(f"refused: {reply.status.message}")

        print("ready", flush=True)
        sys.stdin.readline()  # nothing else runs on the loop yet
        start, cpu = time.time(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return {"start": start, "end": time.time(), "sent": rounds * batch, "refused": refused,
                "cpu": time.process_time() - cpu}  # fmt: skip


def main() -> int:
    target, topic = sys.argv[1], sys.argv[2]
    count, batch, concurrency, size = (int(a) for a in sys.argv[3:7])
    print(json.dumps(asyncio.run(run(target, topic, count, batch, concurrency, size))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
