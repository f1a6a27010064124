"""Sends' headers, messages and answers, without a server (``spec`` §3.2, §5)."""

import struct

import pytest

from rmqstore import appender as A
from rmqstore.appender import Plain
from rmqstore.formats import remoting as R
from rmqstore.v1 import common_pb2
from services.remoting import send as S

JAVA_PROPS = (
    "KEYS\x01k-0\x02UNIQ_KEY\x01FD00000000000000000000000000000001\x02WAIT\x01true\x02TAGS\x01TagA"
)
V2 = {"a": "PG", "b": "CapT", "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": "1795817537947",
      "h": "0", "i": JAVA_PROPS, "j": "0", "k": "false", "m": "false", "n": "broker-a"}  # fmt: skip


def test_v2_and_v1_headers_read_alike() -> None:
    v2 = S.parse_header(R.Command(code=R.RequestCode.SEND_MESSAGE_V2, ext=V2))
    v1_ext = {S.V2_NAMES[k]: v for k, v in V2.items()}
    v1 = S.parse_header(R.Command(code=R.RequestCode.SEND_MESSAGE, ext=v1_ext))
    assert v1 == v2
    assert (v2.topic, v2.queue_id, v2.born_timestamp, v2.default_topic_queue_nums) == (
        "CapT", 2, 1795817537947, 4)  # fmt: skip


def test_missing_required_field_is_a_system_error() -> None:
    ext = {k: v for k, v in V2.items() if k != "e"}
    with pytest.raises(S.SendRefused) as e:
        S.parse_header(R.Command(code=R.RequestCode.SEND_MESSAGE_V2, ext=ext))
    assert e.value.code == R.ResponseCode.SYSTEM_ERROR and "queueId" in e.value.remark


def test_java_send_takes_the_fast_path() -> None:
    record = S.to_record("CapT", 2, b"x", JAVA_PROPS, 0, 0, 7, "127.0.0.1:5", 0)
    assert record == Plain("CapT", 2, b"x", "TagA", "k-0", "FD00000000000000000000000000000001",
                           "127.0.0.1:5", 7)  # fmt: skip


def test_ali_ons_send_keeps_no_unique_key_and_user_properties() -> None:
    props = "TAGS\x01TagA\x02KEYS\x01ak-0\x02color\x01red\x02DELAY\x012\x02"  # trailing separator
    record = S.to_record("CapT", 0, b"x", props, 3, 0x1, 7, "127.0.0.1:5", 0)
    assert isinstance(record, common_pb2.Message)
    assert (record.tags, record.keys, record.unique_key, record.without_unique_key) == (
        "TagA", "ak-0", "", True)  # fmt: skip
    assert [(p.name, p.value) for p in record.properties] == [("color", "red")]
    assert (record.flag, record.sys_flag, record.delay_level) == (3, 0x1, 2)


def test_oversize_properties_are_message_illegal() -> None:
    with pytest.raises(S.SendRefused) as e:
        S.to_record("T", 0, b"", "a\x01" + "v" * 40000, 0, 0, 0, "", 0)
    assert e.value.code == R.ResponseCode.MESSAGE_ILLEGAL


def _inner(body: bytes, props: str, flag: int = 0) -> bytes:
    p = props.encode()
    total = 20 + len(body) + 2 + len(p)
    return (
        struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(p)) + p
    )


def test_batch_body_splits_into_its_messages() -> None:
    body = _inner(b"one", "KEYS\x01a") + _inner(b"two", "KEYS\x01b", flag=5)
    assert S.split_batch(body) == [(0, b"one", "KEYS\x01a"), (5, b"two", "KEYS\x01b")]
    with pytest.raises(S.SendRefused):
        S.split_batch(body[:-3])
    with pytest.raises(S.SendRefused):
        S.split_batch(b"")


def test_answer_as_captured_and_statuses_mapped_in_one_place() -> None:
    request = R.Command(code=310, opaque=4)
    ok = S.answer(request, S.PUT_OK, "7F00000100007CA70000000000000000", 2, 0)
    assert ok.code == 0 and ok.opaque == 4 and ok.flag == R.FLAG_RESPONSE
    assert ok.ext == {"queueId": "2", "TRACE_ON": "true", "MSG_REGION": "DefaultRegion",
                      "msgId": "7F00000100007CA70000000000000000", "queueOffset": "0"}  # fmt: skip
    assert S.answer(request, S.FLUSH_SLAVE_TIMEOUT, "x", 0, 0).code == 12
    assert S.answer(request, S.SLAVE_NOT_AVAILABLE, "x", 0, 0).code == 11
    assert S.answer(request, 99, "x", 0, 0).code == R.ResponseCode.SYSTEM_ERROR  # unknown


@pytest.mark.parametrize(("kind", "code"), [
    (A.REFUSED, R.ResponseCode.MESSAGE_ILLEGAL), (A.BUSY, R.ResponseCode.SYSTEM_BUSY),
    (A.UNAVAILABLE, R.ResponseCode.SERVICE_NOT_AVAILABLE)])  # fmt: skip
def test_writer_failures_map_to_rocketmq_codes(kind: str, code: int) -> None:
    assert S.append_refused(kind, "why").code == code
