"""config/topics.json in fastjson's pretty format, read back as written."""

import json

import pytest

from rmqstore.formats import topics_json as tj

ROCKETMQ_WRITTEN = """{
\t"dataVersion":{
\t\t"counter":2,
\t\t"timestamp":1700000000000
\t},
\t"topicConfigTable":{
\t\t"TopicA":{
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TopicA",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t}
\t}
}"""


def test_rocketmq_file_reads_and_renders_back_byte_for_byte():
    table = tj.parse(ROCKETMQ_WRITTEN)
    assert table.counter == 2 and table.timestamp == 1700000000000
    t = table.topics["TopicA"]
    assert (t.read_queue_nums, t.write_queue_nums, t.perm, t.message_type) == (4, 4, 6, "MIXED")
    assert tj.render(table) == ROCKETMQ_WRITTEN


def test_attributes_round_trip_and_are_valid_json():
    t = tj.TopicConfig("F", 2, 2, tj.PERM_READ, attributes={tj.MESSAGE_TYPE_ATTRIBUTE: "FIFO"})
    text = tj.render(tj.TopicTable({"F": t}, 1, 5))
    assert json.loads(text)["topicConfigTable"]["F"]["attributes"] == {"+message.type": "FIFO"}
    back = tj.parse(text).topics["F"]
    assert back == t and back.message_type == "FIFO" and back.readable and not back.writable


def test_empty_file_is_an_empty_table_and_garbage_is_refused():
    assert tj.parse("").topics == {}
    with pytest.raises(ValueError):
        tj.parse("[1, 2]")
