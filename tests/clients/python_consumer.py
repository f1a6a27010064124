"""The official RocketMQ 5 Python client as a consumer (and a plain producer), run in a
process of its own by the proxy's consumer tests. One JSON line per event on stdout.

    python_consumer.py send ENDPOINT TOPIC COUNT [PREFIX] [TAG] [MESSAGE_GROUP]
    python_consumer.py simple ENDPOINT GROUP TOPIC EXPECT [--leave-first] [--tags EXPR]
        [--invisible S] [--stop-after N] [--slow S] [--await S]
    python_consumer.py push ENDPOINT GROUP TOPIC [--fail]   (runs until stdin closes)

``simple`` receives (batch 32) and acks until EXPECT distinct messages are acked; with
``--leave-first`` the first message is not acked and must come back (attempt 2) before it is;
``--stop-after N`` exits (code 3) after N acks, without shutting down cleanly; ``--await S``
is how long a receive may be held (long polling) when nothing is there (default 5).

Every line carries ``mono``, the process's ``time.monotonic()`` when it was written (one
clock for every process of the machine); ``acking`` is written just before an ack is sent.
"""

import argparse
import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

_printing = threading.Lock()


def out(**kw):
    # stamped here, by the machine's monotonic clock, which every process reads alike: the
    # tests order two consumers' events by it, not by when their lines reach the test
    line = json.dumps({**kw, "mono": time.monotonic()}) + "\n"
    with _printing:  # a PushConsumer's listener runs on many threads
        sys.stdout.write(line)
        sys.stdout.flush()


def config(endpoint):
    return ClientConfiguration(endpoint, Credentials("", ""), request_timeout=10)


def send(a):
    producer = Producer(config(a.endpoint), [a.topic])
    producer.startup()
    try:
        for i in range(a.count):
            m = Message()
            m.topic = a.topic
            m.body = f"{a.prefix}-{i}".encode()
            if a.tag:
                m.tag = a.tag
            if a.message_group:
                m.message_group = a.message_group
            m.keys = f"{a.prefix}-{i}"
            receipt = producer.send(m)
            out(event="sent", id=receipt.message_id, body=f"{a.prefix}-{i}")
    finally:
        producer.shutdown()


def simple(a):
    consumer = SimpleConsumer(
        config(a.endpoint), a.group, {a.topic: FilterExpression(a.tags)},
        await_duration=a.await_s,
    )
    consumer.startup()
    acked, left = set(), None
    deadline = time.monotonic() + 120
    while len(acked) < a.expect and time.monotonic() < deadline:
        for m in consumer.receive(32, a.invisible):
            body = m.body.decode()
            out(event="received", id=m.message_id, body=body, attempt=m.delivery_attempt,
                tag=m.tag, group=m.message_group, topic=m.topic)
            if a.leave_first and left is None:
                left = m.message_id
                out(event="left", id=m.message_id)
                continue
            time.sleep(a.slow)  # the application's work
            out(event="acking", id=m.message_id)  # before the ack leaves
            consumer.ack(m)
            acked.add(m.message_id)
            out(event="acked", id=m.message_id, body=body)
            if a.stop_after and len(acked) >= a.stop_after:
                os._exit(3)  # a consumer that dies: no clean shutdown
    consumer.shutdown()
    out(event="done", acked=len(acked))
    sys.exit(0 if len(acked) >= a.expect else 1)


class Listener(MessageListener):
    def __init__(self, fail):
        self.fail = fail

    def consume(self, m):
        out(event="received", id=m.message_id, body=m.body.decode(), attempt=m.delivery_attempt)
        return ConsumeResult.FAILURE if self.fail else ConsumeResult.SUCCESS


def push(a):
    consumer = PushConsumer(
        config(a.endpoint), a.group, Listener(a.fail), {a.topic: FilterExpression(a.tags)}
    )
    consumer.startup()
    out(event="started")
    sys.stdin.read()  # until the test closes stdin
    consumer.shutdown()


p = argparse.ArgumentParser()
sub = p.add_subparsers(dest="cmd", required=True)
s = sub.add_parser("send")
for name in ("endpoint", "topic"):
    s.add_argument(name)
s.add_argument("count", type=int)
s.add_argument("prefix", nargs="?", default="m")
s.add_argument("tag", nargs="?", default="")
s.add_argument("message_group", nargs="?", default="")
s = sub.add_parser("simple")
for name in ("endpoint", "group", "topic"):
    s.add_argument(name)
s.add_argument("expect", type=int)
s.add_argument("--leave-first", action="store_true")
s.add_argument("--tags", default="*")
s.add_argument("--invisible", type=int, default=15)
s.add_argument("--stop-after", type=int, default=0)
s.add_argument("--slow", type=float, default=0.0, help="seconds of work per message")
s.add_argument("--await", dest="await_s", type=int, default=5)
s = sub.add_parser("push")
for name in ("endpoint", "group", "topic"):
    s.add_argument(name)
s.add_argument("--fail", action="store_true")
s.add_argument("--tags", default="*")
args = p.parse_args()
threading.current_thread().name = args.cmd
{"send": send, "simple": simple, "push": push}[args.cmd](args)
