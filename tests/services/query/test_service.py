"""The query service as a process: a COPY of the golden store served by the real writer."""

import json
import subprocess
import sys
import urllib.request
import zlib

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rmqstore.formats import properties as props_fmt
from rmqstore.server import channel
from rmqstore.v1 import query_pb2, query_pb2_grpc
from tests import procs
from tests.services.query.conftest import GOLDEN_INDEX_ENTRIES, GOLDEN_INDEX_SLOTS
from tests.services.query.golden_model import expected_page, matching

pytestmark = [pytest.mark.integration, pytest.mark.golden]


@pytest.fixture(scope="module")
def stub(golden_services) -> query_pb2_grpc.QueryStub:
    _store, _writer, query = golden_services
    return query_pb2_grpc.QueryStub(channel(query.address))


def _code(fn, request) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as e:
        fn(request, timeout=10)
    return e.value.code()


def test_golden_queries_over_grpc(stub, golden_expected):
    for q in golden_expected["queries"]:
        want, truncated = expected_page(golden_expected["messages"], q)
        resp = stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic=q["topic"], key=q["key"], begin_timestamp=q["begin"],
            end_timestamp=q["end"], max_results=q["maxNum"]), timeout=10)
        assert [m.phy_offset for m in resp.messages] == want, q["id"]
        assert resp.truncated == truncated
        assert not resp.budget_exhausted


def test_cursor_and_default_limit_over_grpc(stub, golden_expected):
    want = matching(golden_expected["messages"], "TopicB", "hot", 0, 2**62)
    resp = stub.QueryByKey(query_pb2.QueryByKeyRequest(topic="TopicB", key="hot"), timeout=10)
    assert [m.phy_offset for m in resp.messages] == want[:64]  # default limit 64
    got = [m.phy_offset for m in resp.messages]
    while resp.truncated:
        resp = stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic="TopicB", key="hot", cursor=resp.cursor), timeout=10)
        got.extend(m.phy_offset for m in resp.messages)
    assert got == want


def test_by_id_pull_and_offsets_over_grpc(stub, golden_expected):
    m = golden_expected["messages"][47]["stored"]  # IPv6 store host: a 56-character id
    (got,) = stub.QueryById(query_pb2.QueryByIdRequest(id=m["msgId"]), timeout=10).messages
    assert (got.msg_id, got.phy_offset, got.store_host) == (m["msgId"], m["phyOffset"],
                                                           m["storeHost"])
    assert got.unique_key == m["uniqKey"] and got.keys == m["keys"]
    resp = stub.QueryById(query_pb2.QueryByIdRequest(id=m["uniqKey"]), timeout=10)
    assert [x.phy_offset for x in resp.messages] == [m["phyOffset"]]

    units = golden_expected["consumeQueues"]["TopicB/1"]
    resp = stub.Pull(query_pb2.PullRequest(topic="TopicB", queue_id=1, offset=10,
                                           max_messages=4), timeout=10)
    assert resp.status == query_pb2.FOUND
    assert [x.phy_offset for x in resp.messages] == [u["phyOffset"] for u in units[10:14]]
    assert (resp.next_offset, resp.min_offset, resp.max_offset) == (14, 0, len(units))
    resp = stub.Pull(query_pb2.PullRequest(topic="Nope", queue_id=1), timeout=10)
    assert resp.status == query_pb2.NO_MATCHED_LOGIC_QUEUE

    time_of = {x["stored"]["phyOffset"]: x["stored"]["storeTimestamp"]
               for x in golden_expected["messages"]}
    t = time_of[units[5]["phyOffset"]]
    for boundary, delta, want in ((query_pb2.LOWER, 0, 5), (query_pb2.UPPER, 0, 5),
                                  (query_pb2.LOWER, 1, 6), (query_pb2.UPPER, -1, 4)):
        resp = stub.OffsetByTime(query_pb2.OffsetByTimeRequest(
            topic="TopicB", queue_id=1, timestamp=t + delta, boundary=boundary), timeout=10)
        assert resp.offset == want
    resp = stub.QueueOffsets(query_pb2.QueueOffsetsRequest(topic="TopicB", queue_id=1),
                             timeout=10)
    assert (resp.min_offset, resp.max_offset) == (0, len(units))


def _assert_stored(got, stored: dict) -> None:
    """Every field of a returned StoredMessage, against the golden store's record."""
    props = props_fmt.parse(stored["propertiesString"])
    assert (
        got.msg_id, got.unique_key, got.topic, got.queue_id, got.queue_offset, got.phy_offset,
        got.size, got.store_timestamp, got.born_timestamp, got.born_host, got.store_host,
        got.sys_flag, got.flag, got.reconsume_times, got.body_crc, got.keys, got.tags,
        got.prepared_transaction_offset, len(got.body),
    ) == (
        stored["msgId"], props.get("UNIQ_KEY", ""), stored["topic"], stored["queueId"],
        stored["queueOffset"], stored["phyOffset"], stored["totalSize"],
        stored["storeTimestamp"], stored["bornTimestamp"], stored["bornHost"],
        stored["storeHost"], stored["sysFlag"], stored["flag"], stored["reconsumeTimes"],
        stored["bodyCRC"], props.get("KEYS", ""), props.get("TAGS", ""),
        stored["preparedTransactionOffset"], stored["bodyLength"],
    ), stored["phyOffset"]  # fmt: skip
    assert [(p.name, p.value) for p in got.properties] == list(props.items())
    assert zlib.crc32(got.body) & 0x7FFFFFFF == stored["bodyCRC"]


def test_every_field_of_the_messages_returned(stub, golden_expected):
    by_phy = {m["stored"]["phyOffset"]: m["stored"] for m in golden_expected["messages"]}
    # IPv6 hosts (31 born, 47 store, 59 both), flag and reconsume times (110), a prepared
    # transaction offset (121)
    for i in (31, 47, 59, 110, 121):
        m = golden_expected["messages"][i]["stored"]
        (got,) = stub.QueryById(query_pb2.QueryByIdRequest(id=m["msgId"]), timeout=10).messages
        _assert_stored(got, m)
    m = golden_expected["messages"][47]["stored"]
    resp = stub.Pull(query_pb2.PullRequest(topic="TopicB", queue_id=1, offset=0,
                                           max_messages=16), timeout=10)
    assert len(resp.messages) >= 4  # as many as the pull's byte limits allow
    for got in resp.messages:
        _assert_stored(got, by_phy[got.phy_offset])
    resp = stub.QueryByKey(query_pb2.QueryByKeyRequest(topic="TopicA", key=m["uniqKey"]),
                           timeout=10)
    assert [x.phy_offset for x in resp.messages] == [m["phyOffset"]]
    _assert_stored(resp.messages[0], m)


def test_bad_input_statuses(stub):
    bad = grpc.StatusCode.INVALID_ARGUMENT
    q = query_pb2.QueryByKeyRequest
    assert _code(stub.QueryByKey, q(topic="TopicA", key="k", begin_timestamp=5,
                                    end_timestamp=4)) == bad
    assert _code(stub.QueryByKey, q(topic="TopicA", key="k", begin_timestamp=-1)) == bad
    assert _code(stub.QueryByKey, q(topic="TopicA", key="k", max_results=-1)) == bad
    assert _code(stub.QueryByKey, q(topic="bad topic", key="k")) == bad
    assert _code(stub.QueryByKey, q(topic="TopicA", key="k" * 40000)) == bad
    assert _code(stub.QueryByKey, q(topic="Unknown", key="k")) == grpc.StatusCode.NOT_FOUND
    first = stub.QueryByKey(q(topic="TopicB", key="hot", max_results=1), timeout=10)
    assert _code(stub.QueryByKey, q(topic="TopicA", key="hot", cursor=first.cursor)) == bad
    assert _code(stub.QueryByKey, q(topic="TopicB", key="hot", cursor="garbage!")) == bad
    huge = stub.QueryByKey(q(topic="TopicB", key="hot", max_results=2**31 - 1), timeout=10)
    assert not huge.truncated and len(huge.messages) == 90
    for bad_id in ("", "zz", "0" * 31, "Q" * 56):
        assert _code(stub.QueryById, query_pb2.QueryByIdRequest(id=bad_id)) == bad
    p = query_pb2.PullRequest
    assert _code(stub.Pull, p(topic="TopicA", queue_id=0, offset=-1)) == bad
    assert _code(stub.Pull, p(topic="TopicA", queue_id=-1, offset=0)) == bad
    assert _code(stub.Pull, p(topic="TopicA", queue_id=0, max_messages=-1)) == bad
    assert _code(stub.Pull, p(topic="TopicA", queue_id=0, tag_expression="A||" * 50000)) == bad
    o = query_pb2.OffsetByTimeRequest
    assert _code(stub.OffsetByTime, o(topic="Unknown", queue_id=0)) == grpc.StatusCode.NOT_FOUND
    assert _code(stub.OffsetByTime, o(topic="TopicA", queue_id=99)) == grpc.StatusCode.NOT_FOUND


def test_health_and_reflection(golden_services):
    _store, _writer, query = golden_services
    ch = channel(query.address)
    health = health_pb2_grpc.HealthStub(ch)
    for service in ("", "rmqstore.v1.Query"):
        resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    (resp,) = refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    names = {s.name for s in resp.list_services_response.service}
    assert "rmqstore.v1.Query" in names


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args],
                          cwd=procs.ROOT, capture_output=True, text=True, timeout=60)


def test_cli_json(golden_services, golden_expected):
    _store, _writer, query = golden_services
    want = matching(golden_expected["messages"], "TopicB", "hot", 0, 2**62)
    r = _cli("query-key", "--query", query.address, "--topic", "TopicB", "--key", "hot",
             "--max", "5", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [m["phyOffset"] for m in doc["messages"]] == want[:5]
    assert doc["truncated"] is True and doc["cursor"]
    m0 = doc["messages"][0]
    for field in ("msgId", "uniqKey", "topic", "queueId", "queueOffset", "phyOffset",
                  "storeTimestamp", "keys", "tags", "properties", "body"):
        assert field in m0
    r2 = _cli("query-key", "--query", query.address, "--topic", "TopicB", "--key", "hot",
              "--max", "5", "--cursor", doc["cursor"], "--json")
    assert [m["phyOffset"] for m in json.loads(r2.stdout)["messages"]] == want[5:10]

    binary = golden_expected["messages"][141]["stored"]  # body bytes 0..255
    r = _cli("query-id", "--query", query.address, binary["msgId"], "--json")
    (m,) = json.loads(r.stdout)["messages"]
    assert m["bodyEncoding"] == "base64" and m["phyOffset"] == binary["phyOffset"]

    r = _cli("pull", "--query", query.address, "--topic", "TopicA", "--queue", "0",
             "--offset", "0", "--max", "3", "--tags", "*", "--json")
    doc = json.loads(r.stdout)
    assert doc["status"] == "FOUND" and doc["nextOffset"] == 3 and len(doc["messages"]) == 3

    t = doc["messages"][1]["storeTimestamp"]
    r = _cli("offset-by-time", "--query", query.address, "--topic", "TopicA", "--queue", "0",
             "--time", str(t), "--boundary", "upper", "--json")
    assert json.loads(r.stdout)["offset"] == 1

    r = _cli("query-key", "--query", query.address, "--topic", "bad topic", "--key", "k")
    assert r.returncode == 2 and "INVALID_ARGUMENT" in r.stderr


def test_metrics_sigterm_and_wrong_index_size(golden_services):
    store, writer, _query = golden_services
    port = procs.free_port()
    q = procs.start("services.query", "--store", str(store), "--commitlog", writer.address,
                    "--listen", "127.0.0.1:0", "--index-slots", str(GOLDEN_INDEX_SLOTS),
                    "--index-entries", str(GOLDEN_INDEX_ENTRIES), "--metrics-port", str(port))
    stub = query_pb2_grpc.QueryStub(channel(q.address))
    stub.QueryByKey(query_pb2.QueryByKeyRequest(topic="TopicA", key="Aa"), timeout=10)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'rmqstore_query_requests_total{kind="key",outcome="found"} 1.0' in text
    assert 'rmqstore_query_latency_seconds_count{kind="key"} 1.0' in text
    assert q.stop() == 0
    with pytest.raises(RuntimeError, match="index-slots 5000"):
        procs.start("services.query", "--store", str(store), "--commitlog", writer.address,
                    "--listen", "127.0.0.1:0", "--index-slots", "5000",
                    "--index-entries", str(GOLDEN_INDEX_ENTRIES))
