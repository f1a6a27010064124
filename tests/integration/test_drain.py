"""Draining a broker (``docs/cluster.md``, "Draining a broker"): a name server and two brokers,
each its own ``rmqstore serve``. ``rmqstore admin set-perm --broker broker-b --read-only``
clears the write bit of broker-b's queues in the name server's route; a RocketMQ 4.x send to
it and a consumer's send-back are answered NO_PERMISSION while broker-a takes sends; a pull
from it is still served; both proxies list its queues READ (broker-a's others READ_WRITE)
and its own proxy refuses sends FORBIDDEN. The drain outlives the broker's next
registration and a restart of the broker; ``--read-write`` undoes it."""

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmqstore.formats import remoting as R
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from tests import procs
from tests.remoting_wire import Wire, json_request
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration
C = R.RequestCode
RC = R.ResponseCode
CLUSTER = "DrainCluster"
NAMES = ("broker-a", "broker-b")
TOPIC = "DrainT"
DEADLINE_S = 90.0
MD = (("x-mq-client-id", "drain@1@0@x"), ("x-mq-language", "PYTHON"))


class Cluster:
    def __init__(self, root: Path, namesrv: procs.ServiceProcess) -> None:
        self.root = root
        self.namesrv = namesrv
        self.brokers: dict[str, Serve] = {}

    def start(self, name: str) -> None:
        self.brokers[name] = Serve(self.root / name, "--namesrv", self.namesrv.address,
                                   "--broker-name", name, "--cluster-name", CLUSTER,
                                   "--no-metrics")  # fmt: skip

    def remoting(self, name: str) -> str:
        return self.brokers[name].address(7)

    def proxy(self, name: str) -> str:
        return self.brokers[name].address(4)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    namesrv = procs.start("services.namesrv", "--listen", "127.0.0.1:0")
    out = Cluster(tmp_path_factory.mktemp("drain"), namesrv)
    try:
        for name in NAMES:
            out.start(name)
        yield out
    finally:
        for serve in out.brokers.values():
            serve.stop()
        namesrv.stop()


def _send_ext() -> dict[str, str]:
    return {"a": "PG_DRAIN", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": "1795817537947", "h": "0", "i": "KEYS\x01k", "j": "0", "k": "false",
            "m": "false"}  # fmt: skip


def _send(opaque: int, body: bytes = b"drain") -> bytes:
    return json_request(C.SEND_MESSAGE_V2, _send_ext(), opaque, body)


def _pull(offset: int) -> bytes:
    ext = {"consumerGroup": "CG_DRAIN", "topic": TOPIC, "queueId": "0",
           "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}  # fmt: skip
    return json_request(C.PULL_MESSAGE, ext)


async def _call(address: str, frame: bytes) -> R.Command:
    wire = await Wire.open(address)
    try:
        return await wire.call(frame)
    finally:
        await wire.close()


async def _route_perms(cluster: Cluster) -> dict[str, int]:
    """The name server's route of the topic: broker name -> its queues' perm."""
    answer = await _call(cluster.namesrv.address,
                         json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}))  # fmt: skip
    if answer.code != RC.SUCCESS:
        return {}
    return {q["brokerName"]: q["perm"] for q in R.parse_json_body(answer.body)["queueDatas"]}


async def _until_route(cluster: Cluster, want: dict[str, int]) -> None:
    while await _route_perms(cluster) != want:
        await asyncio.sleep(0.1)


def _run(coro) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(asyncio.wait_for(coro, DEADLINE_S))


def _set_perm(cluster: Cluster, name: str, which: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "admin", "set-perm", "--broker", name,
         which, "--namesrv", cluster.namesrv.address],
        cwd=procs.ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def _query_route(proxy: str) -> dict[str, set[int]]:
    """QueryRoute through a proxy: broker name -> the permissions of its queues."""
    with grpc.insecure_channel(proxy) as channel:
        resp = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=MD, timeout=30
        )
    assert resp.status.code == pb.OK, resp.status.message
    out: dict[str, set[int]] = {}
    for q in resp.message_queues:
        out.setdefault(q.broker.name, set()).add(q.permission)
    return out


def _until_query_route(proxy: str, want: dict[str, set[int]]) -> None:
    deadline = time.monotonic() + DEADLINE_S  # the proxy caches the name server's route 2 s
    while (got := _query_route(proxy)) != want:
        assert time.monotonic() < deadline, got
        time.sleep(0.2)


async def _registered_version(cluster: Cluster, name: str) -> dict:
    """The data version of broker ``name``'s last registration, as the name server holds it
    (QUERY_DATA_VERSION answers it)."""
    ext = {"brokerAddr": cluster.remoting(name), "brokerName": name, "clusterName": CLUSTER,
           "brokerId": "0"}  # fmt: skip
    answer = await _call(cluster.namesrv.address, json_request(C.QUERY_DATA_VERSION, ext))
    assert answer.code == RC.SUCCESS and answer.body, answer.remark
    version = R.parse_json_body(answer.body)
    assert isinstance(version, dict)
    return version


@pytest.fixture(scope="module")
def drained(cluster: Cluster) -> list[str]:
    """The topic on both brokers, one message on broker-b, then broker-b drained."""

    async def prepare() -> None:
        ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "2",
               "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": "0", "order": "false"}  # fmt: skip
        for name in NAMES:
            made = await _call(cluster.remoting(name),
                               json_request(C.UPDATE_AND_CREATE_TOPIC, ext))  # fmt: skip
            assert made.code == RC.SUCCESS, made.remark
        await _until_route(cluster, {"broker-a": 6, "broker-b": 6})
        sent = await _call(cluster.remoting("broker-b"), _send(2, b"before the drain"))
        assert sent.code == RC.SUCCESS, sent.remark

    _run(prepare())
    return _set_perm(cluster, "broker-b", "--read-only")


def test_set_perm_reports_the_broker_and_every_name_server(cluster: Cluster,
                                                           drained: list[str]) -> None:  # fmt: skip
    assert drained == [
        f"broker {cluster.remoting('broker-b')}: broker-b is read-only, registered again with "
        "its name servers",
        f"namesrv {cluster.namesrv.address}: write permission wiped from 2 topics of broker-b",
    ]  # TBW102 and the topic


def test_a_drained_broker_refuses_sends_and_serves_pulls(cluster: Cluster,
                                                         drained: list[str]) -> None:  # fmt: skip
    async def check() -> None:
        assert await _route_perms(cluster) == {"broker-a": 6, "broker-b": 4}
        refused = await _call(cluster.remoting("broker-b"), _send(3))
        assert refused.code == RC.NO_PERMISSION
        assert refused.remark == "the broker[broker-b] sending message is forbidden"
        back = {"offset": "0", "group": "CG_DRAIN", "delayLevel": "0", "originMsgId": "x",
                "originTopic": TOPIC, "unitMode": "false", "maxReconsumeTimes": "16"}  # fmt: skip
        sent_back = await _call(cluster.remoting("broker-b"),
                                json_request(C.CONSUMER_SEND_MSG_BACK, back))  # fmt: skip
        assert sent_back.code == RC.NO_PERMISSION, sent_back.remark
        # a consumer's own copy after its last retry, which a broker diverts to %DLQ%<group>
        last = json_request(C.SEND_MESSAGE_V2, {**_send_ext(), "b": "%RETRY%CG_DRAIN",
                                                "j": "16", "l": "16"})  # fmt: skip
        refused = await _call(cluster.remoting("broker-b"), last)
        assert refused.code == RC.NO_PERMISSION, refused.remark
        config = await _call(cluster.remoting("broker-b"),
                             json_request(C.GET_ALL_TOPIC_CONFIG, None))  # fmt: skip
        made = R.parse_json_body(config.body)["topicConfigTable"]
        assert "%DLQ%CG_DRAIN" not in made  # nothing created for a refused send
        taken = await _call(cluster.remoting("broker-a"), _send(4))
        assert taken.code == RC.SUCCESS, taken.remark
        while (pulled := await _call(cluster.remoting("broker-b"), _pull(0))).code != 0:
            assert pulled.code == RC.PULL_NOT_FOUND, pulled.remark  # consume queue being built
            await asyncio.sleep(0.05)
        assert b"before the drain" in pulled.body

    _run(check())


def test_the_broker_config_commands_as_mqadmin_sends_them(cluster: Cluster,
                                                           drained: list[str]) -> None:  # fmt: skip
    """GET_BROKER_CONFIG 26 (``mqadmin getBrokerConfig``: ``key=value`` lines, spec §3.4) and
    UPDATE_BROKER_CONFIG 25 (``mqadmin updateBrokerConfig -k brokerPermission``: a body of
    properties lines), as frames."""

    async def check() -> None:
        broker = cluster.remoting("broker-b")
        got = await _call(broker, json_request(C.GET_BROKER_CONFIG, None))
        assert got.code == RC.SUCCESS, got.remark
        lines = set(got.body.decode().splitlines())
        assert {"brokerName=broker-b", f"brokerClusterName={CLUSTER}",
                "brokerPermission=4"} <= lines  # fmt: skip
        assert "counter" in json.loads((got.ext or {})["version"])
        same = await _call(broker, json_request(C.UPDATE_BROKER_CONFIG, None, 2,
                                                b"brokerPermission=4\n"))  # fmt: skip
        assert same.code == RC.SUCCESS, same.remark  # drained already: stays so
        for body, why in ((b"brokerPermission=5\n", "is not 6 (read-write) or 4"),
                          (b"flushDiskType=SYNC_FLUSH\n", "only brokerPermission")):
            refused = await _call(broker, json_request(C.UPDATE_BROKER_CONFIG, None, 3, body))
            assert refused.code == RC.SYSTEM_ERROR and why in refused.remark, refused.remark
        again = await _call(broker, json_request(C.GET_BROKER_CONFIG, None, 4))
        assert "brokerPermission=4" in again.body.decode().splitlines()

    _run(check())


def test_both_proxies_route_the_drained_broker_read_only(cluster: Cluster,
                                                         drained: list[str]) -> None:  # fmt: skip
    want = {"broker-a": {pb.READ_WRITE}, "broker-b": {pb.READ}}
    _until_query_route(cluster.proxy("broker-b"), want)  # its own queues: its permission
    _until_query_route(cluster.proxy("broker-a"), want)  # the other's: the name server's route
    with grpc.insecure_channel(cluster.proxy("broker-b")) as channel:
        resp = service_pb2_grpc.MessagingServiceStub(channel).SendMessage(
            spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=TOPIC),
                                                        body=b"x")]),
            metadata=MD, timeout=30,
        )  # fmt: skip
    assert resp.status.code == pb.FORBIDDEN and "read-only" in resp.status.message


def test_the_drain_outlives_a_registration_and_a_restart_and_read_write_undoes_it(
    cluster: Cluster, drained: list[str]
) -> None:
    async def next_registration() -> None:
        first = await _registered_version(cluster, "broker-b")
        while await _registered_version(cluster, "broker-b") == first:  # every 10 s
            await asyncio.sleep(0.2)
        assert await _route_perms(cluster) == {"broker-a": 6, "broker-b": 4}

    _run(next_registration())
    cluster.brokers["broker-b"].stop()
    _run(_until_route(cluster, {"broker-a": 6}))
    cluster.start("broker-b")  # the same store, new ports

    async def after_restart() -> None:
        await _until_route(cluster, {"broker-a": 6, "broker-b": 4})
        refused = await _call(cluster.remoting("broker-b"), _send(5))
        assert refused.code == RC.NO_PERMISSION

    _run(after_restart())
    lines = _set_perm(cluster, "broker-b", "--read-write")
    assert lines[-1].endswith("broker-b is read-write, registered again with its name servers")

    async def undone() -> None:
        assert await _route_perms(cluster) == {"broker-a": 6, "broker-b": 6}
        taken = await _call(cluster.remoting("broker-b"), _send(6))
        assert taken.code == RC.SUCCESS, taken.remark

    _run(undone())
    want = {"broker-a": {pb.READ_WRITE}, "broker-b": {pb.READ_WRITE}}
    _until_query_route(cluster.proxy("broker-a"), want)
    _until_query_route(cluster.proxy("broker-b"), want)
