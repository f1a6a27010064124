"""config/consumerOffset.json: fastjson's text with unquoted integer keys, read and written."""

import json

import pytest

from rmqstore.formats import consumer_offsets as co
from rmqstore.formats import fastjson

ROCKETMQ_WRITTEN = """{
\t"offsetTable":{
\t\t"%RETRY%groupA@groupA":{0:0
\t\t},
\t\t"Topic@B@groupB":{0:7
\t\t},
\t\t"TopicA@groupA":{0:250,1:249,2:250,3:251
\t\t}
\t}
}"""


def test_rocketmq_file_reads_and_renders_back_byte_for_byte():
    table = co.parse(ROCKETMQ_WRITTEN)
    assert table.offsets[("TopicA", "groupA")] == {0: 250, 1: 249, 2: 250, 3: 251}
    assert table.offsets[("%RETRY%groupA", "groupA")] == {0: 0}
    assert table.offsets[("Topic@B", "groupB")] == {0: 7}  # the group follows the last @
    assert co.render(table) == ROCKETMQ_WRITTEN


def test_written_file_is_strict_json_once_keys_are_quoted_and_keeps_data_version():
    table = co.OffsetTable({("T", "g"): {3: 9, 0: 1}}, {"counter": 4, "timestamp": 5})
    text = co.render(table)
    assert "{0:1,3:9\n\t\t}" in text
    doc = json.loads(fastjson.quote_int_keys(text))
    assert doc == {"dataVersion": {"counter": 4, "timestamp": 5},
                   "offsetTable": {"T@g": {"0": 1, "3": 9}}}  # fmt: skip
    assert co.parse(text) == table


def test_quoting_leaves_strings_alone():
    assert fastjson.loads('{"a{1:2":{1:2}}') == {"a{1:2": {"1": 2}}


@pytest.mark.parametrize("text", ["[1]", '{"offsetTable":[]}', '{"offsetTable":{"nogroup":{0:1}}}',
                                  '{"offsetTable":{"t@g":{x:1}}}'])  # fmt: skip
def test_not_an_offset_file_is_a_value_error(text):
    with pytest.raises(ValueError):
        co.parse(text)


def test_empty_text_is_an_empty_table():
    assert co.parse("").offsets == {}
