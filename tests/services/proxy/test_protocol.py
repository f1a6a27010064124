"""The proxy spoken to directly through the protocol: every refusal is a RocketMQ ``Code`` in
the reply (gRPC status OK) and writes nothing; routes and settings carry what clients need."""

import threading
import time

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from rmqstore.access_keys import format_date
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, topics_pb2, topics_pb2_grpc
from services.proxy.auth import sign
from tests import procs

pytestmark = pytest.mark.integration
MD = (("x-mq-client-id", "test@1@0@x"), ("x-mq-language", "PYTHON"))
MSG_ID = "0102FC0000000136BF0B19630500000000"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    store = tmp_path_factory.mktemp("proto") / "store"
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", str(4 << 20))  # fmt: skip
    proxies = []
    try:
        quick_checks = ("--transaction-timeout", "0.3", "--transaction-check-interval", "0.2",
                        "--transaction-check-max", "2", "--max-delay", "90m")  # fmt: skip
        # the first proxy consumes (it has the store); the others have no --store
        for extra in (("--store", str(store)), ("--access-key", "AK"), quick_checks):
            proxies.append(procs.start(
                "services.proxy", "--listen", "127.0.0.1:0", "--commitlog", writer.address,
                "--no-auto-create-topics", "--max-body-size", "1024", *extra,
                env={"RMQSTORE_SECRET_KEY": "SK"}))  # fmt: skip
        topics = topics_pb2_grpc.TopicsStub(channel(writer.address))
        topics.CreateTopic(topics_pb2.CreateTopicRequest(name="Known", queue_nums=4))
        topics.CreateTopic(topics_pb2.CreateTopicRequest(name="FifoOnly", message_type="FIFO"))
        yield writer, proxies[0], proxies[1], proxies[2]
    finally:
        for p in proxies:
            p.stop()
        writer.stop()


def _stub(proc):
    return service_pb2_grpc.MessagingServiceStub(channel(proc.address))


def _max_offset(writer) -> int:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    return stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset


def _message(topic="Known", body=b"hello", **system) -> pb.Message:
    system = {"message_id": MSG_ID, **system}
    sp = pb.SystemProperties(message_type=pb.NORMAL, body_encoding=pb.IDENTITY, **system)
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp)


def _send(proxy, m: pb.Message, md=MD) -> spb.SendMessageResponse:
    return _stub(proxy).SendMessage(spb.SendMessageRequest(messages=[m]), metadata=md, timeout=10)


def _oversize():
    return _message(body=b"x" * 1025)


def _reserved():
    m = _message()
    m.user_properties["UNIQ_KEY"] = "forged"
    return m


def _group_on_normal():
    return _message(message_group="g")


def _far_delay(hours: int = 4 * 24):
    m = _message(delivery_timestamp=Timestamp(seconds=int(time.time()) + hours * 3600))
    m.system_properties.message_type = pb.DELAY
    return m


def _tag_with_bar():
    return _message(tag="a|b")


def _normal_on_fifo_topic():
    return _message(topic="FifoOnly")


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (_oversize, pb.MESSAGE_BODY_TOO_LARGE),
        (lambda: _message(body=b""), pb.MESSAGE_BODY_EMPTY),
        (_reserved, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda: _message(topic=""), pb.ILLEGAL_TOPIC),
        (lambda: _message(topic="../etc"), pb.ILLEGAL_TOPIC),
        (lambda: _message(topic="RMQ_SYS_TRANS_HALF_TOPIC"), pb.ILLEGAL_TOPIC),
        (lambda: _message(topic="Unknown"), pb.TOPIC_NOT_FOUND),
        (lambda: _message(message_id=""), pb.ILLEGAL_MESSAGE_ID),
        (_group_on_normal, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (_normal_on_fifo_topic, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (_far_delay, pb.ILLEGAL_DELIVERY_TIME),
        (_tag_with_bar, pb.ILLEGAL_MESSAGE_TAG),
    ],
)
def test_bad_messages_get_their_code_and_nothing_is_written(services, make, code):
    writer, proxy, *_ = services
    before = _max_offset(writer)
    r = _send(proxy, make())
    assert r.status.code == code, r
    assert [e.status.code for e in r.entries] in ([], [code])
    assert _max_offset(writer) == before


def test_delivery_times_up_to_max_delay_are_taken(services):
    """Beyond the largest delay level (2 h): the writer parks such a message level by level;
    ``--max-delay`` (3 days by default, 90 minutes on the third proxy) bounds it."""
    writer, proxy, _, short = services
    r = _send(proxy, _far_delay(hours=3))
    assert r.status.code == pb.OK, r
    before = _max_offset(writer)
    r = _send(short, _far_delay(hours=2))
    assert r.status.code == pb.ILLEGAL_DELIVERY_TIME and "5400 s ahead" in r.status.message
    assert _max_offset(writer) == before


def test_missing_client_id_is_refused(services):
    writer, proxy, *_ = services
    before = _max_offset(writer)
    r = _send(proxy, _message(), md=())
    assert r.status.code == pb.CLIENT_ID_REQUIRED
    assert _max_offset(writer) == before


def test_a_good_message_is_stored_with_its_id(services):
    writer, proxy, *_ = services
    before = _max_offset(writer)
    r = _send(proxy, _message(keys=["k1"], tag="t"))
    assert r.status.code == pb.OK
    assert [(e.message_id, e.status.code) for e in r.entries] == [(MSG_ID, pb.OK)]
    assert _max_offset(writer) > before


@pytest.mark.parametrize("tid", ["", "not-a-transaction", "zz" * 16, "00" * 16 + "00"])
def test_malformed_transaction_ids_are_invalid_and_write_nothing(services, tid):
    writer, proxy, *_ = services
    before = _max_offset(writer)
    r = _stub(proxy).EndTransaction(
        spb.EndTransactionRequest(topic=pb.Resource(name="Known"), message_id=MSG_ID,
                                  transaction_id=tid, resolution=pb.COMMIT),
        metadata=MD, timeout=10)  # fmt: skip
    assert r.status.code == pb.INVALID_TRANSACTION_ID, r
    assert _max_offset(writer) == before


def test_transaction_id_of_no_half_message_is_invalid(services):
    writer, proxy, *_ = services
    before = _max_offset(writer)
    r = _stub(proxy).EndTransaction(
        spb.EndTransactionRequest(topic=pb.Resource(name="Known"), message_id=MSG_ID,
                                  transaction_id="0" * 32, resolution=pb.COMMIT),
        metadata=MD, timeout=10)  # fmt: skip
    assert r.status.code == pb.INVALID_TRANSACTION_ID, r
    assert _max_offset(writer) == before


def test_transaction_commit_then_repeat_is_ok_once_written(services):
    writer, proxy, *_ = services
    m = _message(keys=["tx"])
    m.system_properties.message_type = pb.TRANSACTION
    r = _send(proxy, m)
    assert r.status.code == pb.OK and len(r.entries[0].transaction_id) == 32
    end = spb.EndTransactionRequest(topic=pb.Resource(name="Known"), message_id=MSG_ID,
                                    transaction_id=r.entries[0].transaction_id,
                                    resolution=pb.COMMIT)  # fmt: skip
    assert _stub(proxy).EndTransaction(end, metadata=MD).status.code == pb.OK
    after = _max_offset(writer)
    assert _stub(proxy).EndTransaction(end, metadata=MD).status.code == pb.OK
    assert _max_offset(writer) == after


def test_route_lists_queue_zero_read_write_on_broker_zero(services):
    _w, proxy, *_ = services
    r = _stub(proxy).QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Known")),
                                metadata=MD, timeout=10)  # fmt: skip
    assert r.status.code == pb.OK
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    q0 = r.message_queues[0]
    assert q0.permission == pb.READ_WRITE and q0.broker.id == 0
    assert q0.broker.endpoints.addresses[0].port == int(proxy.address.rsplit(":", 1)[1])
    assert set(q0.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    r = _stub(proxy).QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Nope")),
                                metadata=MD, timeout=10)  # fmt: skip
    assert r.status.code == pb.TOPIC_NOT_FOUND


def test_settings_reply_has_what_each_client_needs(services):
    _w, proxy, *_ = services
    settings = pb.Settings(client_type=pb.PRODUCER, user_agent=pb.UA(language=pb.NODE_JS))
    calls = _stub(proxy).Telemetry(iter([spb.TelemetryCommand(settings=settings)]),
                                   metadata=MD, timeout=10)  # fmt: skip
    reply = next(calls)
    calls.cancel()
    assert reply.status.code == pb.OK
    assert reply.settings.publishing.max_body_size == 1024
    assert reply.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"


def test_access_keys_checked_when_configured(services):
    writer, _p, secured, _q = services
    before = _max_offset(writer)
    assert _send(secured, _message()).status.code == pb.UNAUTHORIZED
    date = format_date(time.time())
    bad = (*MD, ("x-mq-date-time", date), ("authorization", sign("AK", "wrong", date)))
    assert _send(secured, _message(), md=bad).status.code == pb.UNAUTHORIZED
    assert _max_offset(writer) == before
    head, signature = sign("AK", "SK", date).rsplit("Signature=", 1)
    upper = head + "Signature=" + signature.upper()  # as Node.js signs
    good = (*MD, ("x-mq-date-time", date), ("authorization", upper))
    assert _send(secured, _message(), md=good).status.code == pb.OK


def _receive(proxy, topic="Known", group="G", md=MD, **kw):
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=kw.pop("filter_type", pb.TAG),
                                              expression=kw.pop("expression", "*")),
        batch_size=4, long_polling_timeout=Duration(nanos=200_000_000), **kw,
    )  # fmt: skip
    return list(_stub(proxy).ReceiveMessage(request, metadata=md, timeout=10))


@pytest.mark.parametrize(
    ("kw", "code"),
    [({"group": "bad group"}, pb.ILLEGAL_CONSUMER_GROUP),
     ({"group": "a@b"}, pb.ILLEGAL_CONSUMER_GROUP),
     ({"topic": "Unknown"}, pb.TOPIC_NOT_FOUND), ({"topic": "bad/topic"}, pb.ILLEGAL_TOPIC),
     ({"invisible_duration": Duration(seconds=0)}, pb.ILLEGAL_INVISIBLE_TIME),
     ({"invisible_duration": Duration(seconds=13 * 3600)}, pb.ILLEGAL_INVISIBLE_TIME),
     ({"filter_type": pb.SQL, "expression": "a > 1"}, pb.UNSUPPORTED),
     ({"md": MD[1:]}, pb.CLIENT_ID_REQUIRED),
     ({}, pb.MESSAGE_NOT_FOUND)],  # nothing to receive: answered once the poll is over
)  # fmt: skip
def test_receive_refuses_bad_requests_with_their_code(services, kw, code):
    _w, proxy, *_ = services
    (reply,) = _receive(proxy, **kw)
    assert reply.status.code == code, reply


def test_ack_and_change_with_a_bad_or_stale_receipt_handle_are_refused(services):
    _w, proxy, *_ = services
    for handle in ("nonsense", "0:5:12345", ""):
        ack = _stub(proxy).AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name="G"), topic=pb.Resource(name="Known"),
            entries=[spb.AckMessageEntry(message_id=MSG_ID, receipt_handle=handle)],
        ), metadata=MD, timeout=10)  # fmt: skip
        assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
        assert ack.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        change = _stub(proxy).ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="G"), topic=pb.Resource(name="Known"), receipt_handle=handle,
            invisible_duration=Duration(seconds=1), message_id=MSG_ID,
        ), metadata=MD, timeout=10)  # fmt: skip
        assert change.status.code == pb.INVALID_RECEIPT_HANDLE and not change.receipt_handle


def test_consumption_needs_the_store_and_assignments_follow_the_group(services):
    _w, proxy, _secured, without_store = services
    (reply,) = _receive(without_store)
    assert reply.status.code == pb.INTERNAL_SERVER_ERROR and "--store" in reply.status.message
    known, group = pb.Resource(name="Known"), pb.Resource(name="G")
    request = spb.QueryAssignmentRequest(topic=known, group=group)
    a = _stub(proxy).QueryAssignment(request, metadata=MD, timeout=10)
    assert a.status.code == pb.OK
    assert [x.message_queue.id for x in a.assignments] == [-1]  # a normal group: the broker
    assert a.assignments[0].message_queue.broker.endpoints.addresses


def _half_and_ops(writer, tid):
    """The half record a transaction id names, and the op records written so far."""
    from rmqstore.formats import commitlog as cl
    from rmqstore.layout import TRANS_OP_TOPIC
    from services.proxy.transactions import parse_transaction_id

    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    phy, qoff = parse_transaction_id(tid)
    end = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    offsets, at = [], 0
    while at < end:
        offsets.append(at)
        at += cl.peek(
            stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[at])).records[0]
        ).total_size
    records = [cl.decode(r) for r in stub.ReadRecords(
        commitlog_pb2.ReadRecordsRequest(offsets=offsets)).records]  # fmt: skip
    return qoff, [int(r.body) for r in records if r.topic == TRANS_OP_TOPIC]


def test_a_transaction_no_producer_answers_is_checked_then_rolled_back(services):
    writer, *_, quick = services
    m = _message(keys=["orphan"])
    m.system_properties.message_id = "0102FC0000000136BF0B19630500000001"
    m.system_properties.message_type = pb.TRANSACTION
    r = _send(quick, m)
    assert r.status.code == pb.OK
    tid = r.entries[0].transaction_id
    deadline = time.monotonic() + 60
    while True:  # timeout 0.3 s, two checks 0.2 and 0.4 s apart, then the rollback
        qoff, ops = _half_and_ops(writer, tid)
        if qoff in ops:
            break
        assert time.monotonic() < deadline, "never rolled back"
        time.sleep(0.1)
    stub = service_pb2_grpc.MessagingServiceStub(channel(quick.address))
    late = stub.EndTransaction(spb.EndTransactionRequest(
        topic=pb.Resource(name="Known"), message_id=m.system_properties.message_id,
        transaction_id=tid, resolution=pb.COMMIT), metadata=MD)  # fmt: skip
    assert late.status.code == pb.OK  # already ended: answered, nothing more written
    assert _half_and_ops(writer, tid)[1].count(qoff) == 1


def test_checks_go_to_the_live_producer_over_its_stream(services):
    _w, *_, quick = services
    stub = service_pb2_grpc.MessagingServiceStub(channel(quick.address))
    md = (("x-mq-client-id", "producer@2@0@y"),)
    settings = pb.Settings(
        client_type=pb.PRODUCER,
        user_agent=pb.UA(language=pb.PYTHON),
        publishing=pb.Publishing(topics=[pb.Resource(name="Known")]),
    )
    done = threading.Event()

    def commands():  # a producer keeps its stream open for its whole life
        yield spb.TelemetryCommand(settings=settings)
        done.wait(30)

    stream = stub.Telemetry(commands(), metadata=md, timeout=30)
    assert next(stream).status.code == pb.OK
    m = _message(keys=["checked"])
    m.system_properties.message_id = "0102FC0000000136BF0B19630500000002"
    m.system_properties.message_type = pb.TRANSACTION
    r = _send(quick, m, md=md)
    command = next(stream).recover_orphaned_transaction_command
    assert command.transaction_id == r.entries[0].transaction_id
    assert command.message.system_properties.message_id == m.system_properties.message_id
    assert command.message.system_properties.body_digest.type == pb.MD5
    answer = stub.EndTransaction(spb.EndTransactionRequest(
        topic=pb.Resource(name="Known"), message_id=m.system_properties.message_id,
        transaction_id=command.transaction_id, resolution=pb.COMMIT,
        source=pb.SOURCE_SERVER_CHECK), metadata=md)  # fmt: skip
    assert answer.status.code == pb.OK
    done.set()
    stream.cancel()


def _records_from(writer, start: int, count: int) -> list:
    """The ``count`` records written from commitlog offset ``start``, decoded."""
    from rmqstore.formats import commitlog

    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    out, at = [], start
    for _ in range(count):
        [raw] = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[at])).records
        out.append(commitlog.decode(raw))
        at += out[-1].total_size
    return out


def test_plain_messages_are_stored_as_their_fields_say(services):
    """Messages with no properties, born host or time take the writer's columns path: each
    record still carries its own id, tag, keys and body, and the sender's address."""
    writer, proxy, *_ = services
    before = _max_offset(writer)
    ids = [MSG_ID[:-2] + f"{i:02X}" for i in range(3)]
    messages = [
        _message(body=b"one", message_id=ids[0], tag="t", keys=["k1", "k2"]),
        _message(body=b"two", message_id=ids[1], tag="t"),
        _message(body=b"three", message_id=ids[2]),
    ]
    t0 = int(time.time() * 1000)
    r = _stub(proxy).SendMessage(spb.SendMessageRequest(messages=messages), metadata=MD)
    assert r.status.code == pb.OK, r
    assert [e.message_id for e in r.entries] == ids
    records = _records_from(writer, before, 3)
    assert [(x.topic, x.body, x.uniq_key, x.tags, x.keys) for x in records] == [
        ("Known", b"one", ids[0], "t", "k1 k2"),
        ("Known", b"two", ids[1], "t", ""),
        ("Known", b"three", ids[2], "", ""),
    ]
    assert [x.queue_offset for x in records] == [e.offset for e in r.entries]
    for x in records:
        assert x.born_host.ip == bytes([127, 0, 0, 1]) and x.born_host.port > 0
        assert t0 - 5000 <= x.born_timestamp <= x.store_timestamp
        assert set(x.property_map) <= {"TAGS", "KEYS", "UNIQ_KEY", "CLUSTER"}
