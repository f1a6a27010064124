"""SendMessage's mapping onto the 4.9 record, transaction ids and records, the settings
reply, and access-key signatures, without a server."""

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from rmqstore.access_keys import parse_date
from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.layout import TRANS_HALF_TOPIC, TRANS_OP_TOPIC
from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy import settings, transactions
from services.proxy.appender import Plain
from services.proxy.auth import Authenticator, sign
from services.proxy.produce import Sender, delivery_ms
from services.proxy.status import BusinessError, Code

NOW = 1_790_000_000_000


def _msg(**system) -> pb.Message:
    sp = pb.SystemProperties(**{"message_id": "01AB", "message_type": pb.NORMAL, **system})
    return pb.Message(topic=pb.Resource(name="T"), body=b"b", system_properties=sp)


def test_delivery_time_in_seconds_or_milliseconds():
    assert delivery_ms(_msg(delivery_timestamp=Timestamp(seconds=1_790_000_003))) == NOW + 3000
    # the Python client puts milliseconds in the seconds field when the application does
    assert delivery_ms(_msg(delivery_timestamp=Timestamp(seconds=NOW + 3000))) == NOW + 3000


def test_fifo_group_always_lands_in_one_queue_others_round_robin():
    s, topic = Sender(1024, 7_200_000), TopicConfig("T", 8, 8)
    fifo = _msg(message_group="orders-42")
    assert len({s.queue_for(fifo, topic) for _ in range(20)}) == 1
    assert sorted(s.queue_for(_msg(), topic) for _ in range(8)) == list(range(8))


def test_delayed_record_carries_its_exact_delivery_time():
    s = Sender(1024, 7_200_000)
    m = _msg(delivery_timestamp=Timestamp(seconds=NOW // 1000 + 3), born_host="10.0.0.1")
    m.system_properties.message_type = pb.DELAY
    kind = s.validate(m, TopicConfig("T"), NOW)
    r = s.record(m, kind, 0, "127.0.0.1:5000", NOW)
    props = {p.name: p.value for p in r.properties}
    # the writer picks the level (delay.level_for) and keeps the time in TIMER_DELIVER_MS
    assert r.deliver_at_ms == NOW + 3000 and r.delay_level == 0
    assert "TIMER_DELIVER_MS" not in props
    assert props["__BORNHOST"] == "10.0.0.1" and r.unique_key == "01AB"


def test_a_normal_message_goes_as_plain_columns_with_its_born_time_and_host_name():
    """What RocketMQ 5 clients send most (a born time and a host name, no user property)
    takes the writer's columns path; the Message it stands for is what ``record`` makes."""
    s, topic = Sender(1024, 7_200_000), TopicConfig("T", 8, 8)
    m = _msg(born_timestamp=Timestamp(seconds=1_790_000_001, nanos=5_000_000),
             born_host="worker-1", tag="t", keys=["k1", "k2"])  # fmt: skip
    kind, plain = s.prepare(m, topic, "127.0.0.1:5000", NOW)
    assert isinstance(plain, Plain)
    assert plain.born_timestamp == 1_790_000_001_005 and plain.born_host_property == "worker-1"
    assert plain.as_message() == s.record(m, kind, plain.queue_id, "127.0.0.1:5000", NOW)
    _kind, bare = s.prepare(_msg(born_host="a\x01b"), topic, "p:1", NOW)  # no such property
    assert isinstance(bare, Plain) and bare.born_timestamp == NOW
    assert not bare.born_host_property and not bare.as_message().properties
    m.user_properties["k"] = "v"
    assert not isinstance(s.prepare(m, topic, "p:1", NOW)[1], Plain)


@pytest.mark.parametrize(
    ("system", "props", "code"),
    [
        ({"keys": ["a b"]}, {}, Code.ILLEGAL_MESSAGE_KEY),
        ({}, {"TAGS": "x"}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({}, {"k": "v\x01"}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"message_group": "\x02"}, {}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"message_id": "0102FC0000000136BF0B19630500000000\n"}, {}, Code.ILLEGAL_MESSAGE_ID),
    ],
)
def test_refusals(system, props, code):
    m = _msg(**system)
    m.user_properties.update(props)
    with pytest.raises(BusinessError) as e:
        Sender(1024, 7_200_000).validate(m, TopicConfig("T"), NOW)
    assert e.value.code == code


def test_transaction_id_round_trip_and_malformed():
    tid = transactions.transaction_id(0xABCDEF, 7)
    assert transactions.parse_transaction_id(tid) == (0xABCDEF, 7)
    for bad in ("", "1234", tid.lower(), tid + "0", tid + "\n"):
        with pytest.raises(BusinessError) as e:
            transactions.parse_transaction_id(bad)
        assert e.value.code == Code.INVALID_TRANSACTION_ID


def test_commit_record_from_a_half_record():
    s = Sender(1024, 7_200_000)
    m = _msg(tag="t", keys=["k1", "k2"])
    m.user_properties["u"] = "1"
    base = s.record(m, pb.TRANSACTION, 3, "127.0.0.1:5000", NOW)
    half = transactions.half_record(base)
    assert (half.topic, half.queue_id, half.sys_flag) == (TRANS_HALF_TOPIC, 0, 0)
    props = {p.name: p.value for p in half.properties}
    assert props[P.REAL_TOPIC] == "T" and props[P.REAL_QID] == "3" and props[P.TRAN_MSG] == "true"
    stored = commitlog.Record(
        topic=TRANS_HALF_TOPIC, queue_id=0, body=b"b", queue_offset=9, physical_offset=4096,
        born_host=parse_host("127.0.0.1:5000"),
        properties=P.encode({**props, P.TAGS: "t", P.KEYS: "k1 k2", P.UNIQ_KEY: "01AB"}),
    )  # fmt: skip
    c = transactions.commit_record(stored)
    assert (c.topic, c.queue_id, c.prepared_transaction_offset) == ("T", 3, 4096)
    assert c.sys_flag == commitlog.TRANSACTION_COMMIT_TYPE and (c.tags, c.keys) == ("t", "k1 k2")
    names = {p.name for p in c.properties}
    assert "u" in names and P.PGROUP in names and not names & {P.REAL_TOPIC, P.TRAN_MSG}
    op = transactions.op_record(9)
    assert (op.topic, op.tags, op.body) == (TRANS_OP_TOPIC, "d", b"9")


def test_settings_back_off_per_client_and_language():
    producer = settings.reply(pb.Settings(client_type=pb.PRODUCER), 4096)
    assert producer.status.code == Code.OK
    assert producer.settings.publishing.max_body_size == 4096
    py = settings.reply(pb.Settings(subscription=pb.Subscription(),
                                    user_agent=pb.UA(language=pb.PYTHON)), 1)  # fmt: skip
    node = settings.reply(pb.Settings(subscription=pb.Subscription(),
                                      user_agent=pb.UA(language=pb.NODE_JS)), 1)  # fmt: skip
    assert py.settings.backoff_policy.WhichOneof("strategy") == "customized_backoff"
    assert node.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert py.settings.subscription.receive_batch_size == 32


def test_signatures_in_either_case_and_wrong_ones_refused():
    date = "20261126T000000Z"
    auth = Authenticator("AK", "SK", clock=lambda: parse_date(date))
    header = sign("AK", "SK", date)
    auth.check({"authorization": header, "x-mq-date-time": date})
    for bad in (sign("AK", "no", date), sign("XX", "SK", date), "", "Basic abc"):
        with pytest.raises(BusinessError) as e:
            auth.check({"authorization": bad, "x-mq-date-time": date})
        assert e.value.code == Code.UNAUTHORIZED
    Authenticator("", "").check({})  # off: anything goes
