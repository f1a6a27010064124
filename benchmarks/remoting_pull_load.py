"""A RocketMQ 4.x pull consumer of our own for ``bench_remoting_consume``: PULL_MESSAGE as a
push consumer sends it (JSON header, batches of 32, the subscription ``*`` in the header, one
pull in flight per queue, long polling 15 s), all queues on one connection. No offset commits
(sysFlag 0x1) unless asked: ``commit`` as the last argument of ``rate`` commits with each pull
the offset it pulls from (from the second pull of a queue on), as a push consumer does with
what it has consumed.

``python -m benchmarks.remoting_pull_load rate TARGET GROUP TOPIC QUEUES COUNT [GROUPS]
[commit]`` pulls COUNT messages in each of GROUPS groups (default 1; ``GROUP-0``,
``GROUP-1``...): COUNT / QUEUES of each queue, from offset 0 (the queues were filled
beforehand), one pull in flight per group and queue. Prints ``ready`` once connected, waits
for a line on stdin, then pulls and prints ``{"start", "end", "received", "cpu"}``.

``python -m benchmarks.remoting_pull_load latency TARGET GROUP TOPIC QUEUES RATE SECONDS``
sends RATE messages/s for SECONDS (SEND_MESSAGE_V2 as ``benchmarks.remoting_load`` makes it,
the send time in the body, the queues in turn, on a second connection) while long-polling
pulls receive them; prints the send → receive latency percentiles (ms) of those sent after
the first ``WARM_UP_S``.
"""

import asyncio
import json
import struct
import sys
import time

from benchmarks.remoting_load import OPAQUE_AT, frame
from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R

BATCH = 32
SUSPEND_MS = 15_000
FLAGS = 0x2 | 0x4  # long polling, subscription in the header
FLAG_COMMIT = 0x1
STAMP = struct.Struct(">d")
BODY = 1024
WARM_UP_S = 1.0
GRACE_S = 5.0  # latency: how long the last sends may take to arrive
RC = R.ResponseCode


class Conn:
    """One connection with requests in flight: answers matched to them by opaque."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.opaque = 0
        self.waiting: dict[int, asyncio.Future[R.Command]] = {}
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, target: str) -> "Conn":
        host, _, port = target.rpartition(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def _read(self) -> None:
        try:
            while True:
                prefix = await self.reader.readexactly(4)
                cmd = R.decode(await self.reader.readexactly(R.frame_length(prefix)))
                fut = self.waiting.pop(cmd.opaque, None) if cmd.is_response else None
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection closed: {e!r}"))

    def send(self, template: bytearray) -> "asyncio.Future[R.Command]":
        """A prebuilt binary-header frame (``remoting_load.frame``) with the next opaque."""
        self.opaque += 1
        struct.pack_into(">i", template, OPAQUE_AT, self.opaque)
        fut: asyncio.Future[R.Command] = asyncio.get_running_loop().create_future()
        self.waiting[self.opaque] = fut
        self.writer.write(bytes(template))  # a copy: the template changes while it may wait
        return fut

    def call(self, cmd: R.Command) -> "asyncio.Future[R.Command]":
        self.opaque += 1
        cmd.opaque = self.opaque
        fut: asyncio.Future[R.Command] = asyncio.get_running_loop().create_future()
        self.waiting[self.opaque] = fut
        self.writer.write(R.encode(cmd))
        return fut

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


async def pull(conn: Conn, group: str, topic: str, queue_id: int, offset: int,
               commit: int = 0) -> tuple[bytes, int]:  # fmt: skip
    """One pull: the records found (b"" when none) and the offset to pull from next; with
    ``commit`` > 0 it commits that offset (sysFlag 0x1)."""
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id),
           "queueOffset": str(offset), "maxMsgNums": str(BATCH),
           "sysFlag": str(FLAGS | FLAG_COMMIT if commit > 0 else FLAGS),
           "commitOffset": str(commit), "suspendTimeoutMillis": str(SUSPEND_MS),
           "subscription": "*", "subVersion": "0", "expressionType": "TAG"}  # fmt: skip
    answer = await conn.call(R.Command(code=R.RequestCode.PULL_MESSAGE, ext=ext))
    if answer.code not in (RC.SUCCESS, RC.PULL_NOT_FOUND, RC.PULL_RETRY_IMMEDIATELY):
        raise RuntimeError(f"pull of {topic}/{queue_id}@{offset} refused: {answer.code} "
                           f"{answer.remark}")  # fmt: skip
    body = answer.body if answer.code == RC.SUCCESS else b""
    return body, int(answer.field("nextBeginOffset") or offset)


def sizes(body: bytes) -> list[int]:
    """Where each record of a pull's body starts."""
    out, at = [], 0
    while at < len(body):
        out.append(at)
        at += struct.unpack_from(">i", body, at)[0]
    return out


async def rate(target: str, group: str, topic: str, queues: int, count: int, groups: int,
               commit: bool = False) -> dict:  # fmt: skip
    conn = await Conn.open(target)
    each = count // queues
    await pull(conn, group, topic, 0, 0)  # connected, warm
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    start, cpu = time.time(), time.process_time()

    async def one(g: str, q: int) -> int:
        got = offset = 0
        while got < each:
            body, offset = await pull(conn, g, topic, q, offset, offset if commit else 0)
            got += len(sizes(body))
        return got

    names = [f"{group}-{g}" for g in range(groups)]
    got = sum(await asyncio.gather(*(one(g, q) for g in names for q in range(queues))))
    end = time.time()
    conn.close()
    return {"start": start, "end": end, "received": got, "cpu": time.process_time() - cpu}


def _stamp_of(record: bytes) -> float:
    return STAMP.unpack_from(commitlog.decode(record).body)[0]


async def latency(target: str, group: str, topic: str, queues: int, per_s: int,
                  seconds: float) -> dict:  # fmt: skip
    if not 0 < queues <= 4:
        raise ValueError("latency: 1 to 4 queues (remoting_load.frame sends to queue conn % 4)")
    sender, puller = await Conn.open(target), await Conn.open(target)
    frames = [frame(topic, b"\0" * BODY, q) for q in range(queues)]
    for q in range(queues):  # the topic created, one message on each queue
        answer = await sender.send(frames[q])
        if answer.code != RC.SUCCESS:
            raise RuntimeError(f"send refused: {answer.code} {answer.remark}")
    body_at = [len(f) - BODY for f in frames]
    lat: list[float] = []
    received = 0
    start = time.time()
    measured_from = start + WARM_UP_S
    done = asyncio.Event()

    async def receive(q: int) -> None:
        nonlocal received
        offset = 0
        while not done.is_set():
            body, offset = await pull(puller, group, topic, q, offset)
            now = time.time()
            for at in sizes(body):
                size = struct.unpack_from(">i", body, at)[0]
                sent = _stamp_of(body[at : at + size])
                received += 1
                if sent >= measured_from:
                    lat.append(now - sent)

    pullers = [asyncio.ensure_future(receive(q)) for q in range(queues)]
    answers = []
    n = int(per_s * seconds)
    for i in range(n):
        due = start + i / per_s
        pause = due - time.time()
        if pause > 0:
            await asyncio.sleep(pause)
        q = i % len(frames)
        STAMP.pack_into(frames[q], body_at[q], time.time())
        answers.append(sender.send(frames[q]))
    sent_s = time.time() - start
    for a in answers:
        if (await a).code != RC.SUCCESS:
            raise RuntimeError(f"send refused: {a.result().code} {a.result().remark}")
    measured = sum(1 for i in range(n) if start + i / per_s >= measured_from)
    deadline = time.time() + GRACE_S
    while len(lat) < measured and time.time() < deadline:
        await asyncio.sleep(0.05)  # the last sends arriving
    done.set()
    for p in pullers:
        p.cancel()
    sender.close()
    puller.close()
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(len(lat) * p))] * 1000 if lat else 0.0

    return {"sent": n, "rate": n / sent_s if sent_s else 0.0, "received": received,
            "measured": len(lat), "expected": measured, "p50_ms": pct(0.5),
            "p99_ms": pct(0.99)}  # fmt: skip


def main() -> int:
    mode, target, group, topic, queues = sys.argv[1:6]
    if mode == "rate":
        groups = int(sys.argv[7]) if len(sys.argv) > 7 else 1
        commit = sys.argv[8:] == ["commit"]
        result = asyncio.run(rate(target, group, topic, int(queues), int(sys.argv[6]), groups,
                                  commit))  # fmt: skip
    else:
        result = asyncio.run(latency(target, group, topic, int(queues), int(sys.argv[6]),
                                     float(sys.argv[7])))  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
