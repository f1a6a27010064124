"""The short paths (build_many's, columns, plain batches of Messages) give exactly what build
gives, and errors stay the same."""

from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore.errors import MessageIllegalError
from rmqstore.formats.commitlog_batch import PlainRun
from rmqstore.v1 import commitlog_pb2, common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.messages import PLAIN_BATCH_MIN, MessageBuilder

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
        m(topic="B", body=b"zlib", sys_flag=0x301, unique_key=UK + "A"),  # a 4.x client's
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
    assert [row[10] for row in single] == [True] * 8 + [False, False, True, True, True]


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


def _columns(**fields):
    return commitlog_pb2.MessageColumns(**fields)


def _assert_same_records(builder, cols, rows) -> None:
    """Columns from build_columns hold what build_many's rows hold, and their records (a
    PlainRun or PlainFew there, prepared tuples here) encode to the same bytes."""
    want = list(zip(*rows, strict=True))
    assert [tuple(col) for col in cols[1:]] == want[1:]
    qos = list(range(5, 5 + len(rows)))
    phys = list(accumulate(cols[1][:-1], initial=4096))
    encode = builder.encoder.encode
    assert encode(cols[0], qos, phys, NOW + 1) == encode(want[0], qos, phys, NOW + 1)


def _as_messages(c) -> list:
    """The Messages that ``c`` stands for, each field spelled out."""
    n, at = len(c.body_size), 0
    out = []
    for i, size in enumerate(c.body_size):

        def pick(values, i=i):
            return values[i] if len(values) == n else (values[0] if values else "")

        out.append(
            common_pb2.Message(
                topic=c.topic,
                queue_id=c.queue_id[i] if len(c.queue_id) == n else c.queue_id[0],
                body=c.bodies[at : at + size],
                tags=pick(c.tags),
                keys=pick(c.keys),
                unique_key=pick(c.unique_key),
                born_timestamp=c.born_timestamps[i] if c.born_timestamps else c.born_timestamp,
                born_host=c.born_host,
                properties=[common_pb2.Property(name="__BORNHOST", value=c.born_host_property)]
                if c.born_host_property
                else [],
            )  # fmt: skip
        )
        at += size
    return out


@pytest.mark.parametrize(
    "fields",
    [
        dict(topic="A", body_size=[1, 0, 3], bodies=b"xyzw", queue_id=[0, 7, 2],
             tags=["T1", "", "T2"], keys=["k1 k2", "k3", ""],
             unique_key=[UK + "1", UK + "2", UK + "3"]),
        dict(topic="A", body_size=[2, 2], bodies=b"abcd", queue_id=[3], tags=["T"], keys=["k"],
             unique_key=[UK + "1", UK + "2"], born_host="10.0.0.1:1234", born_timestamp=5),
        dict(topic="B", body_size=[1], bodies=b"v", queue_id=[1], born_host="[::1]:99",
             unique_key=[UK + "1"]),
        # as the proxy puts RocketMQ 5 clients' messages: born times each, __BORNHOST
        dict(topic="C", body_size=[1, 2], bodies=b"vwx", queue_id=[1, 2], tags=["T"],
             unique_key=[UK + "1", UK + "2"], born_timestamps=[7, 9],
             born_host_property="worker-3.example"),
        dict(topic="C", body_size=[1, 2], bodies=b"vwx", queue_id=[1], tags=["T", ""],
             keys=["k", ""], unique_key=[UK + "1", UK + "2"], born_host_property="h"),
        dict(topic="C", body_size=[1] * 9, bodies=b"v" * 9, queue_id=[1], keys=["k"],
             unique_key=[UK + str(i) for i in range(9)], born_timestamps=list(range(1, 10)),
             born_host_property="{x}"),  # numpy's way, and braces in the value
        # a synchronous sender's one message (formatted on its own)
        dict(topic="C", body_size=[3], bodies=b"vwx", queue_id=[2], tags=["T{0}"], keys=[""],
             unique_key=[UK + "1"], born_timestamps=[7], born_host_property="h{1}"),
        dict(topic="C", body_size=[0], bodies=b"", queue_id=[0], keys=["k"], unique_key=[UK]),
    ],
)  # fmt: skip
def test_columns_make_the_records_their_messages_make(tmp_path, fields):
    c = _columns(**fields)
    b = _builder(tmp_path)
    cols = b.build_columns(c, NOW)
    rows = _builder(tmp_path).build_many(_as_messages(c), NOW)
    _assert_same_records(b, cols, rows)


def test_columns_generate_unique_keys(tmp_path):
    c = _columns(topic="A", body_size=[1] * 50, bodies=b"x" * 50, queue_id=[0])
    keys = _builder(tmp_path).build_columns(c, NOW)[7]
    assert len(set(keys)) == 50 and all(len(k) == 32 for k in keys)


def test_empty_columns_are_no_messages(tmp_path):
    assert _builder(tmp_path).build_columns(_columns(topic="A"), NOW) == ()


@pytest.mark.parametrize(
    "fields, error",
    [
        (dict(topic="A", body_size=[1, 1], bodies=b"xy"), "queue_id has 0 entries for 2"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[0, 1, 2]), "has 3 entries"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[0], keys=["a", "b", "c"]),
         "keys has 3 entries for 2 messages"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[0], unique_key=[UK + "1"]),
         "unique_key has 1 entries for 2 messages"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xyz", queue_id=[0]), "holds 3 bytes"),
        (dict(topic="A", body_size=[3, -1], bodies=b"xy", queue_id=[0]), "negative"),
        (dict(topic="A", body_size=[1, 2000], bodies=b"x" * 2001, queue_id=[0]),
         "message 1 is 2000 bytes"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[0, 8]), "queue id 8"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[-1, 0]), "queue id -1"),
        (dict(topic="A", body_size=[1], bodies=b"x", queue_id=[0], keys=["a\x01b"]),
         "keys contains a property separator"),
        (dict(topic="A", body_size=[1], bodies=b"x", queue_id=[0], tags=["a\x02"]),
         "tags contains a property separator"),
        (dict(topic="A", body_size=[1], bodies=b"x", queue_id=[0], born_host_property="a\x01"),
         "born host property contains a property separator"),
        (dict(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[0], born_timestamps=[5]),
         "born_timestamps has 1 entries for 2 messages"),
        (dict(topic="A", body_size=[1], bodies=b"x", queue_id=[0], keys=["k" * 40000]),
         "properties are"),
        (dict(topic="../A", body_size=[1], bodies=b"x", queue_id=[0]), "topic"),
        (dict(topic="A", bodies=b"x"), "body_size lists no message"),
    ],
)  # fmt: skip
def test_bad_columns_are_refused(tmp_path, fields, error):
    with pytest.raises(MessageIllegalError, match=error):
        _builder(tmp_path, max_message_size=1000).build_columns(_columns(**fields), NOW)


@pytest.mark.parametrize("cluster", ["DefaultCluster", "c%s{0}%b"])
def test_one_tag_for_all_is_formatted_literally(tmp_path, cluster):
    """The one-tag batch takes a bytes template: % and braces in names stay literal."""
    c = _columns(topic="A", body_size=[1, 1], bodies=b"xy", queue_id=[0], tags=["50%{1}%b"],
                 keys=["k%s", "{0}"], unique_key=[UK + "1", UK + "2"])  # fmt: skip
    b = _builder(tmp_path, cluster_name=cluster)
    cols = b.build_columns(c, NOW)
    rows = _builder(tmp_path, cluster_name=cluster).build_many(_as_messages(c), NOW)
    _assert_same_records(b, cols, rows)
    first = b.encoder.encode(cols[0], [0, 1], [0, cols[1][0]], NOW)[: cols[1][0]]
    assert b"TAGS\x0150%{1}%b" in first and b"k%s" in first


_TEXT = st.text(alphabet="ab %{}\x01", max_size=4)


@st.composite
def _any_columns(draw):
    """Mostly well-formed columns (each column none, one or one per message), sometimes
    with one column broken: a wrong length, sizes that do not add up, bad values."""
    n = draw(st.integers(0, 5))
    sizes = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))

    def column(values, allowed=(0, 1, n)):
        return values[: draw(st.sampled_from(allowed))]

    fields = dict(
        topic="A",
        body_size=sizes,
        bodies=draw(st.binary(min_size=sum(sizes), max_size=sum(sizes))),
        queue_id=column(draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)), (1, n)),
        tags=column(draw(st.lists(_TEXT, min_size=n, max_size=n))),
        keys=column(draw(st.lists(_TEXT, min_size=n, max_size=n))),
        unique_key=column([f"{UK}{i}" for i in range(n)], (0, n)),
    )
    broken = draw(st.sampled_from([None, None, "body_size", "bodies", "queue_id", "tags"]))
    if broken == "body_size":
        fields["body_size"] = [*sizes, draw(st.integers(-1, 4))]
    elif broken == "bodies":
        fields["bodies"] += b"x"
    elif broken == "queue_id":
        fields["queue_id"] = draw(st.lists(st.integers(-1, 8), max_size=6))
    elif broken == "tags":
        fields["tags"] = draw(st.lists(_TEXT, min_size=2, max_size=7))
    return _columns(**fields)


@settings(max_examples=300, deadline=None)
@given(c=_any_columns())
def test_any_columns_are_refused_or_stored_as_their_messages(tmp_path_factory, c):
    """Whatever the columns hold: a clear refusal, or exactly the records of the messages
    they stand for (the generated unique keys given to those messages)."""
    tmp = tmp_path_factory.getbasetemp()
    b = _builder(tmp)
    try:
        cols = b.build_columns(c, NOW)
    except MessageIllegalError:
        return
    if not c.body_size:
        assert cols == ()
        return
    c.ClearField("unique_key")
    c.unique_key.extend(cols[7])
    rows = _builder(tmp).build_many(_as_messages(c), NOW)
    _assert_same_records(b, cols, rows)


def _plain_batch(n: int, **fields) -> list:
    return [
        common_pb2.Message(topic="A", queue_id=i % 8, body=b"b%d" % i, tags="T", keys=f"k{i}",
                           **fields)
        for i in range(n)
    ]  # fmt: skip


def test_a_plain_batch_of_messages_is_prepared_at_once(tmp_path):
    b = _builder(tmp_path)
    cols = b.build_batch(_plain_batch(PLAIN_BATCH_MIN, born_timestamp=5), NOW)
    assert isinstance(cols[0], PlainRun)
    assert len(set(cols[7])) == PLAIN_BATCH_MIN  # unique keys generated, distinct
    batch = _plain_batch(PLAIN_BATCH_MIN, born_timestamp=5)
    for m, uniq in zip(batch, cols[7], strict=True):
        m.unique_key = uniq
    _assert_same_records(b, cols, _builder(tmp_path).build_many(batch, NOW))


@pytest.mark.parametrize(
    "change",
    [
        dict(topic="B"), dict(born_host="10.0.0.1:1234"), dict(flag=1), dict(sys_flag=0x8),
        dict(delay_level=2), dict(reconsume_times=1), dict(prepared_transaction_offset=3),
        dict(without_unique_key=True), dict(properties=[common_pb2.Property(name="a", value="b")]),
    ],
)  # fmt: skip
def test_a_batch_with_one_message_not_plain_goes_message_by_message(tmp_path, change):
    batch = _plain_batch(PLAIN_BATCH_MIN, unique_key=UK + "1")
    batch[3].MergeFrom(common_pb2.Message(**change))
    cols = _builder(tmp_path).build_batch(batch, NOW)
    assert not isinstance(cols[0], PlainRun)
    assert cols == tuple(zip(*_builder(tmp_path).build_many(batch, NOW), strict=True))


@pytest.mark.parametrize(
    "change, error",
    [
        (dict(queue_id=8), "queue id 8"),
        (dict(body=b"x" * 2000), "body is 2000 bytes"),
        (dict(keys="a\x01b"), "keys contains a property separator"),
        (dict(topic="../A"), "topic"),
    ],
)
def test_a_plain_batch_to_refuse_says_which_field_as_for_one_message(tmp_path, change, error):
    batch = _plain_batch(PLAIN_BATCH_MIN)
    for m in batch:  # every message (one topic): the plain path is tried and refuses
        m.MergeFrom(common_pb2.Message(**change))
    with pytest.raises(MessageIllegalError, match=error):
        _builder(tmp_path, max_message_size=1000).build_batch(batch, NOW)


_PLAIN_TEXT = st.text(alphabet="ab %{}", max_size=4)
_ODD = {"topic": "B", "queue_id": 8, "flag": 1, "delay_level": 1, "keys": "a\x01", "tags": "\x02"}


@st.composite
def _any_messages(draw):
    """Batches of mostly plain messages, now and then one that is not plain or not valid."""
    n = draw(st.integers(0, 12))
    born = draw(st.sampled_from(["", "10.0.0.1:1234", "[::1]:99"]))
    batch = []
    for i in range(n):
        fields = dict(
            topic="A", queue_id=draw(st.integers(0, 7)), body=draw(st.binary(max_size=4)),
            tags=draw(_PLAIN_TEXT), keys=draw(_PLAIN_TEXT), born_host=born,
            unique_key=draw(st.sampled_from(["", f"{UK}{i}"])),
            born_timestamp=draw(st.sampled_from([0, 5, 6])),
        )  # fmt: skip
        odd = draw(st.sampled_from([None] * 30 + list(_ODD)))
        if odd:
            fields[odd] = _ODD[odd]
        batch.append(common_pb2.Message(**fields))
    return born, batch


@settings(max_examples=300, deadline=None)
@given(drawn=_any_messages())
def test_any_batch_is_refused_or_stored_as_message_by_message(tmp_path_factory, drawn):
    """build_batch refuses what build_many refuses, with the same error, and otherwise makes
    the same records (the generated unique keys given to the messages)."""
    born, batch = drawn
    tmp = tmp_path_factory.getbasetemp()

    def builder():
        b = _builder(tmp)
        b.build_many([common_pb2.Message(topic="A", born_host=born)], NOW)  # knows the host
        return b

    b = builder()
    try:
        cols = b.build_batch(batch, NOW)
    except MessageIllegalError as e:
        with pytest.raises(MessageIllegalError) as refused:
            builder().build_many(batch, NOW)
        assert str(refused.value) == str(e)
        return
    if not batch:
        assert cols == ()
        return
    for m, uniq in zip(batch, cols[7], strict=True):
        m.unique_key = uniq
    _assert_same_records(b, cols, builder().build_many(batch, NOW))
