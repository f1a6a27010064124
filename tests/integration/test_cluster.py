"""A name server and three brokers, each its own ``rmqstore serve`` (own port base and store):
ali-ons, a RocketMQ 4.x client the project did not write, spreads its messages over all
three through the name server; a cluster-wide key query through any broker returns every
match, exactly the global limit when more exist, and pages to the end without repeats; with
one broker killed (every process of it at once, SIGKILL: nothing unregisters, only its
connections close), the same query says partial and names it, and within 30 s of the kill it
is out of the routes and new sends of both clients succeed on the other two; restarted, it
rejoins the routes."""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import channel
from rmqstore.v1 import query_pb2, query_pb2_grpc, topics_pb2, topics_pb2_grpc
from tests import procs
from tests.remoting_wire import Wire, json_request
from tests.services.proxy.conftest import CLIENTS, PYTHON_CLIENT, Serve, client_env
from tests.services.proxy.test_consumers import Run

pytestmark = pytest.mark.integration
CLIENT_DIR = procs.ROOT / "tests" / "clients" / "remoting"
PRODUCER = CLIENT_DIR / "ali_ons_producer.js"
CLUSTER = "TestCluster"
NAMES = ("broker-a", "broker-b", "broker-c")
TOPIC = "ClusterT"
SHARED = "cluster-key"
COUNT = 24
PYTHON_COUNT = 12
DEADLINE_S = 120.0
FAILOVER_S = 30.0  # a killed broker out of the routes, and sends on the others, within this


class Cluster:
    def __init__(self, namesrv: procs.ServiceProcess, brokers: dict[str, Serve]) -> None:
        self.namesrv = namesrv
        self.brokers = brokers

    def query(self, name: str) -> str:
        return self.brokers[name].address(1)

    def remoting(self, name: str) -> str:
        return self.brokers[name].address(7)

    def proxy(self, name: str) -> str:
        return self.brokers[name].address(4)


MD = (("x-mq-client-id", "cluster@1@0@x"), ("x-mq-language", "PYTHON"))


def _route(cluster: Cluster, via: str) -> dict[str, set[str]]:
    """QueryRoute through one broker's proxy: each broker's endpoint -> its queue ids."""
    with grpc.insecure_channel(cluster.proxy(via)) as channel:
        resp = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=MD, timeout=30
        )
    assert resp.status.code == pb.OK, resp.status.message
    out: dict[str, set[str]] = {}
    for q in resp.message_queues:
        a = q.broker.endpoints.addresses[0]
        out.setdefault(q.broker.name, set()).add(f"{a.host}:{a.port}/{q.id}")
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not (CLIENT_DIR / "node_modules" / "ali-ons").exists():
        pytest.fail(f"ali-ons is not installed in {CLIENT_DIR}: run `make test-deps`")
    root: Path = tmp_path_factory.mktemp("cluster")
    namesrv = procs.start("services.namesrv", "--listen", "127.0.0.1:0")
    brokers: dict[str, Serve] = {}
    try:
        for name in NAMES:
            brokers[name] = Serve(root / name, "--namesrv", namesrv.address, "--broker-name",
                                  name, "--cluster-name", CLUSTER, "--no-metrics",
                                  "--cq-entries-per-file", "1000")  # fmt: skip
        yield Cluster(namesrv, brokers)
    finally:
        for serve in brokers.values():
            serve.stop()
        namesrv.stop()


async def _create_topic(cluster: Cluster) -> None:
    """UPDATE_AND_CREATE_TOPIC on every broker (as ``mqadmin updateTopic -c``), then wait for
    a route at the name server with all three."""
    ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "2",
           "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "false"}  # fmt: skip
    for name in NAMES:
        broker = await Wire.open(cluster.remoting(name))
        try:
            created = await broker.call(json_request(R.RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
            assert created.code == 0, created.remark
        finally:
            await broker.close()
    namesrv = await Wire.open(cluster.namesrv.address)
    try:
        route = json_request(R.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        while True:
            answer = await namesrv.call(route)
            if answer.code == 0 and len(R.parse_json_body(answer.body)["brokerDatas"]) == 3:
                return
            await asyncio.sleep(0.1)
    finally:
        await namesrv.close()


def _key_query(address: str, limit: int, cursor: str = "", key: str = SHARED
               ) -> query_pb2.QueryByKeyResponse:  # fmt: skip
    with grpc.insecure_channel(address) as channel:
        return query_pb2_grpc.QueryStub(channel).QueryByKey(query_pb2.QueryByKeyRequest(
            topic=TOPIC, key=key, max_results=limit, cursor=cursor,
            scope=query_pb2.SCOPE_CLUSTER), timeout=30)  # fmt: skip


def _all_pages(address: str, limit: int) -> list[query_pb2.QueryByKeyResponse]:
    pages = [_key_query(address, limit)]
    while pages[-1].truncated:
        assert len(pages) <= COUNT, "the pages do not end"
        pages.append(_key_query(address, limit, pages[-1].cursor))
    return pages


def _statuses(resp) -> dict[str, str]:
    return {b.broker_name: query_pb2.BrokerAnswer.Name(b.answer) for b in resp.brokers}


def _timed_run(cmd: list[str], **kwargs: object) -> list[tuple[float, dict]]:
    """Run a client that prints one JSON line per acknowledged send; each line with the
    monotonic time it was read at."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)  # type: ignore[call-overload]  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    out = [(time.monotonic(), json.loads(line)) for line in proc.stdout if line.startswith("{")]
    err = proc.stderr.read()
    assert proc.wait(180) == 0, f"{out}\n{err}"
    return out


def _ali_ons_timed(cluster: Cluster, home: Path, count: int, key: str
                   ) -> list[tuple[float, dict]]:  # fmt: skip
    """ali-ons sends through the name server; what it saw acknowledged, and when."""
    out = _timed_run(
        ["node", str(PRODUCER), cluster.namesrv.address, TOPIC, str(count), "PG_CLUSTER", key],
        cwd=CLIENT_DIR, env={**os.environ, "HOME": str(home)},  # ali-ons logs under $HOME
    )  # fmt: skip
    assert len(out) == count and {s["status"] for _t, s in out} == {"SEND_OK"}
    return out


def _ali_ons(cluster: Cluster, home: Path, count: int, key: str) -> list[dict]:
    return [s for _t, s in _ali_ons_timed(cluster, home, count, key)]


def _kill_every_process(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and all its descendants at once, as a pod or a machine dies: no
    service gets to unregister; the kernel closes their connections."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            after_name = stat.read_text().rsplit(")", 1)[1]  # state, ppid, ...
        except OSError:
            continue
        children.setdefault(int(after_name.split()[1]), []).append(int(stat.parent.name))
    tree, todo = [], [proc.pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(30)


@pytest.fixture(scope="module")
def sent(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    asyncio.run(asyncio.wait_for(_create_topic(cluster), DEADLINE_S))
    out = _ali_ons(cluster, tmp_path_factory.mktemp("ali-ons-home"), COUNT, SHARED)
    deadline = time.monotonic() + DEADLINE_S  # the index builders catch up
    while len(_key_query(cluster.query(NAMES[0]), 1000).messages) < COUNT:
        assert time.monotonic() < deadline, "not every message was indexed in time"
    return out


def test_messages_land_on_every_broker(cluster: Cluster, sent: list[dict]) -> None:
    ports = {int(cluster.remoting(n).rpartition(":")[2]): n for n in NAMES}
    landed = {ports[decode_offset_msg_id(s["msgId"])[1]] for s in sent}
    assert landed == set(NAMES)


@pytest.mark.parametrize("via", NAMES)
def test_a_cluster_key_query_through_any_broker_pages_every_match_once(
    cluster: Cluster, sent: list[dict], via: str
) -> None:
    limit = 5
    pages = _all_pages(cluster.query(via), limit)
    ids = [m.msg_id for p in pages for m in p.messages]
    assert sorted(ids) == sorted(s["msgId"] for s in sent)  # every match, none twice
    assert all(len(p.messages) == limit for p in pages[:-1])  # the limit, globally
    times = [m.store_timestamp for p in pages for m in p.messages]
    assert times == sorted(times, reverse=True)  # newest first across pages
    for p in pages:
        assert not p.partial
        assert _statuses(p) == dict.fromkeys(NAMES, "ANSWER_OK")
        assert len(p.message_brokers) == len(p.messages)


def test_query_route_through_any_proxy_lists_every_broker_at_its_own_proxy(
    cluster: Cluster, sent: list[dict]
) -> None:
    expected = {n: {f"{cluster.proxy(n)}/{i}" for i in range(2)} for n in NAMES}
    for via in NAMES:
        assert _route(cluster, via) == expected


def test_the_official_python_producer_spreads_over_every_broker(
    cluster: Cluster, sent: list[dict], tmp_path: Path
) -> None:
    count, key = PYTHON_COUNT, "python-key"
    run = subprocess.run(
        [str(PYTHON_CLIENT), str(CLIENTS / "python_cluster_producer.py"),
         cluster.proxy(NAMES[0]), TOPIC, str(count), key],
        capture_output=True, text=True, timeout=180, env=client_env(tmp_path),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    ids = [json.loads(line)["message_id"] for line in run.stdout.splitlines()
           if line.startswith("{")]  # fmt: skip
    assert len(ids) == count
    deadline = time.monotonic() + DEADLINE_S
    while len((found := _key_query(cluster.query(NAMES[1]), 100, key=key)).messages) < count:
        assert time.monotonic() < deadline, "not every message was indexed in time"
    assert sorted(m.unique_key for m in found.messages) == sorted(ids)
    assert set(found.message_brokers) == set(NAMES)


def test_one_consumer_group_receives_every_message_of_every_broker_once(
    cluster: Cluster, sent: list[dict], tmp_path: Path
) -> None:
    """A SimpleConsumer of the official Python client, given one proxy, receives from every
    broker's queues at that broker's own proxy (the route's endpoints) and acks there."""
    bodies = {f"ali-ons message {i}" for i in range(COUNT)} | {
        f"python message {i}" for i in range(PYTHON_COUNT)}  # fmt: skip
    run = subprocess.run(
        [str(PYTHON_CLIENT), str(CLIENTS / "python_consumer.py"), "simple",
         cluster.proxy(NAMES[2]), "GID_CLUSTER", TOPIC, str(len(bodies)),
         "--await", "1"],  # a broker with nothing left holds a receive 1 s, not 5
        capture_output=True, text=True, timeout=300, env=client_env(tmp_path),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    acked = [e for e in events if e["event"] == "acked"]
    assert len({e["id"] for e in acked}) == len(acked) == len(bodies)  # each once
    assert {e["body"] for e in acked} == bodies
    # the group on every broker, through the name server: each broker's queues, no lag left
    out = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "group", "describe", "GID_CLUSTER",
         "--namesrv", cluster.namesrv.address, "--json"], cwd=procs.ROOT, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {b["broker"]: b["answer"] for b in doc["brokers"]} == dict.fromkeys(NAMES, "ok")
    queues = [q for b in doc["brokers"] for q in b["queues"] if q["topic"] == TOPIC]
    assert {b["broker"] for b in doc["brokers"] if any(q["topic"] == TOPIC
                                                        for q in b["queues"])} == set(NAMES)
    assert sum(q["maxOffset"] for q in queues) == len(bodies)
    assert (doc["totalLag"], doc["partial"]) == (0, False), doc


def test_a_push_consumer_gets_one_assignment_per_broker_and_every_message(
    cluster: Cluster, sent: list[dict], tmp_path: Path
) -> None:
    """PushConsumer: QueryAssignment through one proxy answers every broker (each at its own
    proxy), and the consumer receives from all of them."""
    bodies = {f"ali-ons message {i}" for i in range(COUNT)} | {
        f"python message {i}" for i in range(PYTHON_COUNT)}  # fmt: skip
    with grpc.insecure_channel(cluster.proxy(NAMES[0])) as channel:
        resp = service_pb2_grpc.MessagingServiceStub(channel).QueryAssignment(
            spb.QueryAssignmentRequest(topic=pb.Resource(name=TOPIC),
                                       group=pb.Resource(name="GID_PUSH")),
            metadata=MD, timeout=30)  # fmt: skip
    assert resp.status.code == pb.OK, resp.status.message
    got = {
        a.message_queue.broker.name: (
            a.message_queue.id,
            f"{a.message_queue.broker.endpoints.addresses[0].host}:"
            f"{a.message_queue.broker.endpoints.addresses[0].port}",
        )
        for a in resp.assignments
    }
    assert got == {n: (-1, cluster.proxy(n)) for n in NAMES}
    assert len(resp.assignments) == len(NAMES)
    run = Run(client_env(tmp_path), "push", cluster.proxy(NAMES[0]), "GID_PUSH", TOPIC)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while {e["body"] for e in run.of("received")} != bodies:
            assert time.monotonic() < deadline, run.explain()
            time.sleep(0.2)  # polling the consumer's output, not waiting for it
    finally:
        run.close()


def test_an_offset_id_goes_to_its_broker(cluster: Cluster, sent: list[dict]) -> None:
    ports = {int(cluster.remoting(n).rpartition(":")[2]): n for n in NAMES}
    last = sent[-1]
    owner = ports[decode_offset_msg_id(last["msgId"])[1]]
    via = next(n for n in NAMES if n != owner)
    with grpc.insecure_channel(cluster.query(via)) as channel:
        resp = query_pb2_grpc.QueryStub(channel).QueryById(query_pb2.QueryByIdRequest(
            id=last["msgId"], scope=query_pb2.SCOPE_CLUSTER), timeout=30)  # fmt: skip
    assert [m.msg_id for m in resp.messages] == [last["msgId"]]
    assert list(resp.message_brokers) == [owner]
    assert _statuses(resp)[owner] == "ANSWER_OK"
    assert _statuses(resp)[via] == "ANSWER_NOT_ASKED"


def test_the_cli_prints_each_broker(cluster: Cluster, sent: list[dict]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "query-key", "--query",
         cluster.query(NAMES[1]), "--topic", TOPIC, "--key", SHARED, "--max", "3",
         "--cluster", "--json"], cwd=procs.ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["count"] == 3 and doc["truncated"] and doc["partial"] is False
    assert {b["broker"]: b["answer"] for b in doc["brokers"]} == dict.fromkeys(NAMES, "ok")
    assert all(m["broker"] in NAMES for m in doc["messages"])


def _topic_create(cluster: Cluster, *argv: str, name: str = "FanOutT"
                  ) -> subprocess.CompletedProcess:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", "topic", "create", name, "--namesrv",
         cluster.namesrv.address, "--json", *argv], cwd=procs.ROOT, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip


def test_topic_create_with_a_name_server_reaches_every_broker(cluster: Cluster) -> None:
    out = _topic_create(cluster, "--queues", "3")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert {r["brokerName"]: r["result"] for r in rows} == dict.fromkeys(NAMES, "created")
    again = _topic_create(cluster, "--queues", "5")
    assert again.returncode == 0, again.stderr
    rows = [json.loads(line) for line in again.stdout.splitlines()]
    assert {r["brokerName"]: (r["result"], r["readQueueNums"], r["writeQueueNums"])
            for r in rows} == dict.fromkeys(NAMES, ("exists", 3, 3))  # left as they are
    unknown = _topic_create(cluster, "--cluster", "NoSuchCluster")
    assert unknown.returncode == 1 and CLUSTER in unknown.stderr, unknown.stderr
    fifo = _topic_create(cluster, "--type", "fifo", name="FanOutFifoT")  # RocketMQ 5's attributes
    assert fifo.returncode == 0, fifo.stderr
    for name in NAMES:
        with channel(cluster.brokers[name].address(0)) as ch:
            made = topics_pb2_grpc.TopicsStub(ch).GetTopic(
                topics_pb2.GetTopicRequest(name="FanOutFifoT"), timeout=10)
        assert dict(made.attributes) == {"+message.type": "FIFO"}, name


def test_the_console_searches_the_cluster(cluster: Cluster, sent: list[dict]) -> None:
    console = cluster.brokers[NAMES[1]].address(5)
    url = (f"http://{console}/api/v1/messages?topic={TOPIC}&key={SHARED}&max=5"
           "&scope=cluster")  # fmt: skip
    with urllib.request.urlopen(url, timeout=30) as answer:
        doc = json.load(answer)
    assert doc["count"] == 5 and doc["truncated"] and doc["partial"] is False
    assert {b["broker"]: b["answer"] for b in doc["brokers"]} == dict.fromkeys(NAMES, "ok")
    with urllib.request.urlopen(url.replace("&scope=cluster", ""), timeout=30) as answer:
        mine = json.load(answer)  # this broker's own: no brokers, no partial
    assert "brokers" not in mine and mine["count"] <= 5
    page_url = url.replace("/api/v1", "")
    with urllib.request.urlopen(page_url, timeout=30) as answer:
        page = answer.read().decode()
    assert all(f"{n} ok" in page for n in NAMES)  # the page names every broker's part
    msg_id = doc["messages"][0]["msgId"]
    with urllib.request.urlopen(f"http://{console}/api/v1/messages/{msg_id}?scope=cluster",
                                timeout=30) as answer:  # fmt: skip
        one = json.load(answer)
    assert [m["msgId"] for m in one["messages"]] == [msg_id]
    assert one["messages"][0]["broker"] == doc["messages"][0]["broker"]


@pytest.fixture(scope="module")
def killed_at(cluster: Cluster, sent: list[dict]) -> float:
    """The last broker, every process of it killed; when."""
    _kill_every_process(cluster.brokers[NAMES[2]].proc)
    return time.monotonic()


def test_with_a_broker_killed_the_answer_is_partial_and_names_it(
    cluster: Cluster, sent: list[dict], killed_at: float
) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:  # its processes die one after another: a query service whose writer is
        # already gone may still answer "failed" for a moment; then the broker is unreachable
        first = _key_query(cluster.query(NAMES[0]), 5)
        status = _statuses(first)
        if first.partial and status[NAMES[2]] in ("ANSWER_UNREACHABLE", "ANSWER_TIMEOUT"):
            break
        assert time.monotonic() < deadline, f"the killed broker is still answering: {status}"
    assert status[NAMES[0]] == status[NAMES[1]] == "ANSWER_OK"
    pages = _all_pages(cluster.query(NAMES[0]), 5)
    assert all(p.partial for p in pages)
    ids = [m.msg_id for p in pages for m in p.messages]
    ports = {int(cluster.remoting(n).rpartition(":")[2]): n for n in NAMES}
    alive = [s["msgId"] for s in sent if ports[decode_offset_msg_id(s["msgId"])[1]] != NAMES[2]]
    assert sorted(ids) == sorted(alive)


def test_a_killed_broker_leaves_the_routes_within_30_s(
    cluster: Cluster, sent: list[dict], killed_at: float
) -> None:
    """Its remoting broker's connection to the name server closed: the name server drops it,
    and the proxies' routes follow."""
    while set(_route(cluster, NAMES[0])) != set(NAMES[:2]):
        assert time.monotonic() - killed_at < FAILOVER_S, "the killed broker is still routed"
        time.sleep(0.1)
    for via in NAMES[:2]:
        assert set(_route(cluster, via)) == set(NAMES[:2])


def test_with_a_broker_killed_sends_go_on_and_it_rejoins_when_restarted(
    cluster: Cluster, sent: list[dict], killed_at: float, tmp_path: Path
) -> None:
    victim = cluster.brokers[NAMES[2]]
    assert victim.proc.poll() is not None  # killed by the fixture
    after = _ali_ons_timed(cluster, tmp_path / "home", 6, "after-kill")
    ports = {int(cluster.remoting(n).rpartition(":")[2]): n for n in NAMES}
    assert {ports[decode_offset_msg_id(s["msgId"])[1]] for _t, s in after} == set(NAMES[:2])
    python = _timed_run(
        [str(PYTHON_CLIENT), str(CLIENTS / "python_cluster_producer.py"),
         cluster.proxy(NAMES[0]), TOPIC, "6", "python-after-kill"],
        env=client_env(tmp_path / "python-home"),
    )  # fmt: skip
    assert len(python) == 6
    for client, acks in (("ali-ons", after), ("the RocketMQ 5 producer", python)):
        first = acks[0][0] - killed_at
        assert first < FAILOVER_S, f"{client}'s first send succeeded {first:.1f} s after the kill"
    deadline = time.monotonic() + DEADLINE_S
    while len((found := _key_query(cluster.query(NAMES[0]), 100, key="python-after-kill"))
              .messages) < len(python):  # fmt: skip
        assert time.monotonic() < deadline, "not every message was indexed in time"
    assert sorted(m.unique_key for m in found.messages) == sorted(
        s["message_id"] for _t, s in python
    )
    assert set(found.message_brokers) == set(NAMES[:2])
    cluster.brokers[NAMES[2]] = Serve(
        victim.store,
        "--namesrv",
        cluster.namesrv.address,
        "--broker-name",
        NAMES[2],
        "--cluster-name",
        CLUSTER,
        "--no-metrics",
        "--cq-entries-per-file",
        "1000",
    )
    started = time.monotonic()  # it registers at start: routed again within 30 s
    while set(_route(cluster, NAMES[0])) != set(NAMES):
        assert time.monotonic() - started < FAILOVER_S, "the restarted broker is not routed"
        time.sleep(0.1)
    deadline = time.monotonic() + DEADLINE_S
    while (answer := _key_query(cluster.query(NAMES[0]), 1000)).partial:  # its new address
        assert time.monotonic() < deadline, "the restarted broker does not answer lookups"
    assert len(answer.messages) == COUNT  # its messages are found again
