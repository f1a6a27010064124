"""The official RocketMQ 5 Python producer sending without pause, for the switchover test.

``python ha_producer.py ENDPOINT TOPIC THREADS`` sends messages with keys ``ha-<thread>-<n>``
from THREADS threads until it is killed, and prints one JSON line per send: ``ok`` with the
message id when the SendReceipt came back without error, else the error.
"""

import json
import sys
import threading

from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
printing = threading.Lock()


def out(**kw):
    with printing:
        print(json.dumps(kw), flush=True)


config = ClientConfiguration(endpoint, Credentials("", ""), request_timeout=5)
producer = Producer(config, [topic])
producer.startup()


def send(t: int) -> None:
    n = 0
    while True:
        key = f"ha-{t}-{n}"
        m = Message()
        m.topic = topic
        m.body = f"message {key}".encode()
        m.keys = key
        try:
            r = producer.send(m)
        except Exception as e:  # noqa: BLE001 - every failure is a line for the test
            out(key=key, ok=False, error=f"{type(e).__name__}: {e}"[:300])
        else:
            out(key=key, ok=True, message_id=r.message_id)
        n += 1


for t in range(threads):
    threading.Thread(target=send, args=(t,), daemon=True).start()
threading.Event().wait()
