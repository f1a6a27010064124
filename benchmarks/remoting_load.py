"""A RocketMQ 4.x producer of our own for the remoting benchmark: SEND_MESSAGE_V2 of one
message each, as the benchmark Producer sends them (binary header, 1 KiB, KEYS, UNIQ_KEY,
TAGS), over ``CONNECTIONS`` connections, ``INFLIGHT`` sends unanswered per connection (1: a
synchronous sender, one message per call and wait).

``python -m benchmarks.remoting_load TARGET TOPIC COUNT CONNECTIONS INFLIGHT BODY_BYTES``
prints ``ready`` once connected (a first send answered on each connection), waits for a line
on stdin, sends COUNT messages in all, and prints ``{"start": t0, "end": t1, "sent": n,
"refused": r, "cpu": s}``. Each connection's frame is made once; only its opaque changes.
"""

import asyncio
import json
import struct
import sys
import time

from rmqstore.formats import remoting as R

OPAQUE_AT = 4 + 4 + 2 + 1 + 2  # length, header word, code, language, version


def frame(topic: str, body: bytes, conn: int) -> bytearray:
    props = (f"KEYS\x01bench-{conn}\x02UNIQ_KEY\x01FD00000000000000000000000000{conn:04X}"
             "\x02WAIT\x01true\x02TAGS\x01TagA")  # fmt: skip
    ext = {"a": "PG_BENCH", "b": topic, "c": "TBW102", "d": "4", "e": str(conn % 4), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false",
           "m": "false"}  # fmt: skip
    cmd = R.Command(code=R.RequestCode.SEND_MESSAGE_V2, ext=ext, body=body,
                    serialize_type=R.ROCKETMQ)  # fmt: skip
    return bytearray(R.encode(cmd))


class Sender:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 template: bytearray) -> None:  # fmt: skip
        self.reader = reader
        self.writer = writer
        self.template = template
        self.opaque = 0
        self.refused = 0

    async def send(self, n: int, inflight: int) -> None:
        """``n`` sends, at most ``inflight`` unanswered."""
        sent = answered = 0
        while answered < n:
            while sent < n and sent - answered < inflight:
                self.opaque += 1
                struct.pack_into(">i", self.template, OPAQUE_AT, self.opaque)
                self.writer.write(self.template)
                sent += 1
            prefix = await self.reader.readexactly(4)
            answer = R.decode(await self.reader.readexactly(R.frame_length(prefix)))
            if answer.code != 0:
                self.refused += 1
                raise RuntimeError(f"refused: {answer.code} {answer.remark}")
            answered += 1


async def run(target: str, topic: str, count: int, connections: int, inflight: int,
              size: int) -> dict:  # fmt: skip
    host, _, port = target.rpartition(":")
    body = b"x" * size
    senders = []
    for c in range(connections):
        reader, writer = await asyncio.open_connection(host, int(port))
        sender = Sender(reader, writer, frame(topic, body, c))
        await sender.send(1, 1)  # connected, topic created, warm
        senders.append(sender)
    each = max(1, count // connections)
    print("ready", flush=True)
    sys.stdin.readline()
    start, cpu = time.time(), time.process_time()
    await asyncio.gather(*(s.send(each, inflight) for s in senders))
    end = time.time()
    for s in senders:
        s.writer.close()
    refused = sum(s.refused for s in senders)
    return {"start": start, "end": end, "sent": each * connections, "refused": refused,
            "cpu": time.process_time() - cpu}  # fmt: skip


def main() -> int:
    target, topic = sys.argv[1], sys.argv[2]
    count, connections, inflight, size = (int(a) for a in sys.argv[3:7])
    result = asyncio.run(run(target, topic, count, connections, inflight, size))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
