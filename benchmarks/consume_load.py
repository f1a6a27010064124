"""A consumer load generator of our own speaking RocketMQ 5's protocol, for ``bench_consume``.

``python -m benchmarks.consume_load rate TARGET GROUP TOPIC COUNT CONSUMERS`` — CONSUMERS
receivers (batches of 32, long polling) each acking a whole batch in one AckMessage, until
COUNT messages are acked or a receive finds nothing (the store was filled beforehand);
prints ``{"start", "end", "received", "refused"}``.

``python -m benchmarks.consume_load latency TARGET GROUP TOPIC RATE SECONDS [CONSUMERS]`` —
sends RATE messages/s (1 KiB, the send time in the body) for SECONDS while CONSUMERS
(default 4) long-polling receivers ack them; prints the send → receive latency percentiles
(ms) of the messages sent after the first ``WARM_UP_S``.

Both run on one asyncio channel per process. Measured against ``noop_consume`` (2026-11-26):
the synchronous stub in threads, and raw response bytes with a minimal parse, cost the same
~100 µs of CPU per received message as this; the cost is gRPC's per streamed message.
"""

import asyncio
import json
import struct
import sys
import time

import grpc
from google.protobuf.duration_pb2 import Duration

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import CHANNEL_OPTIONS

MD = (("x-mq-client-id", "bench-consume@1@0@x"),)
STAMP = struct.Struct(">d")
WARM_UP_S = 1.0  # latency: messages sent in the first second (routes, topic made) not counted


def _receive_request(group: str, topic: str, wait_s: int) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
        invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=wait_s),
    )  # fmt: skip


async def _receive_and_ack(stub, request, on_message) -> int:
    entries = []
    async for r in stub.ReceiveMessage(request, metadata=MD, timeout=60):
        if r.HasField("message"):
            sp = r.message.system_properties
            on_message(r.message)
            entries.append(spb.AckMessageEntry(message_id=sp.message_id,
                                               receipt_handle=sp.receipt_handle))  # fmt: skip
    if entries:
        ack = await stub.AckMessage(spb.AckMessageRequest(
            group=request.group, topic=request.message_queue.topic, entries=entries,
        ), metadata=MD, timeout=30)  # fmt: skip
        if ack.status.code != pb.OK:
            raise RuntimeError(f"ack refused: {ack.status.message}")
    return len(entries)


async def rate(target: str, group: str, topic: str, count: int, consumers: int) -> dict:
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = _receive_request(group, topic, 1)
        done = 0
        start = last = time.time()

        async def worker() -> None:
            nonlocal done, start, last
            while done < count:
                n = await _receive_and_ack(stub, request, lambda m: None)
                if not n:
                    return  # all taken (by the other processes too)
                if done == 0:
                    start = time.time()
                last = time.time()  # the rate ends with the last message, not the idle poll
                done += n

        cpu0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(consumers)))
        cpu = time.process_time() - cpu0
        return {"start": start, "end": last, "received": done, "refused": 0, "cpu_s": cpu}


async def latency(target: str, group: str, topic: str, per_s: int, seconds: float,
                  consumers: int = 4) -> dict:  # fmt: skip
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=MD)
        samples: list[float] = []
        warming: list[float] = []  # sent in the first WARM_UP_S: not counted
        sending = True
        begin = time.time() + 3600  # set when the sends start

        def seen(m: pb.Message) -> None:
            sent_at = STAMP.unpack_from(m.body)[0]
            if sent_at >= begin + WARM_UP_S:
                samples.append(time.time() - sent_at)
            else:
                warming.append(sent_at)

        async def consumer() -> None:
            request = _receive_request(group, topic, 1)
            while sending or len(samples) + len(warming) < sent:
                if not sending and time.time() > stop + 10:
                    return
                await _receive_and_ack(stub, request, seen)

        # senders: requests of 8 messages, paced to per_s
        per_request = 8
        interval = per_request / per_s
        sent = 0
        tasks = [asyncio.ensure_future(consumer()) for _ in range(consumers)]
        await asyncio.sleep(0.5)  # consumers polling
        begin = time.time()
        stop = begin + seconds
        pending: set[asyncio.Future] = set()
        n = 0
        while time.time() < stop:
            due = begin + n * interval
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            msgs = [pb.Message(topic=pb.Resource(name=topic),
                               body=STAMP.pack(time.time()) + b"x" * 1016,
                               system_properties=pb.SystemProperties(
                                   message_id=f"01{n:016X}{i:016X}", message_type=pb.NORMAL,
                                   body_encoding=pb.IDENTITY, tag="lat"))
                    for i in range(per_request)]  # fmt: skip
            f = asyncio.ensure_future(stub.SendMessage(spb.SendMessageRequest(messages=msgs),
                                                       metadata=MD, timeout=30))  # fmt: skip
            pending.add(f)
            f.add_done_callback(pending.discard)
            sent += per_request
            n += 1
        await asyncio.gather(*pending)
        sending = False
        await asyncio.gather(*tasks)
        samples.sort()

        def pct(p: float) -> float:
            return samples[min(len(samples) - 1, int(p * len(samples)))] * 1000 if samples else 0.0

        return {"sent": sent, "received": len(samples) + len(warming), "rate": sent / seconds,
                "cpu_s": time.process_time(),
                "measured": len(samples),
                "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0)}  # fmt: skip


def main() -> int:
    mode, target, group, topic = sys.argv[1:5]
    a, b = int(sys.argv[5]), float(sys.argv[6])
    if mode == "rate":
        result = asyncio.run(rate(target, group, topic, a, int(b)))
    else:
        consumers = int(sys.argv[7]) if len(sys.argv) > 7 else 4
        result = asyncio.run(latency(target, group, topic, a, b, consumers))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
