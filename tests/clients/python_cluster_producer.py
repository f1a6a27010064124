"""The official RocketMQ 5 Python producer sending to a cluster through one access point.

``python python_cluster_producer.py ENDPOINT TOPIC COUNT SHARED_KEY`` sends COUNT normal
messages to TOPIC, each with keys ``<SHARED_KEY>-<i>`` and SHARED_KEY, and prints one JSON line
per message sent (``message_id``, ``key``). The client spreads them over every queue of the
route it gets from ENDPOINT's QueryRoute, on whichever broker each queue is.
"""

import json
import sys

from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic, count, shared = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
producer = Producer(ClientConfiguration(endpoint, Credentials("", ""), request_timeout=10),
                    [topic])  # fmt: skip
producer.startup()
try:
    for i in range(count):
        m = Message()
        m.topic = topic
        m.body = f"python message {i}".encode()
        m.tag = "TagP"
        m.keys = f"{shared}-{i}"  # the setter adds to the message's keys
        m.keys = shared
        r = producer.send(m)
        print(json.dumps({"message_id": r.message_id, "key": f"{shared}-{i}"}), flush=True)
finally:
    producer.shutdown()
