"""RocketMQ 4.x consumer groups at the remoting broker under ``rmqstore serve``, frames as the
spec shows them (``spec/rocketmq-remoting.md`` §3.3–3.4): membership and its notifications,
orderly consumers' queue locks, messages given back, mqadmin's consumer commands."""

import asyncio
import json
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from rmqstore.v1 import groups_pb2, groups_pb2_grpc
from tests.remoting_wire import Wire, json_request, read_frame
from tests.services.remoting.conftest import Served

pytestmark = pytest.mark.integration
C = R.RequestCode
RC = R.ResponseCode
DEADLINE_S = 60.0
PROXY_SLOT = 4
METRICS_SLOT = 17  # the remoting broker's metrics port under serve
BROKER = "rmqstore"  # serve's --broker-name


def _heartbeat(client_id: str, group: str, topic: str) -> bytes:
    """A 4.9.8 push consumer's heartbeat body (spec §3.3), retry topic subscribed."""
    subs = [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": "*",
             "subVersion": 1795817561483, "tagsSet": [], "topic": t}
            for t in (topic, f"%RETRY%{group}")]  # fmt: skip
    return json.dumps({
        "clientID": client_id,
        "consumerDataSet": [{"consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                             "consumeType": "CONSUME_PASSIVELY", "groupName": group,
                             "messageModel": "CLUSTERING", "subscriptionDataSet": subs,
                             "unitMode": False}],
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
    }).encode()  # fmt: skip


async def _answer(wire: Wire, frame: bytes) -> tuple[R.Command, list[R.Command]]:
    """Send a request; its answer and the broker's own requests that came before it."""
    wire.writer.write(frame)
    before = []
    while True:
        cmd = (await read_frame(wire.reader))[1]
        if cmd.is_response:
            return cmd, before
        before.append(cmd)


async def _request_from_broker(wire: Wire) -> R.Command:
    cmd = (await read_frame(wire.reader))[1]
    assert not cmd.is_response
    return cmd


async def _until(check: Callable[[], Awaitable[Any]]) -> Any:
    while True:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.05)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), DEADLINE_S))


def _send(topic: str, key: str, opaque: int, **more: str) -> bytes:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1795817537947", "h": "0", "i": f"KEYS\x01{key}\x02UNIQ_KEY\x01FD00{key}\x02"
           "WAIT\x01true\x02TAGS\x01TagA", "j": "0", "k": "false", "m": "false",
           **more}  # fmt: skip
    return json_request(C.SEND_MESSAGE_V2, ext, opaque, key.encode())


async def _find(wire: Wire, topic: str, key: str) -> list[commitlog.Record]:
    query = {"topic": topic, "key": key, "maxNum": "64", "beginTimestamp": "0",
             "endTimestamp": "9223372036854775807"}  # fmt: skip
    answer = await wire.call(json_request(C.QUERY_MESSAGE, query, 90))
    records, at = [], 0
    while at < len(answer.body):
        r = commitlog.decode(answer.body, at)
        records.append(r)
        at += r.total_size
    return records


def test_members_are_listed_and_notified_as_they_come_and_go(served: Served) -> None:
    async def test() -> None:
        a, b, ns = (await Wire.open(served.broker), await Wire.open(served.broker),
                    await Wire.open(served.namesrv))  # fmt: skip
        listing = json_request(C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG_M"}, 5)
        answer = await a.call(listing)
        assert (answer.code, answer.remark) == (RC.SYSTEM_ERROR, "no consumer for this group, CG_M")
        # the newcomer is notified too, before the heartbeat's answer (as 4.9.8)
        answer, before = await _answer(a, json_request(C.HEART_BEAT, None, 1,
                                                       _heartbeat("10.0.0.1@a", "CG_M", "MT")))
        assert answer.code == 0 and answer.version == 409
        assert [(c.code, c.flag, c.ext) for c in before] == \
            [(C.NOTIFY_CONSUMER_IDS_CHANGED, R.FLAG_ONEWAY, {"consumerGroup": "CG_M"})]
        # the same heartbeat again changes nothing: no notification
        answer, before = await _answer(a, json_request(C.HEART_BEAT, None, 2,
                                                       _heartbeat("10.0.0.1@a", "CG_M", "MT")))
        assert answer.code == 0 and before == []
        answer, before = await _answer(b, json_request(C.HEART_BEAT, None, 3,
                                                       _heartbeat("10.0.0.2@b", "CG_M", "MT")))
        assert [c.code for c in before] == [C.NOTIFY_CONSUMER_IDS_CHANGED]
        assert (await _request_from_broker(a)).ext == {"consumerGroup": "CG_M"}
        listed = R.parse_json_body((await a.call(listing)).body)
        assert sorted(listed["consumerIdList"]) == ["10.0.0.1@a", "10.0.0.2@b"]
        # the retry topic exists and reaches the name server
        route = json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%CG_M"}, 6)

        async def routed() -> Any:
            got = await ns.call(route)
            return got if got.code == 0 else None

        queue = R.parse_json_body((await _until(routed)).body)["queueDatas"][0]
        assert (queue["perm"], queue["readQueueNums"], queue["writeQueueNums"]) == (6, 1, 1)
        # the subscription group is created with the proxy, owner of subscriptionGroup.json
        # (in the background: the heartbeat's answer does not wait for it)
        async with grpc.aio.insecure_channel(served.serve.address(PROXY_SLOT)) as channel:
            stub = groups_pb2_grpc.ConsumerGroupsStub(channel)

            async def created() -> list[int]:
                listed = await stub.ListGroups(groups_pb2.ListGroupsRequest())
                return [g.retry_max_times for g in listed.groups if g.name == "CG_M"]

            assert await _until(created) == [16]
        # the member list and subscriptions, as mqadmin consumerConnection reads them
        conns = await a.call(json_request(C.GET_CONSUMER_CONNECTION_LIST,
                                          {"consumerGroup": "CG_M"}, 7))  # fmt: skip
        body = R.parse_json_body(conns.body)
        assert sorted(c["clientId"] for c in body["connectionSet"]) == ["10.0.0.1@a", "10.0.0.2@b"]
        assert sorted(body["subscriptionTable"]) == ["%RETRY%CG_M", "MT"]
        assert body["messageModel"] == "CLUSTERING"
        # b leaves by UNREGISTER_CLIENT: a is told
        unregister = json_request(C.UNREGISTER_CLIENT,
                                  {"clientID": "10.0.0.2@b", "consumerGroup": "CG_M"}, 8)
        assert (await b.call(unregister)).ext == {}
        assert (await _request_from_broker(a)).code == C.NOTIFY_CONSUMER_IDS_CHANGED
        assert R.parse_json_body((await a.call(listing)).body)["consumerIdList"] == ["10.0.0.1@a"]
        # b comes back, then its connection closes: a is told again
        await _answer(b, json_request(C.HEART_BEAT, None, 9,
                                      _heartbeat("10.0.0.2@b", "CG_M", "MT")))
        assert (await _request_from_broker(a)).code == C.NOTIFY_CONSUMER_IDS_CHANGED
        await b.close()
        assert (await _request_from_broker(a)).code == C.NOTIFY_CONSUMER_IDS_CHANGED
        assert R.parse_json_body((await a.call(listing)).body)["consumerIdList"] == ["10.0.0.1@a"]
        await a.close()
        await ns.close()

    _run(test)


def _lock(code: int, client_id: str, queues: list[int], opaque: int) -> bytes:
    body = {"clientId": client_id, "consumerGroup": "CG_ORD",
            "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": "OT"} for q in queues]}
    return json_request(code, None, opaque, json.dumps(body).encode())


def test_orderly_consumers_lock_and_unlock_queues(served: Served) -> None:
    async def test() -> None:
        wire = await Wire.open(served.broker)

        async def locked(client_id: str, queues: list[int]) -> list[int]:
            answer = await wire.call(_lock(C.LOCK_BATCH_MQ, client_id, queues, 1))
            assert answer.code == 0
            return sorted(mq["queueId"] for mq in R.parse_json_body(answer.body)["lockOKMQSet"])

        assert await locked("c1", [0, 1]) == [0, 1]
        assert await locked("c1", [0, 1]) == [0, 1]  # renewal
        assert await locked("c2", [1, 2]) == [2]
        unlock = await wire.call(_lock(C.UNLOCK_BATCH_MQ, "c1", [1], 2))
        assert (unlock.code, unlock.body) == (0, b"")
        assert await locked("c2", [1]) == [1]
        await wire.call(_lock(C.UNLOCK_BATCH_MQ, "c1", [2], 3))  # not c1's: stays c2's
        assert await locked("c1", [2]) == []
        await wire.close()

    _run(test)


def test_send_back_goes_to_the_retry_topic_then_to_dead_letters(served: Served) -> None:
    async def test() -> None:
        wire = await Wire.open(served.broker)
        sent = await wire.call(_send("SBT", "sb-1", 1))
        assert sent.code == 0, sent.remark
        _ip, _port, phy = decode_offset_msg_id(sent.ext["msgId"])
        back = {"offset": str(phy), "group": "CG_SB", "delayLevel": "0",
                "originTopic": "SBT", "originMsgId": "FD00sb-1", "maxReconsumeTimes": "16",
                "unitMode": "false", "bname": "broker-a"}  # fmt: skip
        answer = await wire.call(json_request(C.CONSUMER_SEND_MSG_BACK, back, 2))
        assert (answer.code, answer.ext) == (0, None), answer.remark
        # delayLevel 0 on a first failure: level 3, so in the schedule topic's queue 2
        copy = (await _until(lambda: _find(wire, "SCHEDULE_TOPIC_XXXX", "sb-1")))[0]
        props = copy.property_map
        assert (copy.queue_id, copy.reconsume_times, copy.body) == (2, 1, b"sb-1")
        assert props["REAL_TOPIC"] == "%RETRY%CG_SB" and props["DELAY"] == "3"
        assert props["RETRY_TOPIC"] == "SBT"
        assert props["ORIGIN_MESSAGE_ID"] == sent.ext["msgId"]
        assert props["UNIQ_KEY"] == "FD00sb-1" and props["WAIT"] == "false"
        original = (await _until(lambda: _find(wire, "SBT", "sb-1")))[0]
        assert (copy.born_host, copy.born_timestamp, copy.tags) == \
            (original.born_host, original.born_timestamp, "TagA")
        # given back with nothing left of maxReconsumeTimes: a dead letter, no delay
        back |= {"offset": str(copy.physical_offset), "maxReconsumeTimes": "1"}
        answer = await wire.call(json_request(C.CONSUMER_SEND_MSG_BACK, back, 3))
        assert answer.code == 0, answer.remark
        dead = (await _until(lambda: _find(wire, "%DLQ%CG_SB", "sb-1")))[0]
        assert (dead.topic, dead.queue_id, dead.reconsume_times) == ("%DLQ%CG_SB", 0, 2)
        assert dead.property_map["RETRY_TOPIC"] == "SBT"
        assert dead.property_map["ORIGIN_MESSAGE_ID"] == sent.ext["msgId"]
        assert "DELAY" not in dead.property_map
        config = await wire.call(json_request(C.GET_ALL_TOPIC_CONFIG, None, 4))
        table = R.parse_json_body(config.body)["topicConfigTable"]
        assert (table["%DLQ%CG_SB"]["perm"], table["%DLQ%CG_SB"]["readQueueNums"]) == (6, 1)
        missing = await wire.call(json_request(C.CONSUMER_SEND_MSG_BACK,
                                               back | {"offset": str(1 << 40)}, 5))
        assert (missing.code, missing.remark) == \
            (RC.SYSTEM_ERROR, f"look message by offset failed, {1 << 40}")
        # an orderly consumer's own copy after its last local retry: diverted to %DLQ%
        for key, times in (("sb-keep", "0"), ("sb-dead", "1")):
            stored = await wire.call(_send("%RETRY%CG_SB", key, 6, j=times, l="1"))
            assert stored.code == 0, stored.remark
        assert await _until(lambda: _find(wire, "%RETRY%CG_SB", "sb-keep"))
        assert await _until(lambda: _find(wire, "%DLQ%CG_SB", "sb-dead"))
        assert await _find(wire, "%RETRY%CG_SB", "sb-dead") == []
        await wire.close()

    _run(test)
    url = f"http://127.0.0.1:{served.serve.base + METRICS_SLOT}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        text = r.read().decode()
    assert 'rmqstore_remoting_send_backs_total{group="CG_SB"} 3.0' in text
    assert 'rmqstore_remoting_dead_letters_total{group="CG_SB"} 2.0' in text


def test_consume_stats_reset_by_time_and_running_info(served: Served) -> None:
    async def test() -> None:
        admin, member = await Wire.open(served.broker), await Wire.open(served.broker)
        for i in range(3):
            assert (await admin.call(_send("AT", f"at-{i}", 10 + i))).code == 0
        # the group's committed offsets are the proxy's: put them at 2 there, once the queue
        # is built (a reset is clamped to the queue's end)
        deadline = asyncio.get_running_loop().time() + 30
        ask = json_request(C.GET_MAX_OFFSET, {"topic": "AT", "queueId": "0"}, 9)
        while (await admin.call(ask)).ext.get("offset") != "3":
            assert asyncio.get_running_loop().time() < deadline, "queue AT/0 not built"
            await asyncio.sleep(0.05)
        async with grpc.aio.insecure_channel(served.serve.address(PROXY_SLOT)) as channel:
            stub = groups_pb2_grpc.ConsumerGroupsStub(channel)
            await stub.ResetGroup(groups_pb2.ResetGroupRequest(group="CG_A", topic="AT", offset=2))
        stats = await admin.call(json_request(C.GET_CONSUME_STATS, {"consumerGroup": "CG_A"}, 1))
        assert stats.code == 0, stats.remark
        table = R.parse_json_body(stats.body)["offsetTable"]
        q0 = table[R.message_queue_key(BROKER, 0, "AT")]
        assert (q0["brokerOffset"], q0["consumerOffset"]) == (3, 2) and q0["lastTimestamp"] > 0
        by_who = await admin.call(json_request(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "AT"}, 2))
        assert "CG_A" in R.parse_json_body(by_who.body)["groupList"]
        await _answer(member, json_request(C.HEART_BEAT, None, 3,
                                           _heartbeat("10.0.0.3@m", "CG_A", "AT")))
        # unforced (mqadmin -f false), as 4.9.8: the members move back, the broker commits nothing
        unforced = {"topic": "AT", "group": "CG_A", "timestamp": "0", "isForce": "false"}
        answer = await admin.call(json_request(C.INVOKE_BROKER_TO_RESET_OFFSET, unforced, 40))
        assert answer.code == 0, answer.remark
        q0_key = R.message_queue_key(BROKER, 0, "AT")
        assert R.parse_json_body(answer.body)["offsetTable"][q0_key] == 0
        assert (await _request_from_broker(member)).code == C.RESET_CONSUMER_CLIENT_OFFSET
        stats = await admin.call(json_request(C.GET_CONSUME_STATS, {"consumerGroup": "CG_A"}, 41))
        assert R.parse_json_body(stats.body)["offsetTable"][q0_key]["consumerOffset"] == 2
        reset = {"topic": "AT", "group": "CG_A", "timestamp": "0", "isForce": "true"}
        answer = await admin.call(json_request(C.INVOKE_BROKER_TO_RESET_OFFSET, reset, 4))
        assert answer.code == 0, answer.remark
        offsets = R.parse_json_body(answer.body)["offsetTable"]
        assert offsets[R.message_queue_key(BROKER, 0, "AT")] == 0
        told = await _request_from_broker(member)
        assert (told.code, told.flag) == (C.RESET_CONSUMER_CLIENT_OFFSET, R.FLAG_ONEWAY)
        assert told.ext == {"topic": "AT", "group": "CG_A", "timestamp": "0", "isForce": "false"}
        assert R.parse_json_body(told.body) == {"offsetTable": offsets}
        unknown = await admin.call(json_request(C.INVOKE_BROKER_TO_RESET_OFFSET,
                                                reset | {"group": "CG_NONE"}, 5))
        assert (unknown.code, unknown.remark) == \
            (RC.SYSTEM_ERROR, "THe consumer group <CG_NONE> not exist")
        # consumerStatus: the broker asks the client and returns its answer unchanged
        ask = {"consumerGroup": "CG_A", "clientId": "10.0.0.3@m", "jstackEnable": "false"}
        asked = asyncio.ensure_future(
            admin.call(json_request(C.GET_CONSUMER_RUNNING_INFO, ask, 6)))
        forwarded = await _request_from_broker(member)
        assert (forwarded.code, forwarded.ext) == (C.GET_CONSUMER_RUNNING_INFO, ask)
        info = b'{"properties":{"consumeType":"CONSUME_PASSIVELY"}}'
        reply = R.response_to(forwarded, body=info)
        member.writer.write(R.encode(reply))
        got = await asked
        assert (got.code, got.opaque, got.body) == (0, 6, info)
        gone = await admin.call(json_request(C.GET_CONSUMER_RUNNING_INFO,
                                             ask | {"clientId": "nobody"}, 7))
        assert gone.remark == "The Consumer <CG_A> <nobody> not online"
        await admin.close()
        await member.close()

    _run(test)
