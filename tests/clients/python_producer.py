"""The official RocketMQ 5 Python producer, run in a process of its own by the proxy's tests.

``python python_producer.py ENDPOINT PREFIX`` sends normal, FIFO, delayed and transactional
messages (commit, rollback, and one left open for the server's check, which this checker
commits) to topics ``<PREFIX>Normal``, ``<PREFIX>Fifo``, ``<PREFIX>Delay``, ``<PREFIX>Tx``,
and prints one JSON line per message sent; ``check`` lines tell which checks arrived.
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

endpoint, prefix = sys.argv[1], sys.argv[2]
ak = sys.argv[3] if len(sys.argv) > 3 else ""
sk = sys.argv[4] if len(sys.argv) > 4 else ""
checked = threading.Event()


def out(**kw):
    print(json.dumps(kw), flush=True)


class Checker(TransactionChecker):
    def check(self, message):
        out(event="check", message_id=message.message_id, keys=list(message.keys))
        checked.set()
        return TransactionResolution.COMMIT


def message(topic, body, key, tag="t1"):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = tag
    m.keys = key
    m.add_property("origin", "python")
    return m


topics = [prefix + t for t in ("Normal", "Fifo", "Delay", "Tx")]
config = ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=10)
producer = Producer(config, topics, checker=Checker())
producer.startup()
# the answer to a check goes out asynchronously after the checker returns: keep its future,
# so the producer is not shut down before the server has it
answers = []
_end_transaction_async = producer.rpc_client.end_transaction_async


def _keep_answer(*args, **kwargs):
    future = _end_transaction_async(*args, **kwargs)
    answers.append(future)
    return future


producer.rpc_client.end_transaction_async = _keep_answer
try:
    for i in range(5):
        key = f"{prefix}-normal-{i}"
        r = producer.send(message(prefix + "Normal", f"normal {i}", key))
        out(kind="normal", topic=prefix + "Normal", message_id=r.message_id, key=key)
    futures = []
    for i in range(5):
        key = f"{prefix}-async-{i}"
        futures.append(
            (key, producer.send_async(message(prefix + "Normal", f"normal async {i}", key)))
        )
    for key, f in futures:
        out(kind="normal", topic=prefix + "Normal", message_id=f.result(30).message_id, key=key)
    for i in range(8):
        group = f"group-{i % 2}"
        key = f"{prefix}-fifo-{i}"
        m = message(prefix + "Fifo", f"fifo {i}", key)
        m.message_group = group
        r = producer.send(m)
        out(
            kind="fifo", topic=prefix + "Fifo", message_id=r.message_id, key=key, group=group, seq=i
        )
    key = f"{prefix}-delay-0"
    m = message(prefix + "Delay", "delay", key)
    m.delivery_timestamp = int(time.time()) + 3  # seconds, as this client sends it
    r = producer.send(m)
    out(kind="delay", topic=prefix + "Delay", message_id=r.message_id, key=key)
    for outcome in ("commit", "rollback", "check"):
        key = f"{prefix}-tx-{outcome}"
        tx = producer.begin_transaction()
        r = producer.send(message(prefix + "Tx", f"tx {outcome}", key), tx)
        if outcome == "commit":
            tx.commit()
        elif outcome == "rollback":
            tx.rollback()
        out(
            kind="tx",
            topic=prefix + "Tx",
            message_id=r.message_id,
            key=key,
            outcome=outcome,
            transaction_id=r.transaction_id,
        )
    if not checked.wait(60):
        out(event="no_check")
    # the check and its EndTransaction run on the producer's one check thread: a task
    # queued behind them finishes once the answer has been sent
    producer._Producer__transaction_check_executor.submit(lambda: None).result(30)
    for future in answers:
        future.result(30)
finally:
    producer.shutdown()
out(event="done")
