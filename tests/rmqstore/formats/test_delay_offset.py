"""config/delayOffset.json in RocketMQ's format (fastjson, pretty-printed, bare integer keys)."""

import pytest

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import delay_offset

# as RocketMQ 4.9's broker writes it (fastjson PrettyFormat of DelayOffsetSerializeWrapper)
ROCKETMQ_ONE_LEVEL = '{\n\t"offsetTable":{1:1\n\t}\n}'
ROCKETMQ_ALL_LEVELS = (
    '{\n\t"offsetTable":{1:1,2:1,3:11,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,12:1,13:1,14:1,'
    "15:0,16:0,17:0,18:0\n\t}\n}"
)


def test_reads_what_rocketmq_writes():
    assert delay_offset.decode(ROCKETMQ_ONE_LEVEL) == {1: 1}
    table = delay_offset.decode(ROCKETMQ_ALL_LEVELS)
    assert table[3] == 11 and table[18] == 0 and sorted(table) == list(range(1, 19))


def test_writes_what_rocketmq_writes():
    assert delay_offset.encode({1: 1}) == ROCKETMQ_ONE_LEVEL
    table = delay_offset.decode(ROCKETMQ_ALL_LEVELS)
    assert delay_offset.encode(dict(reversed(table.items()))) == ROCKETMQ_ALL_LEVELS


@pytest.mark.parametrize("table", [{}, {1: 0}, {2: 15, 1: 0, 18: 1 << 40}])
def test_round_trip(table):
    assert delay_offset.decode(delay_offset.encode(table)) == table


def test_reads_rocketmq5_and_quoted_keys():
    text = '{"dataVersion":{"counter":3,"timestamp":1},"offsetTable":{"1":4, 2 : 5}}'
    assert delay_offset.decode(text) == {1: 4, 2: 5}


@pytest.mark.parametrize("text", ["", "{", '{"offsetTable":{0:1}}', '{"offsetTable":{1:-1}}',
                                  '{"offsetTable":[1]}'])
def test_refuses_what_is_not_a_table(text):
    with pytest.raises(CorruptRecordError, match="delayOffset.json"):
        delay_offset.decode(text)
