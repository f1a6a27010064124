"""RocketMQ's official consumers (Python SimpleConsumer and PushConsumer, Node.js
SimpleConsumer, each in its own process) against ``rmqstore serve``, with messages sent by
the official Python producer: every message received and acknowledged, redelivery after the
invisible time, tag filters, two groups, dead letters, FIFO with two consumers, a consumer
that dies and one that resumes, and a SIGKILL of every service mid-consumption."""

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from rmqstore.formats import commitlog, consumer_offsets
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, query_pb2, query_pb2_grpc
from tests import procs
from tests.services.proxy.conftest import CLIENTS, PYTHON_CLIENT, Serve, client_env

pytestmark = pytest.mark.integration
DEADLINE_S = 150
SCRIPT = str(CLIENTS / "python_consumer.py")


class Run(procs.JsonLines):
    """A client of tests/clients (Python, or Node.js with ``node``) and its JSON lines."""

    def __init__(self, env: dict, *argv: str, node: bool = False) -> None:
        cmd = ["node", str(CLIENTS / "node_consumer.js"), *argv] if node else [
            str(PYTHON_CLIENT), SCRIPT, *argv]  # fmt: skip
        super().__init__(cmd, env)

    def wait(self, timeout: float = DEADLINE_S) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(30)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                self.proc.kill()
                self.proc.wait(10)



def _until(what: str, fn, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        result = fn()
        if result:
            return result
        assert time.monotonic() < deadline, f"not in {deadline_s}s: {what}"
        time.sleep(0.2)  # polling the condition


def send(env, serve, topic, n, prefix="m", tag="", group="") -> dict[str, str]:
    r = Run(env, "send", serve.proxy, topic, str(n), prefix, tag, group)
    assert r.wait() == 0, r.explain()
    sent = {e["id"]: e["body"] for e in r.of("sent")}
    assert len(sent) == n
    return sent


def metric(serve, name: str, group: str, topic: str) -> float:
    with urllib.request.urlopen(f"http://{serve.address(14)}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = f'{name}{{group="{group}",topic="{topic}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(want))


def committed(store: Path, topic: str, group: str) -> int:
    path = store / "config" / "consumerOffset.json"
    if not path.exists():
        return -1
    table = consumer_offsets.parse(path.read_text())
    return sum(table.offsets.get((topic, group), {}).values())


@pytest.fixture(scope="module")
def served(tmp_path_factory, client_runtimes):
    tmp = tmp_path_factory.mktemp("consumers")
    serve = Serve(tmp / "store", "--group-retry-max-times", "1", "--fifo-group", "FifoG",
                  "--fifo-group", "FifoP")  # fmt: skip
    try:
        yield serve, client_env(tmp / "home")
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])


def test_simple_consumer_acks_all_and_an_unacked_message_returns_with_attempt_2(served):
    serve, env = served
    sent = send(env, serve, "CSimple", 10)
    r = Run(env, "simple", serve.proxy, "G1", "CSimple", "10", "--leave-first", "--invisible", "2")
    assert r.wait() == 0, r.explain()
    assert {e["id"] for e in r.of("acked")} == set(sent)
    left = r.of("left")[0]["id"]
    attempts = [e["attempt"] for e in r.of("received") if e["id"] == left]
    assert attempts == [1, 2]
    assert all(e["attempt"] == 1 for e in r.of("received") if e["id"] != left)
    assert {e["body"] for e in r.of("received")} == set(sent.values())
    assert {e["topic"] for e in r.of("received")} == {"CSimple"}  # the retry copy's too
    # the group's progress reaches RocketMQ's file: every offset settled, the left one by
    # its copy to the group's retry topic, which the group consumed and settled in turn
    _until("offsets committed", lambda: committed(serve.store, "CSimple", "G1") == 10)
    _until("retry committed", lambda: committed(serve.store, "%RETRY%G1_CSimple", "G1") == 1)
    # the copy, found by message id and by key, as RocketMQ 4.9 reads it (CRC included)
    (m,) = _until("retry copy indexed", lambda: _stored(serve, "%RETRY%G1_CSimple", mid=left))
    (by_key,) = _until("by key", lambda: _stored(serve, "%RETRY%G1_CSimple", key=sent[left]))
    assert by_key.phy_offset == m.phy_offset
    rec = _record(serve, m.phy_offset)
    assert (rec.topic, rec.queue_id, rec.reconsume_times, rec.uniq_key, rec.body) == (
        "%RETRY%G1_CSimple", 0, 1, left, sent[left].encode())  # fmt: skip
    props = rec.property_map
    assert (props["RETRY_TOPIC"], props["RECONSUME_TIME"], props["ORIGIN_MESSAGE_ID"],
            props["KEYS"]) == ("CSimple", "1", left, sent[left])  # fmt: skip
    assert metric(serve, "rmqstore_consumer_retries_total", "G1", "CSimple") == 1
    assert metric(serve, "rmqstore_consumer_acks_total", "G1", "CSimple") == 10
    assert metric(serve, "rmqstore_consumer_redeliveries_total", "G1", "CSimple") == 1
    assert metric(serve, "rmqstore_consumer_deliveries_total", "G1", "CSimple") == 11


def _stored(serve, topic: str, mid: str = "", key: str = ""):
    """The messages of ``topic`` the query service finds by message id or key (None: none
    yet)."""
    q = query_pb2_grpc.QueryStub(channel(serve.address(1)))
    try:
        if mid:
            return q.QueryById(query_pb2.QueryByIdRequest(id=mid, topic=topic), timeout=10).messages
        return q.QueryByKey(query_pb2.QueryByKeyRequest(topic=topic, key=key), timeout=10).messages
    except grpc.RpcError:
        return None


def _record(serve, phy_offset: int) -> commitlog.Record:
    """The record at ``phy_offset``, decoded with RocketMQ 4.9's checks (CRC included)."""
    writer = commitlog_pb2_grpc.CommitLogStub(channel(serve.address(0)))
    (raw,) = writer.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[phy_offset])).records
    return commitlog.decode(raw, 0, check_crc=True)


def test_two_groups_each_get_every_message_node_and_python(served):
    serve, env = served
    sent = send(env, serve, "CTwo", 12)
    runs = [Run(env, "simple", serve.proxy, "GA", "CTwo", "12"),
            Run(env, serve.proxy, "GB", "CTwo", "12", node=True)]  # fmt: skip
    for r in runs:
        assert r.wait() == 0, r.explain()
        assert {e["id"] for e in r.of("acked")} == set(sent)


def test_tag_filter_delivers_only_matching_tags_and_settles_the_rest(served):
    serve, env = served
    wanted = send(env, serve, "CTags", 3, "a", "a") | send(env, serve, "CTags", 3, "b", "b")
    send(env, serve, "CTags", 3, "c", "c")
    r = Run(env, "simple", serve.proxy, "GT", "CTags", "6", "--tags", "a||b")
    assert r.wait() == 0, r.explain()
    assert {e["id"] for e in r.of("received")} == set(wanted)
    assert {e["tag"] for e in r.of("received")} == {"a", "b"}
    _until("filtered offsets settled", lambda: committed(serve.store, "CTags", "GT") == 9)


def test_push_listener_that_always_fails_sends_to_the_dead_letter_topic(served):
    serve, env = served
    (mid,) = send(env, serve, "CDead", 1)
    r = Run(env, "push", serve.proxy, "GD", "CDead", "--fail")
    try:
        (m,) = _until("the dead letter", lambda: _stored(serve, "%DLQ%GD", mid=mid))
    finally:
        r.close()
    # retryMaxTimes 1: two deliveries (the second of the retry topic's copy), then the
    # dead-letter topic, whose record still names the original topic and message id
    assert [(e["attempt"], e["id"]) for e in r.of("received")] == [(1, mid), (2, mid)], r.explain()
    _until("dead letter settled", lambda: committed(serve.store, "CDead", "GD") == 1)
    _until("retry settled", lambda: committed(serve.store, "%RETRY%GD_CDead", "GD") == 1)
    assert metric(serve, "rmqstore_consumer_retries_total", "GD", "CDead") == 1
    assert metric(serve, "rmqstore_consumer_dead_letters_total", "GD", "CDead") == 1
    # the record as RocketMQ 4.9 reads it: CRC, topic %DLQ%<group> queue 0, reconsume times
    rec = _record(serve, m.phy_offset)
    assert (rec.topic, rec.queue_id, rec.reconsume_times, rec.uniq_key, rec.body) == (
        "%DLQ%GD", 0, 1, mid, b"m-0")  # fmt: skip
    props = rec.property_map
    assert (props["DLQ_ORIGIN_TOPIC"], props["DLQ_ORIGIN_MESSAGE_ID"], props["RETRY_TOPIC"],
            props["ORIGIN_MESSAGE_ID"]) == ("CDead", mid, "CDead", mid)  # fmt: skip


def test_push_consumer_acks_every_message(served):
    serve, env = served
    sent = send(env, serve, "CPush", 10)
    r = Run(env, "push", serve.proxy, "GP", "CPush")
    try:
        _until("every message acked", lambda: committed(serve.store, "CPush", "GP") == 10)
    finally:
        r.close()
    assert {e["id"] for e in r.of("received")} == set(sent)


def test_fifo_push_consumer_forwards_a_failing_message_to_the_dead_letter_topic(served):
    serve, env = served
    (mid,) = send(env, serve, "CFifoDead", 1, "f", "", "g1")
    r = Run(env, "push", serve.proxy, "FifoP", "CFifoDead", "--fail")
    try:
        (m,) = _until("the forwarded dead letter", lambda: _stored(serve, "%DLQ%FifoP", mid=mid))
    finally:
        r.close()
    props = {p.name: p.value for p in m.properties}
    assert props["DLQ_ORIGIN_TOPIC"] == "CFifoDead" and props["__SHARDINGKEY"] == "g1"
    # the client retried it itself, then forwarded it (ForwardMessageToDeadLetterQueue)
    assert any("forwarded to the dead-letter topic by a consumer of FifoP" in line
               for line in serve.lines)  # fmt: skip


def test_fifo_group_with_two_consumers_keeps_each_message_group_in_order(served):
    serve, env = served
    sent = send(env, serve, "CFifo", 8, "x", "", "gx") | send(env, serve, "CFifo", 8, "y", "", "gy")
    runs = [Run(env, "simple", serve.proxy, "FifoG", "CFifo", "16") for _ in range(2)]
    try:
        _until("every FIFO message acked",
               lambda: {e["id"] for r in runs for e in r.of("acked")} == set(sent))  # fmt: skip
    finally:
        for r in runs:
            r.proc.terminate()
            r.proc.wait(30)
    # ordered by the clients' own stamps (one monotonic clock for the machine), not by when
    # their lines came through two pipes
    events = sorted((e for r in runs for e in r.events), key=lambda e: e["mono"])
    acking = {e["id"]: e["mono"] for e in events if e["event"] == "acking"}
    for g in ("gx", "gy"):
        received = [e for e in events if e["event"] == "received" and e.get("group") == g]
        bodies = [int(e["body"][2:]) for e in received]
        assert bodies == list(range(8)), bodies  # one delivery each, in order
        for before, after in zip(received, received[1:], strict=False):
            # handed out only once the one before was acked: its consumer stamped "acking"
            # before sending the ack, the proxy took the ack before handing out the next,
            # which was stamped "received" after it came: strictly later, however slow
            # the machine
            assert acking[before["id"]] < after["mono"], (before, after)


def test_consumer_that_dies_is_resumed_by_the_next_one_of_its_group(served):
    serve, env = served
    sent = send(env, serve, "CResume", 20)
    first = Run(env, "simple", serve.proxy, "GR", "CResume", "20", "--invisible", "2",
                "--stop-after", "8")  # fmt: skip
    assert first.wait() == 3, first.explain()
    # with no one receiving, what it left is copied to the retry topic once its invisible
    # time is over, and the topic's committed offset moves past it
    _until("moved on", lambda: committed(serve.store, "CResume", "GR") == 20)
    # the lag metrics see what the dead consumer left: 20 - 8 messages at least, not new
    lag = "rmqstore_consumer_lag_messages"
    _until("lag observed", lambda: metric(serve, lag, "GR", "CResume") >= 12)
    assert metric(serve, "rmqstore_consumer_lag_seconds", "GR", "CResume") > 0
    second = Run(env, "simple", serve.proxy, "GR", "CResume", "12", "--invisible", "2")
    assert second.wait() == 0, second.explain()
    acked_first = {e["id"] for e in first.of("acked")}
    acked_second = {e["id"] for e in second.of("acked")}
    assert len(acked_first) == 8 and acked_first | acked_second == set(sent)
    assert not acked_first & acked_second  # acked once: never handed out again
    _until("no lag left", lambda: metric(serve, lag, "GR", "CResume") == 0)


def _kill_all(serve: Serve) -> None:
    """SIGKILL every service of ``serve`` and serve itself, as a machine crash would."""
    for c in procs.children(serve.proc.pid):
        os.kill(c, signal.SIGKILL)
    serve.proc.kill()
    serve.proc.wait(10)


def test_sigkill_of_every_service_mid_consumption_loses_nothing(tmp_path, client_runtimes):
    env = client_env(tmp_path / "home")
    store = tmp_path / "store"
    serve = Serve(store)
    try:
        sent = send(env, serve, "CCrash", 30)
        # the consumer dies after 10 acks, whatever the machine's speed: 20 are left in
        # flight or unreceived
        r = Run(env, "simple", serve.proxy, "GK", "CCrash", "30", "--invisible", "3",
                "--stop-after", "10")  # fmt: skip
        assert r.wait() == 3, r.explain()
        assert len(r.of("acked")) == 10
        # the first message acked heads its queue: the group's progress moves once flushed
        _until("some progress flushed", lambda: committed(store, "CCrash", "GK") >= 1)
        _kill_all(serve)
    finally:
        if serve.proc.poll() is None:
            serve.stop()
    serve = Serve(store)
    try:
        again = Run(env, "simple", serve.proxy, "GK", "CCrash", "30", "--invisible", "3")
        acked = lambda: {e["id"] for e in r.of("acked") + again.of("acked")}  # noqa: E731
        _until("everything acked at least once", lambda: acked() == set(sent))
        again.proc.terminate()
        again.proc.wait(30)
        # what the group had settled before the crash (and flushed) is not handed out again
        assert len(again.of("received")) < 30
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])
