"""The short path of build_many gives exactly what build gives, and errors stay the same."""

import pytest

from rmqstore.errors import MessageIllegalError
from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.messages import MessageBuilder

NOW = 1_700_000_000_000
UK = "7F0000010B6E18B4AAC23E9C5AD5000"


def _builder(tmp_path, **kw):
    return MessageBuilder(WriterConfig(store=tmp_path, **kw))


def _mix():
    m = common_pb2.Message
    return [
        m(topic="A", queue_id=1, body=b"x", tags="T1", keys="k1 k2", unique_key=UK + "1"),
        m(topic="A", queue_id=1, body=b"y", tags="T1", keys="k3", unique_key=UK + "2"),
        m(topic="A", body=b"", without_unique_key=True),  # no properties but CLUSTER
        m(topic="A", body=b"z", keys="only", without_unique_key=True, flag=7, reconsume_times=2),
        m(topic="B", body=b"p", born_host="10.0.0.1:1234", born_timestamp=5, unique_key=UK + "3"),
        m(topic="B", body=b"v6", born_host="[::1]:99", tags="T2", unique_key=UK + "4"),
        m(topic="B", body=b"props", properties=[common_pb2.Property(name="a", value="b")],
          unique_key=UK + "5"),
        m(topic="B", body=b"delay", delay_level=3, unique_key=UK + "6"),
        m(topic="B", body=b"prep", sys_flag=0x4, unique_key=UK + "7"),
        m(topic="B", body=b"rollback", sys_flag=0xC, prepared_transaction_offset=9,
          unique_key=UK + "8"),
        m(topic="B", body=b"commit", sys_flag=0x8, unique_key=UK + "9"),
        m(topic="A", queue_id=1, body=b"x", tags="T1", keys="k1 k2", unique_key=UK + "1"),
    ]  # fmt: skip


def test_build_many_equals_build(tmp_path):
    many = _builder(tmp_path).build_many(_mix(), NOW)
    warm = _builder(tmp_path)
    warm.build_many(_mix(), NOW)  # caches filled: now every common message takes the short path
    again = warm.build_many(_mix(), NOW)
    one = _builder(tmp_path)
    single = [one.build(m, NOW) for m in _mix()]
    assert many == single and again == single
    assert [row[10] for row in single] == [True] * 8 + [False, False, True, True]


def test_generated_unique_keys_are_distinct(tmp_path):
    b = _builder(tmp_path)
    rows = b.build_many([common_pb2.Message(topic="A", body=b"x")] * 50, NOW)
    keys = [row[7] for row in rows]
    assert len(set(keys)) == 50 and all(len(k) == 32 for k in keys)


@pytest.mark.parametrize(
    "fields, error",
    [
        (dict(topic="A", queue_id=8), "queue id 8"),
        (dict(topic="A", body=b"x" * 2000), "body is 2000 bytes"),
        (dict(topic="A", sys_flag=0x10), "sets bits the writer owns"),
        (dict(topic="A", keys="a\x01b"), "keys contains a property separator"),
        (dict(topic="A", tags="a\x02b"), "tags contains a property separator"),
        (dict(topic="../A"), "topic"),
    ],
)
def test_bad_messages_fail_the_same_on_both_paths(tmp_path, fields, error):
    b = _builder(tmp_path, max_message_size=1000)
    b.build_many([common_pb2.Message(topic="A", body=b"warm")], NOW)
    with pytest.raises(MessageIllegalError, match=error):
        b.build_many([common_pb2.Message(topic="A", body=b"ok"), common_pb2.Message(**fields)], NOW)
