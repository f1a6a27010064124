"""RocketMQ's official producers (Python and Node.js, each in its own process) against
``rmqstore serve``: normal, FIFO, delayed and transactional sends (commit, rollback, one
resolved by the server's check); then every message is looked up through rmqstore's own
query service, and the store is checked as RocketMQ 4.9 would read it."""

import json
import subprocess
import time
import urllib.request
from collections import defaultdict

import grpc
import pytest

from rmqstore.dispatch import from_record, goes_to_consume_queue
from rmqstore.formats import commitlog, commitlog_segment
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.layout import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC, StoreLayout
from rmqstore.segments import parse_segment_name
from rmqstore.server import channel
from rmqstore.v1 import query_pb2, query_pb2_grpc
from tests.services.proxy.conftest import CLIENTS, PYTHON_CLIENT, Serve, client_env

pytestmark = pytest.mark.integration
DEADLINE_S = 120


@pytest.fixture(scope="module")
def sent(tmp_path_factory, client_runtimes):
    """Serve, run both producers at once, and return (serve, JSON lines per client)."""
    tmp = tmp_path_factory.mktemp("clients")
    serve = Serve(tmp / "store", "--transaction-timeout", "1", "--transaction-check-interval",
                  "1", "--cq-entries-per-file", "1000")  # fmt: skip
    env = client_env(tmp / "home")
    runs = {
        "Py": subprocess.Popen([str(PYTHON_CLIENT), str(CLIENTS / "python_producer.py"),
                                serve.proxy, "Py"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE),
        "Nd": subprocess.Popen(["node", str(CLIENTS / "node_producer.js"), serve.proxy, "Nd"],
                               env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE),
    }  # fmt: skip
    lines = {}
    try:
        for name, p in runs.items():
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, f"{name} producer failed:\n{out}\n{err}"
            lines[name] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        yield serve, lines
    finally:
        for p in runs.values():
            if p.poll() is None:
                p.kill()
        assert serve.stop() == 0, "".join(serve.lines)


def _query(serve):
    return query_pb2_grpc.QueryStub(channel(serve.address(1)))


def _messages(lines):
    return [m for m in lines if "kind" in m]


def _found_by_key(q, topic, key, message_id):
    try:
        r = q.QueryByKey(query_pb2.QueryByKeyRequest(topic=topic, key=key), timeout=10)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:  # no consume queue of the topic yet
            return []
        raise
    return [m for m in r.messages if m.unique_key == message_id]


def _wait_for(what, fn):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = fn()
        if result:
            return result
        assert time.monotonic() < deadline, f"not found in {DEADLINE_S}s: {what}"
        time.sleep(0.2)  # polling the condition, not waiting for an outcome


def test_both_producers_sent_everything_and_answered_the_check(sent):
    _serve, lines = sent
    for name, ls in lines.items():
        kinds = [m["kind"] for m in _messages(ls)]
        assert kinds.count("normal") >= 5 and kinds.count("fifo") == 8, name
        assert kinds.count("delay") == 1 and kinds.count("tx") == 3, name
        assert {"event": "done"} in ls, name
        check = [m for m in ls if m.get("event") == "check"]
        assert [c["keys"] for c in check] == [[f"{name}-tx-check"]], name
        assert all(len(m["transaction_id"]) == 32 for m in _messages(ls) if m["kind"] == "tx")


def test_every_message_found_by_key_and_by_id(sent):
    serve, lines = sent
    q = _query(serve)
    for ls in lines.values():
        for m in _messages(ls):
            if m.get("outcome") == "rollback":
                continue
            topic, key, mid = m["topic"], m["key"], m["message_id"]
            # a delayed one too: the writer delivers it into its topic at its delivery time
            hits = _wait_for(key, lambda t=topic, k=key, i=mid: _found_by_key(q, t, k, i))
            if m["kind"] == "delay":
                at = int({p.name: p.value for p in hits[0].properties}["TIMER_DELIVER_MS"])
                assert hits[0].store_timestamp >= at, "delivered before its delivery time"
            assert hits[0].body.decode().startswith(m["kind"] if m["kind"] != "tx" else "tx ")
            by_id = q.QueryById(query_pb2.QueryByIdRequest(id=mid, topic=topic), timeout=10)
            assert [x.unique_key for x in by_id.messages] == [mid], m
            props = {p.name: p.value for p in hits[0].properties}
            assert props["origin"] in ("python", "node")


def test_rolled_back_messages_never_reach_their_topic(sent):
    serve, lines = sent
    q = _query(serve)
    for ls in lines.values():
        [m] = [m for m in _messages(ls) if m.get("outcome") == "rollback"]
        half = _wait_for(m["key"], lambda m=m: _found_by_key(q, TRANS_HALF_TOPIC, m["key"],
                                                             m["message_id"]))  # fmt: skip
        assert half
        assert _found_by_key(q, m["topic"], m["key"], m["message_id"]) == []


def test_fifo_groups_sit_in_one_queue_in_send_order(sent):
    serve, lines = sent
    q = _query(serve)
    for ls in lines.values():
        by_group = defaultdict(list)
        for m in _messages(ls):
            if m["kind"] == "fifo":
                [hit] = _wait_for(m["key"], lambda m=m: _found_by_key(
                    q, m["topic"], m["key"], m["message_id"]))  # fmt: skip
                props = {p.name: p.value for p in hit.properties}
                assert props["__SHARDINGKEY"] == m["group"]
                by_group[m["group"]].append((m["seq"], hit.queue_id, hit.queue_offset))
        assert len(by_group) == 2
        for group, entries in by_group.items():
            assert len({qid for _s, qid, _o in entries}) == 1, group
            offsets = [o for _s, _q, o in sorted(entries)]
            assert offsets == sorted(offsets), group


def _records(store):
    out = []
    for path in sorted((store / "commitlog").iterdir()):
        if path.name.isdigit():
            base = parse_segment_name(path.name)
            out += [
                r for _, r in commitlog_segment.iter_segment(path.read_bytes(), base_offset=base)
            ]
    return out


def test_transactions_and_delays_stored_as_rocketmq_4_9_does(sent):
    serve, lines = sent
    records = _records(serve.store)  # every record passes RocketMQ's checks, CRC included
    by_uniq = defaultdict(list)
    for r in records:
        by_uniq[r.uniq_key].append(r)
    ops = [r for r in records if r.topic == TRANS_OP_TOPIC]
    op_bodies = {int(r.body) for r in ops}
    assert all(r.tags == "d" for r in ops)
    for ls in lines.values():
        for m in _messages(ls):
            rs = by_uniq[m["message_id"]]
            if m["kind"] == "delay":  # parked (again, until less than a level is left)
                parked = [r for r in rs if r.topic == SCHEDULE_TOPIC]
                assert parked and len({r.property_map["TIMER_DELIVER_MS"] for r in parked}) == 1
                for r in parked:
                    props = r.property_map
                    assert props[P.REAL_TOPIC] == m["topic"] and int(props["DELAY"]) >= 1
                    assert int(props["TIMER_DELIVER_MS"]) > r.born_timestamp
                    assert r.queue_id == int(props["DELAY"]) - 1
                delivered = [r for r in rs if r.topic == m["topic"]]
                assert len(delivered) <= 1
                assert all(r.store_timestamp >= int(props["TIMER_DELIVER_MS"])
                           for r in delivered)  # fmt: skip
            if m["kind"] != "tx":
                continue
            [half] = [r for r in rs if r.topic == TRANS_HALF_TOPIC]
            hp = half.property_map
            assert hp[P.REAL_TOPIC] == m["topic"] and hp[P.TRAN_MSG] == "true"
            assert hp[P.PGROUP] == m["topic"] and half.queue_id == 0
            assert commitlog.transaction_type(half.sys_flag) == commitlog.TRANSACTION_NOT_TYPE
            assert half.queue_offset in op_bodies  # resolved: commit, rollback or check
            commits = [r for r in rs if r.topic == m["topic"]]
            if m["outcome"] == "rollback":
                assert commits == []
                continue
            [c] = commits
            assert commitlog.transaction_type(c.sys_flag) == commitlog.TRANSACTION_COMMIT_TYPE
            assert c.prepared_transaction_offset == half.physical_offset
            assert P.TRAN_MSG not in c.property_map and P.REAL_TOPIC not in c.property_map
            assert c.body == half.body and c.tags == half.tags == "t1"


def _cq_files(store):
    layout = StoreLayout.of(store)
    return {f"{t}/{q}/{f.name}": f.read_bytes()
            for t, q, d in layout.queues() for f in sorted(d.iterdir())}  # fmt: skip


def test_consume_queues_are_what_rocketmq_builds_from_the_commitlog(sent):
    serve, _lines = sent
    per_file = 1000 * cq.UNIT_SIZE

    def rebuilt():
        queues: dict[tuple[str, int], bytearray] = defaultdict(bytearray)
        for d in map(from_record, _records(serve.store)):
            if goes_to_consume_queue(d.sys_flag):
                buf = queues[(d.topic, d.queue_id)]
                at = d.queue_offset * cq.UNIT_SIZE
                buf.extend(bytes(max(0, at + cq.UNIT_SIZE - len(buf))))
                buf[at : at + cq.UNIT_SIZE] = cq.encode(
                    cq.CqUnit(d.phy_offset, d.size, d.tags_code)
                )
        return {
            f"{t}/{q}/{0:020d}": bytes(b).ljust(per_file, b"\0") for (t, q), b in queues.items()
        }

    expected = rebuilt()
    assert any(k.startswith(TRANS_HALF_TOPIC) for k in expected)
    assert any(k.startswith(TRANS_OP_TOPIC) for k in expected)
    _wait_for("consume queues caught up", lambda: _cq_files(serve.store) == expected)


def test_metrics_count_sends_by_topic_and_type(sent):
    serve, lines = sent
    url = f"http://127.0.0.1:{serve.base + 14}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for name in lines:
        assert f'rmqstore_proxy_messages_sent_total{{topic="{name}Fifo",type="fifo"}} 8.0' in text
        assert (
            f'rmqstore_proxy_messages_sent_total{{topic="{name}Tx",type="transaction"}} 3.0' in text
        )
    ended = {
        line.split("{", 1)[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rmqstore_proxy_transactions_total{")
    }
    commits = sum(v for k, v in ended.items() if 'outcome="commit"' in k)
    assert commits == 4 and ended.get('outcome="commit",source="check"', 0) >= 1, ended
    assert ended.get('outcome="rollback",source="client"') == 2, ended
    assert 'rmqstore_proxy_transaction_checks_total{result="sent"}' in text
    assert "rmqstore_proxy_clients{" in text
