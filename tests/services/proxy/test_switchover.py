"""Issue 43's done-when: the official RocketMQ 5 Python producer sends without pause
through a proxy to a sync_master rmqstore node with an rmqstore slave; the master's writer
is killed (``kill -9``) under that load and the slave promoted (``rmqstore admin promote``):
every message the producer was told was stored (a SendReceipt without error: PUT_OK) is on
the new master, and the former master, started again, rejoins as its slave and ends with
the same commit log."""

import json
import subprocess
import threading

import pytest

from rmqstore.server import channel
from rmqstore.v1 import topics_pb2, topics_pb2_grpc
from tests import procs
from tests.services.commitlog.nodes import Node, admin
from tests.services.commitlog.replicas import files, wait_for
from tests.services.proxy.conftest import CLIENTS, PYTHON_CLIENT, client_env

pytestmark = pytest.mark.integration
TOPIC = "Orders"


def _commitlog_bytes(node: Node) -> bytes:
    return b"".join(files(node.store / "commitlog").values())


def test_no_acknowledged_message_is_lost_across_a_switchover(tmp_path, client_runtimes):
    a, b = Node(tmp_path, "a"), Node(tmp_path, "b")
    proxy = producer = None
    lines: list[dict] = []
    try:
        a.master(builders=False)
        b.slave_of(a, builders=False)
        a.wait_slaves(1)
        topics_pb2_grpc.TopicsStub(channel(a.address)).CreateTopic(
            topics_pb2.CreateTopicRequest(name=TOPIC, queue_nums=4), timeout=10)
        proxy = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                            a.address)  # fmt: skip
        producer = subprocess.Popen(
            [str(PYTHON_CLIENT), str(CLIENTS / "ha_producer.py"), proxy.address, TOPIC, "4"],
            env=client_env(tmp_path / "home"), text=True, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def pump() -> None:
            assert producer is not None and producer.stdout is not None
            for line in producer.stdout:
                if line.startswith("{"):
                    lines.append(json.loads(line))

        threading.Thread(target=pump, daemon=True).start()
        wait_for(lambda: sum(x["ok"] for x in lines) >= 300, 120, "300 acknowledged sends")
        a.kill_writer()  # under load
        sent = len(lines)
        wait_for(lambda: len(lines) > sent and not lines[-1]["ok"], 60,
                 "the producer to see the master gone")  # fmt: skip
        producer.kill()
        producer.wait(10)
        acked = [x for x in lines if x["ok"]]

        promoted = admin("promote", "--commitlog", b.address, "--role", "sync_master")
        assert promoted.returncode == 0, promoted
        held = _commitlog_bytes(b)
        missing = [x for x in acked
                   if f"UNIQ_KEY\x01{x['message_id']}\x02".encode() not in held]  # fmt: skip
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged sends are lost"

        a.slave_of(b, builders=False)  # the former master rejoins
        b.wait_slaves(1)
        assert b.put(0).results[0].status == 0  # PUT_OK: held by the former master
        end = b.max_offset()
        wait_for(lambda: a.max_offset() == end, 60, "the former master to catch up")
        assert files(a.store / "commitlog") == files(b.store / "commitlog")
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        if proxy is not None:
            proxy.kill()
        a.stop()
        b.stop()
