"""Sends with RocketMQ's official Python producer, for ``bench_proxy`` (run by the clients'
own interpreter, never imported by the project).

``python python_send.py ENDPOINT TOPIC sync|async COUNT IN_FLIGHT BODY_BYTES``: after start-up
(one warm-up send) prints ``ready`` and waits for a line on stdin, then sends and prints
``{"start": t0, "end": t1, "sent": n, "cpu": s}`` (wall-clock seconds; the CPU seconds this
process used in between).
"""

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic, mode = sys.argv[1], sys.argv[2], sys.argv[3]
count, in_flight, size = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=30), (topic,))
producer.startup()
body = b"x" * size


def message() -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    m.tag = "bench"
    return m


producer.send(message())  # route, settings and connection in place
print("ready", flush=True)
sys.stdin.readline()
start, cpu = time.time(), time.process_time()
if mode == "sync":
    for _ in range(count):
        producer.send(message())
else:
    slots = threading.Semaphore(in_flight)
    done = threading.Event()
    left = [count]
    lock = threading.Lock()

    def finished(_future) -> None:
        slots.release()
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    for _ in range(count):
        slots.acquire()
        producer.send_async(message()).add_done_callback(finished)
    done.wait()
end, cpu = time.time(), time.process_time() - cpu
print(json.dumps({"start": start, "end": end, "sent": count, "cpu": cpu}), flush=True)
producer.shutdown()
