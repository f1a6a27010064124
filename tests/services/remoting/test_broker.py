"""The remoting broker under ``rmqstore serve``, request by request, frames as the spec shows
them (``spec/rocketmq-remoting.md`` §3.2–3.4)."""

import asyncio
import json
import struct
import subprocess
import sys
import urllib.request
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import decode_offset_msg_id
from services.remoting.send import V2_NAMES
from tests import procs
from tests.remoting_wire import Wire, json_request, read_frame
from tests.services.remoting.conftest import Served

pytestmark = pytest.mark.integration
C = R.RequestCode
RC = R.ResponseCode
DEADLINE_S = 60.0


def _props(keys: str, uniq: str, tags: str = "TagA") -> str:
    return f"KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02TAGS\x01{tags}"


def _v2(topic: str, queue_id: int = 0, props: str = "", sys_flag: int = 0) -> dict[str, str]:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
            "f": str(sys_flag), "g": "1795817537947", "h": "0", "i": props, "j": "0",
            "k": "false", "m": "false", "n": "rmqstore"}  # fmt: skip


def run(served: Served, test: Callable[[Wire, Wire], Awaitable[None]]) -> None:
    async def main() -> None:
        broker, namesrv = await Wire.open(served.broker), await Wire.open(served.namesrv)
        try:
            await asyncio.wait_for(test(broker, namesrv), DEADLINE_S)
        finally:
            await broker.close()
            await namesrv.close()

    asyncio.run(main())


async def _until(check: Callable[[], Awaitable[Any]]) -> Any:
    """Poll ``check`` until it returns something true (bounded by the test's deadline)."""
    while True:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.05)


async def _route(namesrv: Wire, topic: str) -> R.Command:
    return await namesrv.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))


def test_broker_registers_with_the_name_server(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        async def registered() -> R.Command | None:
            answer = await _route(namesrv, "TBW102")
            return answer if answer.code == 0 else None

        route = json.loads((await _until(registered)).body)
        assert route["brokerDatas"] == [
            {
                "brokerAddrs": {"0": served.broker},
                "brokerName": "rmqstore",
                "cluster": "DefaultCluster",
            }
        ]
        assert route["queueDatas"][0]["perm"] == 7
        info = json.loads((await namesrv.call(json_request(C.GET_BROKER_CLUSTER_INFO))).body)
        assert info["clusterAddrTable"] == {"DefaultCluster": ["rmqstore"]}

    run(served, test)


def test_send_v2_auto_creates_the_topic_and_answers_as_captured(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        uniq = "FD000000000000000000000000000000A1"
        frame = json_request(C.SEND_MESSAGE_V2, _v2("AutoT", 2, _props("k-auto", uniq)), 11,
                             b"hello")  # fmt: skip
        answer = await broker.call(frame)
        assert (answer.code, answer.opaque, answer.flag) == (0, 11, 1), answer.remark
        assert answer.ext is not None
        assert set(answer.ext) == {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
        assert (answer.ext["queueId"], answer.ext["queueOffset"]) == ("2", "0")
        ip, port, offset = decode_offset_msg_id(answer.ext["msgId"])
        assert (ip, port) == (bytes([127, 0, 0, 1]), int(served.broker.rpartition(":")[2]))

        # the name server learns of the new topic (oneway registration) with 4 queues
        async def routed() -> R.Command | None:
            route = await _route(namesrv, "AutoT")
            return route if route.code == 0 else None

        route = json.loads((await _until(routed)).body)
        assert route["queueDatas"][0]["writeQueueNums"] == 4
        # the stored record: born host = the client's socket, properties as 4.9.8 stores them
        view = await broker.call(json_request(C.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        assert view.code == 0
        record = commitlog.decode(view.body)
        assert record.body == b"hello" and record.topic == "AutoT" and record.queue_id == 2
        assert record.properties == (
            f"KEYS\x01k-auto\x02UNIQ_KEY\x01{uniq}\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA"
        )
        assert str(record.store_host) == served.broker

    run(served, test)


def test_send_v1_and_binary_header_and_batch(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        v1 = {V2_NAMES[k]: v for k, v in _v2("MixT", 1, _props("k-v1", "FD01")).items()}
        answer = await broker.call(json_request(C.SEND_MESSAGE, v1, 1, b"v1"))
        assert answer.code == 0 and answer.ext and answer.ext["queueOffset"] == "0"
        binary = R.Command(code=C.SEND_MESSAGE_V2, opaque=2, serialize_type=R.ROCKETMQ,
                           ext=_v2("MixT", 1, _props("k-bin", "FD02")), body=b"bin")  # fmt: skip
        answer = await broker.call(R.encode(binary))
        assert answer.serialize_type == R.ROCKETMQ and answer.code == 0
        assert answer.ext and answer.ext["queueOffset"] == "1"

        def inner(body: bytes, props: str) -> bytes:
            p = props.encode()
            head = struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body))
            return head + body + struct.pack(">h", len(p)) + p

        batch = inner(b"b1", _props("k-b1", "FD03")) + inner(b"b2", _props("k-b2", "FD04"))
        ext = {**_v2("MixT", 1, "WAIT\x01true"), "m": "true"}
        answer = await broker.call(json_request(C.SEND_BATCH_MESSAGE, ext, 3, batch))
        assert answer.code == 0, answer.remark
        assert answer.ext and answer.ext["queueOffset"] == "2"
        assert len(answer.ext["msgId"].split(",")) == 2

        async def all_four() -> R.Command | None:  # once the consume queue has them
            top = await broker.call(json_request(C.GET_MAX_OFFSET, {"topic": "MixT", "queueId": 1}))
            return top if top.ext == {"offset": "4"} else None

        await _until(all_four)
        low = await broker.call(json_request(C.GET_MIN_OFFSET, {"topic": "MixT", "queueId": 1}))
        assert low.ext == {"offset": "0"}
        none = await broker.call(json_request(C.GET_MAX_OFFSET, {"topic": "MixT", "queueId": 3}))
        assert none.ext == {"offset": "0"}

    run(served, test)


@pytest.mark.parametrize(("ext", "code", "remark"), [
    (_v2("Bad Topic"), RC.SYSTEM_ERROR, "contains illegal characters"),
    (_v2("T" * 128), RC.SYSTEM_ERROR, "longer than topic max length 127"),
    ({**_v2("NoSuchT"), "c": "NoTemplate"}, RC.TOPIC_NOT_EXIST, "topic[NoSuchT] not exist"),
    (_v2("AutoT", 9), RC.SYSTEM_ERROR, "request queueId[9] is illegal"),
    (_v2("AutoT", 0, "KEYS\x01" + "k" * 33000), RC.MESSAGE_ILLEGAL, "properties size"),
    ({k: v for k, v in _v2("AutoT").items() if k != "a"}, RC.SYSTEM_ERROR, "producerGroup"),
])  # fmt: skip
def test_send_errors_as_rocketmq_answers_them(served: Served, ext: dict, code: int,
                                               remark: str) -> None:  # fmt: skip
    async def test(broker: Wire, namesrv: Wire) -> None:
        answer = await broker.call(json_request(C.SEND_MESSAGE_V2, ext, 5, b"x"))
        assert answer.code == code, answer.remark
        assert answer.remark and remark in answer.remark
        assert answer.ext == {}

    run(served, test)


def test_oversize_body_is_message_illegal_and_nothing_written(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        ext = _v2("BigT", 0, _props("k-big", "FD05"))
        answer = await broker.call(json_request(C.SEND_MESSAGE_V2, ext, 6, b"x" * (4 << 20 + 1)))
        assert answer.code == RC.MESSAGE_ILLEGAL, answer.remark
        top = await broker.call(json_request(C.GET_MAX_OFFSET, {"topic": "BigT", "queueId": 0}))
        assert top.ext == {"offset": "0"}

    run(served, test)


def test_query_message_by_key_and_unique_key_and_view_by_id(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        uniq = "FD0000000000000000000000000000B7"
        sent = await broker.call(json_request(
            C.SEND_MESSAGE_V2, _v2("LookT", 0, _props("lk-1 lk-2", uniq)), 1, b"look"))  # fmt: skip
        assert sent.code == 0 and sent.ext
        query = {"topic": "LookT", "key": "lk-2", "maxNum": "64", "beginTimestamp": "0",
                 "endTimestamp": "9223372036854775807"}  # fmt: skip

        async def found() -> R.Command | None:
            answer = await broker.call(json_request(C.QUERY_MESSAGE, query))
            return answer if answer.code == 0 else None

        by_key = await _until(found)
        assert by_key.ext and set(by_key.ext) == {"indexLastUpdateTimestamp",
                                                  "indexLastUpdatePhyoffset"}  # fmt: skip
        assert commitlog.decode(by_key.body).body == b"look"
        unique = {**query, "key": uniq, "_UNIQUE_KEY_QUERY": "true"}
        by_uniq = await broker.call(json_request(C.QUERY_MESSAGE, unique))
        assert by_uniq.code == 0 and commitlog.decode(by_uniq.body).body == b"look"
        missing = await broker.call(json_request(C.QUERY_MESSAGE, {**query, "key": "nope"}))
        assert missing.code == RC.QUERY_NOT_FOUND
        _ip, _port, offset = decode_offset_msg_id(sent.ext["msgId"])
        view = await broker.call(json_request(C.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        assert commitlog.decode(view.body).body == b"look"
        bad = await broker.call(json_request(C.VIEW_MESSAGE_BY_ID, {"offset": "999999999"}))
        assert bad.code == RC.SYSTEM_ERROR
        assert bad.remark == "can not find message by the offset, 999999999"

    run(served, test)


def test_heartbeat_unregister_and_consumed_by(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        body = json.dumps(
            {
                "clientID": "192.0.2.2@c-1",
                "consumerDataSet": [
                    {
                        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                        "consumeType": "CONSUME_PASSIVELY",
                        "groupName": "CG_PUSH",
                        "messageModel": "CLUSTERING",
                        "subscriptionDataSet": [
                            {
                                "classFilterMode": False,
                                "codeSet": [],
                                "expressionType": "TAG",
                                "subString": "*",
                                "subVersion": 1,
                                "tagsSet": [],
                                "topic": "CapT",
                            }
                        ],
                        "unitMode": False,
                    }
                ],
                "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
            }
        )
        # a newcomer is told its group changed before the heartbeat's answer (as 4.9.8)
        notify = await broker.call(json_request(C.HEART_BEAT, None, 8, body.encode()))
        assert (notify.code, notify.flag) == (C.NOTIFY_CONSUMER_IDS_CHANGED, R.FLAG_ONEWAY)
        raw = (await read_frame(broker.reader))[0]
        assert raw[8:] == (
            b'{"code":0,"flag":1,"language":"JAVA","opaque":8,'
            b'"serializeTypeCurrentRPC":"JSON","version":409}'
        )
        who = await broker.call(json_request(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "CapT"}))
        assert json.loads(who.body) == {"groupList": ["CG_PUSH"]}
        conns = await broker.call(
            json_request(C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG_PUSH"})
        )
        assert json.loads(conns.body)["connectionSet"][0]["clientId"] == "192.0.2.2@c-1"
        gone = await broker.call(
            json_request(
                C.UNREGISTER_CLIENT, {"clientID": "192.0.2.2@c-1", "consumerGroup": "CG_PUSH"}
            )
        )
        assert (gone.code, gone.ext) == (0, {})
        conns = await broker.call(
            json_request(C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG_PUSH"})
        )
        assert conns.code == RC.CONSUMER_NOT_ONLINE
        assert conns.remark == "the consumer group[CG_PUSH] not online"

    run(served, test)


def test_update_topic_reaches_the_name_server_and_admin_views(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        ext = {"topic": "AdminT", "defaultTopic": "TBW102", "readQueueNums": "3",
               "writeQueueNums": "3", "perm": "6", "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": "0", "order": "false"}  # fmt: skip
        answer = await broker.call(json_request(C.UPDATE_AND_CREATE_TOPIC, ext))
        assert answer.code == 0, answer.remark

        async def routed() -> R.Command | None:
            route = await _route(namesrv, "AdminT")
            return route if route.code == 0 else None

        route = json.loads((await _until(routed)).body)
        assert route["queueDatas"][0]["readQueueNums"] == 3
        topics = await namesrv.call(json_request(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert "AdminT" in json.loads(topics.body)["topicList"]
        system = await broker.call(
            json_request(C.UPDATE_AND_CREATE_TOPIC, {**ext, "topic": "TBW102"})
        )
        assert system.code == RC.SYSTEM_ERROR
        stats = await broker.call(json_request(C.GET_TOPIC_STATS_INFO, {"topic": "AdminT"}))
        table = json.loads(stats.body)["offsetTable"]
        assert len(table) == 3
        key = R.message_queue_key("rmqstore", 0, "AdminT")
        assert table[key] == {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}
        nope = await broker.call(json_request(C.GET_TOPIC_STATS_INFO, {"topic": "NopeT"}))
        assert nope.code == RC.TOPIC_NOT_EXIST
        runtime = await broker.call(json_request(C.GET_BROKER_RUNTIME_INFO))
        info = json.loads(runtime.body)["table"]
        assert info["brokerVersionDesc"] == "V4_9_8" and info["brokerVersion"] == "409"
        assert all(isinstance(v, str) for v in info.values())
        assert len(info["putTps"].split()) == 3

    run(served, test)


def test_unknown_code_and_malformed_frame(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        unknown = await broker.call(json_request(9999, None, 3))
        assert (unknown.code, unknown.remark) == (3, " request type 9999 not supported")
        bad = await Wire.open(served.broker)
        bad.writer.write(struct.pack(">i", R.FRAME_MAX + 1) + b"\x00" * 4)
        assert await bad.closed()
        await bad.close()
        again = await broker.call(json_request(C.GET_MAX_OFFSET, {"topic": "AutoT", "queueId": 0}))
        assert again.code == 0

    run(served, test)


def test_found_by_rmqstore_query_key(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        sent = await broker.call(json_request(
            C.SEND_MESSAGE_V2, _v2("CliT", 0, _props("cli-key", "FD0C")), 1, b"cli"))  # fmt: skip
        assert sent.code == 0 and sent.ext
        cmd = [sys.executable, "-m", "services.cli.main", "query-key", "--query", served.query,
               "--topic", "CliT", "--key", "cli-key", "--json"]  # fmt: skip
        while True:
            out = subprocess.run(cmd, cwd=procs.ROOT, capture_output=True, text=True, timeout=60)
            if out.returncode == 0 and json.loads(out.stdout)["count"] == 1:
                break
            await asyncio.sleep(0.1)
        assert json.loads(out.stdout)["messages"][0]["msgId"] == sent.ext["msgId"]

    run(served, test)


def test_compressed_body_is_stored_verbatim(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        body = zlib.compress(b"z" * 6000)  # what a 4.x client sends for a body over 4 KiB
        ext = _v2("ZipT", 0, _props("k-zip", "FD0D"), sys_flag=0x301)
        sent = await broker.call(json_request(C.SEND_MESSAGE_V2, ext, 1, body))
        assert sent.code == 0 and sent.ext, sent.remark
        _ip, _port, offset = decode_offset_msg_id(sent.ext["msgId"])
        view = await broker.call(json_request(C.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        record = commitlog.decode(view.body)
        assert record.body == body and record.sys_flag & 0x7FF == 0x301

    run(served, test)


def test_metrics_per_command(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        await broker.call(json_request(C.GET_MAX_OFFSET, {"topic": "AutoT", "queueId": 0}))
        await broker.call(json_request(9999))

    run(served, test)
    base = served.serve.base

    def scrape(port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            return r.read().decode()

    text = scrape(base + 17)
    assert 'rmqstore_remoting_requests_total{code="SUCCESS",command="GET_MAX_OFFSET"}' in text
    assert 'command="9999"' in text and 'code="REQUEST_CODE_NOT_SUPPORTED"' in text
    assert 'rmqstore_remoting_request_seconds_count{command="GET_MAX_OFFSET"}' in text
    names = scrape(base + 18)
    assert 'rmqstore_namesrv_requests_total{code="SUCCESS",command="REGISTER_BROKER"}' in names
