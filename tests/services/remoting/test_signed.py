"""Under ``rmqstore serve --access-key``: the remoting broker takes only requests signed with
the access key (RocketMQ's ACL signature; ali-ons, a client the project did not write, signs
them), and the proxy only signed ``ConsumerGroups`` calls, the broker's own included (a 4.x
heartbeat creates the subscription group there; consume stats read its offsets). With
``--acl-file`` besides, a RocketMQ ``plain_acl.yml``: its accounts sign too, each within its
permissions (the access key is an admin)."""

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmqstore import access_keys
from rmqstore.formats import remoting as R
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, groups_pb2, groups_pb2_grpc
from tests import procs
from tests.remoting_wire import Wire, json_request, read_frame, signed
from tests.services.proxy.conftest import Serve
from tests.services.remoting.conftest import ALI_ONS_DIR, BROKER_SLOT, NAMESRV_SLOT

pytestmark = pytest.mark.integration
C = R.RequestCode
PROXY_SLOT = 4
SECRET = "rgroups-secret"
ACL_FILE = """
accounts:
  - accessKey: ordersOnly
    secretKey: orders-secret
    defaultTopicPerm: DENY
    topicPerms: [AclOrders=PUB]
"""


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    root: Path = tmp_path_factory.mktemp("signed")
    secret = root / "secret"
    secret.write_text(SECRET + "\n")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    serve = Serve(root / "store", "--access-key", "AK", "--secret-key-file", str(secret),
                  "--broker-name", "signed-broker", "--acl-file", str(acl_file))
    try:
        yield serve
    finally:
        serve.stop()


def _signed(code: int, ext: dict[str, str], opaque: int = 1, body: bytes = b"") -> bytes:
    return json_request(code, signed(ext, "AK", SECRET, body), opaque, body)


def test_the_broker_signs_its_calls_to_the_proxy(serve: Serve) -> None:
    async def test() -> None:
        wire = await Wire.open(serve.address(BROKER_SLOT))
        body = json.dumps({"clientID": "10.0.0.9@s", "consumerDataSet": [
            {"groupName": "CG_SIGNED", "consumeType": "CONSUME_PASSIVELY",
             "messageModel": "CLUSTERING", "subscriptionDataSet": [{"topic": "ST"}]}]})
        wire.writer.write(_signed(C.HEART_BEAT, {}, 1, body.encode()))
        while not (await read_frame(wire.reader))[1].is_response:
            pass  # the group's NOTIFY_CONSUMER_IDS_CHANGED
        async with grpc.aio.insecure_channel(serve.address(PROXY_SLOT)) as channel:
            stub = groups_pb2_grpc.ConsumerGroupsStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as unsigned:
                await stub.ListGroups(groups_pb2.ListGroupsRequest())
            assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
            while True:  # created in the background
                listed = await stub.ListGroups(groups_pb2.ListGroupsRequest(),
                                               metadata=access_keys.metadata("AK", SECRET))
                if "CG_SIGNED" in [g.name for g in listed.groups]:
                    break
                await asyncio.sleep(0.05)
        stats = await wire.call(_signed(C.GET_CONSUME_STATS, {"consumerGroup": "CG_SIGNED"}, 2))
        assert stats.code == 0, stats.remark
        await wire.close()

    asyncio.run(asyncio.wait_for(test(), 60))


TOPIC_EXT = {"defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
             "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}


def test_the_broker_takes_only_requests_signed_with_the_access_key(serve: Serve) -> None:
    """Unsigned, an unknown key, a wrong secret: SYSTEM_ERROR saying why, and the topic is not
    made; signed: made."""

    async def test() -> None:
        wire = await Wire.open(serve.address(BROKER_SLOT))
        create = {**TOPIC_EXT, "topic": "AclRefused"}
        for opaque, (ext, why) in enumerate((
            (create, "carries no AccessKey"),
            (signed(create, "OTHER", SECRET), "access key OTHER is not known"),
            (signed(create, "AK", "not-the-secret"), "does not match the secret key"),
        ), start=1):  # fmt: skip
            refused = await wire.call(json_request(C.UPDATE_AND_CREATE_TOPIC, ext, opaque))
            assert refused.code == R.ResponseCode.SYSTEM_ERROR and refused.opaque == opaque
            assert refused.remark.startswith("ACL: ") and why in refused.remark, refused.remark
        made = await wire.call(_signed(C.UPDATE_AND_CREATE_TOPIC, {**create, "topic": "AclMade"}))
        assert made.code == 0, made.remark
        topics = await wire.call(_signed(C.GET_ALL_TOPIC_CONFIG, {}))
        assert topics.code == 0, topics.remark
        table = json.loads(topics.body)["topicConfigTable"]
        assert "AclMade" in table and "AclRefused" not in table
        await wire.close()

    asyncio.run(asyncio.wait_for(test(), 60))
    counted = _refused(serve)
    for reason in ("no_access_key", "unknown_access_key", "bad_signature"):
        assert counted[f'rmqstore_remoting_acl_refused_total{{reason="{reason}"}}'] >= 1


def _refused(serve: Serve) -> dict[str, float]:
    """The broker's refusal counters, by reason."""
    url = f"http://127.0.0.1:{serve.base + 17}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        lines = r.read().decode().splitlines()
    return {line.split()[0]: float(line.split()[1])
            for line in lines if line.startswith("rmqstore_remoting_acl_refused_total")}


def _keys_env(tmp_path: Path, secret: str, key: str = "AK") -> dict[str, str]:
    """ali-ons' credentials (our scripts read them there); it writes its logs under $HOME."""
    return {**os.environ, "HOME": str(tmp_path), "ALI_ONS_ACCESS_KEY": key,
            "ALI_ONS_SECRET_KEY": secret}  # fmt: skip


def _ali_ons(serve: Serve, tmp_path: Path, secret: str, key: str = "AK",
             topic: str = "AclMade") -> subprocess.CompletedProcess:  # fmt: skip
    return subprocess.run(["node", str(ALI_ONS_DIR / "ali_ons_producer.js"),
                           serve.address(NAMESRV_SLOT), topic, "3"],
                          cwd=ALI_ONS_DIR, capture_output=True, text=True, timeout=120,
                          env=_keys_env(tmp_path, secret, key))  # fmt: skip


def test_ali_ons_sends_and_consumes_signed_with_the_access_key_not_with_another_secret(
    serve: Serve, ali_ons: None, tmp_path: Path
) -> None:
    """Its push consumer too: heartbeats, pulls with long polling and offset commits, signed."""
    asyncio.run(asyncio.wait_for(_route(serve, "AclMade"), 60))
    run = _ali_ons(serve, tmp_path, SECRET)
    assert run.returncode == 0, run.stdout + run.stderr
    sent = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [s["status"] for s in sent] == ["SEND_OK"] * 3
    consumer = procs.JsonLines(
        ["node", str(ALI_ONS_DIR / "ali_ons_consumer.js"), serve.address(NAMESRV_SLOT), "AclMade",
         "CG_ACL"], _keys_env(tmp_path, SECRET), ALI_ONS_DIR)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(consumer.of("received")) < 3:
            assert consumer.proc.poll() is None and time.monotonic() < deadline, consumer.explain()
            time.sleep(0.2)  # polling the consumer's output
    finally:
        consumer.proc.kill()
        consumer.proc.wait(10)
    got = sorted(e["msgId"] for e in consumer.of("received"))
    assert got == sorted(s["msgId"] for s in sent)
    stored = _commitlog_end(serve)
    wrong = _ali_ons(serve, tmp_path, "not-the-secret")  # retried, as on any SYSTEM_ERROR
    assert wrong.returncode != 0 and "still failed" in wrong.stderr, wrong.stderr
    assert _commitlog_end(serve) == stored  # nothing of it was stored


def test_an_acl_file_account_sends_only_where_its_permissions_let_it(
    serve: Serve, ali_ons: None, tmp_path: Path
) -> None:
    """ali-ons with the file's ``ordersOnly`` account: its sends to AclOrders (PUB) are stored;
    to AclMade (the default, DENY) refused with nothing stored; its admin command too."""
    for topic in ("AclOrders", "AclMade"):
        asyncio.run(asyncio.wait_for(_route(serve, topic), 60))
    run = _ali_ons(serve, tmp_path, "orders-secret", "ordersOnly", "AclOrders")
    assert run.returncode == 0, run.stdout + run.stderr
    sent = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [s["status"] for s in sent] == ["SEND_OK"] * 3
    stored = _commitlog_end(serve)
    denied = _ali_ons(serve, tmp_path, "orders-secret", "ordersOnly", "AclMade")
    assert denied.returncode != 0 and "still failed" in denied.stderr, denied.stderr
    assert _commitlog_end(serve) == stored
    assert _refused(serve)['rmqstore_remoting_acl_refused_total{reason="no_permission"}'] >= 1

    async def create() -> R.Command:
        wire = await Wire.open(serve.address(BROKER_SLOT))
        ext = signed({**TOPIC_EXT, "topic": "AclNotMade"}, "ordersOnly", "orders-secret")
        try:
            return await wire.call(json_request(C.UPDATE_AND_CREATE_TOPIC, ext))
        finally:
            await wire.close()

    refused = asyncio.run(asyncio.wait_for(create(), 60))
    assert refused.code == R.ResponseCode.SYSTEM_ERROR and "needs an admin account" in (
        refused.remark or ""), refused.remark  # fmt: skip


def _commitlog_end(serve: Serve) -> int:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(serve.address(0)))
    return stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=30).max_offset


async def _route(serve: Serve, topic: str) -> None:
    """The topic, made by a signed request, routed at the name server (ali-ons sends only to
    routed topics)."""
    wire, namesrv = await Wire.open(serve.address(BROKER_SLOT)), await Wire.open(
        serve.address(NAMESRV_SLOT))
    made = await wire.call(_signed(C.UPDATE_AND_CREATE_TOPIC, {**TOPIC_EXT, "topic": topic}))
    assert made.code == 0, made.remark
    while (await namesrv.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))).code:
        await asyncio.sleep(0.05)
    await wire.close()
    await namesrv.close()


def _rmqstore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args],
                          cwd=procs.ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


def test_rmqstore_commands_sign_their_broker_requests_with_the_access_key(serve: Serve) -> None:
    """``topic create --namesrv`` and ``admin set-perm`` talk to the brokers: with the key
    (flags, or the environment) they are taken; without it refused, saying so."""
    namesrv = serve.address(NAMESRV_SLOT)
    keys = {"RMQSTORE_ACCESS_KEY": "AK", "RMQSTORE_SECRET_KEY": SECRET}
    unsigned = _rmqstore("topic", "create", "AclCli", "--namesrv", namesrv)
    assert unsigned.returncode != 0 and "ACL: the request carries no AccessKey" in unsigned.stdout
    made = _rmqstore("topic", "create", "AclCli", "--namesrv", namesrv, env=keys)
    assert made.returncode == 0 and "created: AclCli on signed-broker" in made.stdout, made.stderr
    drain = ["admin", "set-perm", "--broker", "signed-broker", "--namesrv", namesrv]
    refused = _rmqstore(*drain, "--read-only")
    assert refused.returncode != 0 and "ACL:" in refused.stdout + refused.stderr
    for which in ("--read-only", "--read-write"):
        told = _rmqstore(*drain, which, "--access-key", "AK", env={"RMQSTORE_SECRET_KEY": SECRET})
        assert told.returncode == 0, told.stdout + told.stderr
