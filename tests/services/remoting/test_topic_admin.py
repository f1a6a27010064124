"""mqadmin's updateTopic on an existing topic and deleteTopic under ``rmqstore serve``, frames as
the spec shows them (``spec/rocketmq-remoting.md``: UPDATE_AND_CREATE_TOPIC 17,
DELETE_TOPIC_IN_BROKER 215, DELETE_TOPIC_IN_NAMESRV 216)."""

import json

import pytest

from rmqstore.formats import remoting as R
from rmqstore.server import channel
from rmqstore.v1 import topics_pb2, topics_pb2_grpc
from tests.remoting_wire import Wire, json_request
from tests.services.remoting.conftest import Served
from tests.services.remoting.test_broker import _route, _until, run

pytestmark = pytest.mark.integration
C = R.RequestCode
RC = R.ResponseCode


def _update(topic: str, read: int, write: int, perm: int, attributes: str = "") -> bytes:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read),
           "writeQueueNums": str(write), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "false"}  # fmt: skip
    if attributes:
        ext["attributes"] = attributes
    return json_request(C.UPDATE_AND_CREATE_TOPIC, ext)


def _writer_topic(served: Served, name: str) -> topics_pb2.TopicConfig:
    with channel(served.writer) as ch:
        stub = topics_pb2_grpc.TopicsStub(ch)
        return stub.GetTopic(topics_pb2.GetTopicRequest(name=name), timeout=10)


async def _config(broker: Wire) -> dict:
    answer = await broker.call(json_request(C.GET_ALL_TOPIC_CONFIG))
    return json.loads(answer.body)["topicConfigTable"]


async def _queues(namesrv: Wire, topic: str, want: tuple[int, int, int]) -> dict:
    """The name server's queue data of ``topic`` once it shows (read, write, perm) ``want``."""

    async def routed() -> dict | None:
        route = await _route(namesrv, topic)
        if route.code != 0:
            return None
        q = json.loads(route.body)["queueDatas"][0]
        return q if (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == want else None

    return await _until(routed)


def test_update_topic_changes_the_queues_and_perm_of_an_existing_topic(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        assert (await broker.call(_update("ResizeT", 4, 4, 6))).code == 0
        await _queues(namesrv, "ResizeT", (4, 4, 6))
        answer = await broker.call(_update("ResizeT", 2, 6, 4))
        assert (answer.code, answer.remark) == (0, "not set any response code")
        config = (await _config(broker))["ResizeT"]
        assert (config["readQueueNums"], config["writeQueueNums"], config["perm"]) == (2, 6, 4)
        await _queues(namesrv, "ResizeT", (2, 6, 4))  # registered again, changed
        # perm 4 (read only): a send is refused as RocketMQ refuses it
        send = {"a": "PG", "b": "ResizeT", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                "g": "1", "h": "0", "i": "", "j": "0"}  # fmt: skip
        refused = await broker.call(json_request(C.SEND_MESSAGE_V2, send, 2, b"x"))
        assert refused.code == RC.NO_PERMISSION
        too_many = await broker.call(_update("ResizeT", 2, 1000, 6))
        assert too_many.code == RC.SYSTEM_ERROR and "queue count" in too_many.remark
        assert (await _config(broker))["ResizeT"]["writeQueueNums"] == 6  # nothing changed
        # RocketMQ 5's mqadmin updateTopic -a +message.type=FIFO
        typed = await broker.call(_update("ResizeT", 2, 6, 6, "+message.type=FIFO"))
        assert typed.code == 0, typed.remark
        assert _writer_topic(served, "ResizeT").attributes == {"+message.type": "FIFO"}
        odd = await broker.call(_update("ResizeT", 2, 6, 6, "+queue.type=BatchCQ"))
        assert odd.code == RC.SYSTEM_ERROR and "unsupported topic attribute" in odd.remark
        assert _writer_topic(served, "ResizeT").attributes == {"+message.type": "FIFO"}
        # no queue count (rmqstore topic create --namesrv without --queues): the writer's
        assert (await broker.call(_update("DefaultQT", 0, 0, 6))).code == 0
        made = _writer_topic(served, "DefaultQT")
        assert made.read_queue_nums == made.write_queue_nums > 0
        zero = await broker.call(_update("DefaultQT", 0, 0, 6))  # an existing topic: refused
        assert zero.code == RC.SYSTEM_ERROR and "queue count" in zero.remark

    run(served, test)


def test_delete_topic_in_broker_and_in_name_server(served: Served) -> None:
    async def test(broker: Wire, namesrv: Wire) -> None:
        assert (await broker.call(_update("GoneT", 3, 3, 6))).code == 0
        await _queues(namesrv, "GoneT", (3, 3, 6))
        delete = json_request(C.DELETE_TOPIC_IN_BROKER, {"topic": "GoneT"}, 5)
        answer = await broker.call(delete)
        assert (answer.code, answer.opaque, answer.flag) == (0, 5, R.FLAG_RESPONSE)
        assert "GoneT" not in await _config(broker)
        stats = await broker.call(json_request(C.GET_TOPIC_STATS_INFO, {"topic": "GoneT"}))
        assert stats.code == RC.TOPIC_NOT_EXIST
        # mqadmin then asks each name server to drop the route
        ext = {"topic": "GoneT", "clusterName": "DefaultCluster"}
        dropped = await namesrv.call(json_request(C.DELETE_TOPIC_IN_NAMESRV, ext))
        assert dropped.code == 0
        assert (await _route(namesrv, "GoneT")).code == RC.TOPIC_NOT_EXIST
        # the broker's next registration (after another topic's change) does not bring it back
        assert (await broker.call(_update("StayT", 1, 1, 6))).code == 0
        await _queues(namesrv, "StayT", (1, 1, 6))
        assert (await _route(namesrv, "GoneT")).code == RC.TOPIC_NOT_EXIST
        # deleting again, or a topic never made, still answers SUCCESS (as 4.9.8)
        assert (await broker.call(delete)).code == 0
        for topic in ("TBW102", "RMQ_SYS_TRANS_HALF_TOPIC", "bad/name"):
            system = await broker.call(json_request(C.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
            assert system.code == RC.SYSTEM_ERROR, topic
        assert "TBW102" in await _config(broker)
        missing = await broker.call(json_request(C.DELETE_TOPIC_IN_BROKER, {}))
        assert missing.code == RC.SYSTEM_ERROR and "topic" in missing.remark

    run(served, test)
