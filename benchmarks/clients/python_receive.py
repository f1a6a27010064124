"""Receives with RocketMQ's official Python SimpleConsumer, for ``bench_consume`` (run by the
clients' own interpreter, never imported by the project).

``python python_receive.py ENDPOINT GROUP TOPIC COUNT``: receive batches of 32 (invisible
30 s) and ack each message until COUNT are acked; after start-up (the first batch), prints
``{"start": t0, "end": t1, "received": n}`` (wall-clock seconds).
"""

import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

endpoint, group, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
config = ClientConfiguration(endpoint, Credentials(), request_timeout=30)
consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
consumer.startup()
done = 0
start = None
deadline = time.monotonic() + 600
while done < count and time.monotonic() < deadline:
    batch = consumer.receive(32, 30)
    if start is None and batch:
        start = time.time()
    for m in batch:
        consumer.ack(m)
        done += 1
end = time.time()
print(json.dumps({"start": start or end, "end": end, "received": done}), flush=True)
consumer.shutdown()
