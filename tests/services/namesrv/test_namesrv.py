"""The name server over TCP, frames as the spec shows them (``spec`` §3.1)."""

import asyncio
import json
import zlib
from collections.abc import Awaitable, Callable

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import RemotingServer
from services.namesrv.handlers import NameServer
from services.namesrv.routes import RouteTable
from tests.remoting_wire import Wire, json_request

C = R.RequestCode
REGISTER_BODY = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
    "dataVersion": {"counter": 0, "timestamp": 1795817537947}, "topicConfigTable": {
        "TBW102": {"order": False, "perm": 7, "readQueueNums": 8,
                   "topicFilterType": "SINGLE_TAG", "topicName": "TBW102", "topicSysFlag": 0,
                   "writeQueueNums": 8},
        "CapT": {"order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
                 "topicName": "CapT", "topicSysFlag": 0, "writeQueueNums": 4}}}},
    separators=(",", ":")).encode()  # fmt: skip
REGISTER_EXT = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
                "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:10912",
                "brokerId": "0", "compressed": "false", "bodyCrc32": "0"}  # fmt: skip


def run(test: Callable[[Wire, RouteTable, RemotingServer], Awaitable[None]]) -> None:
    async def main() -> None:
        table = RouteTable()
        names = NameServer(table)
        server = RemotingServer(names, on_close=names.connection_closed)
        address = await server.start("127.0.0.1", 0)
        wire = await Wire.open(address)
        try:
            await test(wire, table, server)
        finally:
            await wire.close()
            await server.close()

    asyncio.run(main())


async def _register(wire: Wire, crc: int = 0) -> R.Command:
    ext = {**REGISTER_EXT, "bodyCrc32": str(crc)}
    return await wire.call(json_request(C.REGISTER_BROKER, ext, opaque=3, body=REGISTER_BODY))


def test_register_then_route_as_captured() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        answer = await _register(wire, zlib.crc32(REGISTER_BODY) & 0x7FFFFFFF)
        assert (answer.code, answer.opaque, answer.ext, answer.flag) == (0, 3, {}, 1)
        raw = await wire.call_raw(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "CapT"}, 7))
        header_len = int.from_bytes(raw[4:8], "big")
        assert json.loads(raw[8 : 8 + header_len]) == {
            "code": 0, "flag": 1, "language": "JAVA", "opaque": 7,
            "serializeTypeCurrentRPC": "JSON", "version": 409}  # fmt: skip
        assert raw[8 + header_len :] == (
            b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'
            b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":'
            b'"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
        )

    run(test)


def test_unknown_topic_is_topic_not_exist() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        answer = await wire.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"}))
        assert answer.code == R.ResponseCode.TOPIC_NOT_EXIST and answer.body == b""
        assert answer.remark is not None and answer.remark.startswith(
            "No topic route info in name server for the topic: Nope"
        )

    run(test)


def test_crc_mismatch_is_refused() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        answer = await _register(wire, crc=12345)
        assert (answer.code, answer.remark) == (R.ResponseCode.SYSTEM_ERROR, "crc32 not match")
        assert table.topic_list() == []

    run(test)


def test_cluster_info_and_topic_list_as_captured() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        await _register(wire)
        info = await wire.call(json_request(C.GET_BROKER_CLUSTER_INFO))
        assert info.body == (
            b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"127.0.0.1:10911"},'
            b'"brokerName":"broker-a","cluster":"DefaultCluster"}},'
            b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
        )
        topics = await wire.call(json_request(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert json.loads(topics.body) == {"topicList": ["CapT", "TBW102"]}
        by_cluster = await wire.call(json_request(C.GET_TOPICS_BY_CLUSTER,
                                                  {"cluster": "DefaultCluster"}))  # fmt: skip
        assert json.loads(by_cluster.body) == {"topicList": ["CapT", "TBW102"]}

    run(test)


def test_delete_topic_and_unregister() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        await _register(wire)
        deleted = await wire.call(
            json_request(
                C.DELETE_TOPIC_IN_NAMESRV, {"topic": "CapT", "clusterName": "DefaultCluster"}
            )
        )
        assert deleted.code == 0 and table.topic_list() == ["TBW102"]
        ext = {k: REGISTER_EXT[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")}
        gone = await wire.call(json_request(C.UNREGISTER_BROKER, ext))
        assert (gone.code, gone.ext) == (0, {})
        assert table.topic_list() == [] and table.brokers == {}

    run(test)


def test_a_registration_gives_its_own_timeout() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        for value, code in (("20000", R.ResponseCode.SUCCESS), ("x", R.ResponseCode.SYSTEM_ERROR),
                            ("-5", R.ResponseCode.SYSTEM_ERROR)):  # fmt: skip
            ext = {**REGISTER_EXT, "heartbeatTimeoutMillis": value}
            answer = await wire.call(json_request(C.REGISTER_BROKER, ext, body=REGISTER_BODY))
            assert answer.code == code, answer.remark
            if code != R.ResponseCode.SUCCESS:
                assert "heartbeatTimeoutMillis" in answer.remark
        assert table.live["127.0.0.1:10911"].timeout_s == 20.0  # the bad ones changed nothing
        await wire.call(json_request(C.REGISTER_BROKER, REGISTER_EXT, body=REGISTER_BODY))
        assert table.live["127.0.0.1:10911"].timeout_s is None  # a 4.x broker's: the table's

    run(test)


def test_closing_the_registering_connection_drops_the_broker() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        await _register(wire)
        other = await Wire.open(server.address)
        await wire.close()
        deadline = asyncio.get_running_loop().time() + 10
        while table.brokers and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert table.brokers == {}
        route = await other.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "CapT"}))
        assert route.code == R.ResponseCode.TOPIC_NOT_EXIST
        await other.close()

    run(test)


def test_kv_config_and_order_topic_conf() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        await _register(wire)
        missing = await wire.call(
            json_request(C.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "CapT"})
        )
        assert missing.code == R.ResponseCode.QUERY_NOT_FOUND
        put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "CapT", "value": "broker-a:4"}
        assert (await wire.call(json_request(C.PUT_KV_CONFIG, put))).code == 0
        got = await wire.call(
            json_request(C.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "CapT"})
        )
        assert got.ext == {"value": "broker-a:4"}
        route = await wire.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "CapT"}))
        assert json.loads(route.body)["orderTopicConf"] == "broker-a:4"

    run(test)


def test_unknown_code_missing_field_and_oneway() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        unknown = await wire.call(json_request(9999, opaque=5))
        assert (unknown.code, unknown.opaque) == (3, 5)
        assert unknown.remark == " request type 9999 not supported"
        # a oneway registration (as after topic auto-creation) is applied, not answered
        wire.writer.write(json_request(C.REGISTER_BROKER, REGISTER_EXT, opaque=8,
                                       body=REGISTER_BODY, flag=R.FLAG_ONEWAY))  # fmt: skip
        missing = await wire.call(json_request(C.GET_ROUTEINFO_BY_TOPIC, {}, opaque=9))
        assert (missing.opaque, missing.code) == (9, R.ResponseCode.SYSTEM_ERROR)
        assert table.topic_list() == ["CapT", "TBW102"]

    run(test)


def test_malformed_frame_closes_only_its_connection() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        bad = await Wire.open(server.address)
        bad.writer.write(b"\x00\x00\x00\x08\x00\x00\x00\x04{x}!")
        assert await bad.closed()
        await bad.close()
        answer = await wire.call(json_request(C.GET_BROKER_CLUSTER_INFO))
        assert answer.code == 0

    run(test)


def test_binary_header_request_is_answered_in_kind() -> None:
    async def test(wire: Wire, table: RouteTable, server: RemotingServer) -> None:
        await _register(wire)
        bench = bytes.fromhex("0000002a 01000026 0069 00 0199 00000000 00000000 00000000"
                              " 00000011 0005 746f706963 00000006 42656e636854")  # fmt: skip
        answer = await wire.call(bench)
        assert answer.serialize_type == R.ROCKETMQ and answer.code == 17

    run(test)
