"""The remoting frame format against the frames spec/rocketmq-remoting.md shows (captured
between RocketMQ 4.9.8's own programs)."""

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore.formats import remoting as R

ROUTE_REQUEST = (
    bytes.fromhex("00000082 0000007e")
    + b'{"code":105,"extFields":{"topic":"CapT"},"flag":0,"language":"JAVA","opaque":0,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}'
)
HEARTBEAT_RESPONSE = (
    bytes.fromhex("00000063 0000005f")
    + b'{"code":0,"flag":1,"language":"JAVA","opaque":8,"serializeTypeCurrentRPC":"JSON",'
    b'"version":409}'
)
MAX_OFFSET_RESPONSE = (
    bytes.fromhex("0000007f 0000007b")
    + b'{"code":0,"extFields":{"offset":"9"},"flag":1,"language":"JAVA","opaque":11,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}'
)
BENCH_ROUTE_REQUEST = bytes.fromhex(
    "0000002a 01000026 0069 00 0199 00000000 00000000 00000000 00000011 0005 746f706963"
    " 00000006 42656e636854"
)
BENCH_HEARTBEAT_RESPONSE = bytes.fromhex(
    "00000019 01000015 0000 00 0199 000003c6 00000001 00000000 00000000"
)


def test_json_request_decodes_as_captured() -> None:
    assert len(ROUTE_REQUEST) == 134
    assert R.frame_length(ROUTE_REQUEST) == 130
    cmd = R.decode(ROUTE_REQUEST[4:])
    assert cmd.code == R.RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert cmd.ext == {"topic": "CapT"}
    assert (cmd.flag, cmd.opaque, cmd.language, cmd.version) == (0, 0, "JAVA", 409)
    assert cmd.serialize_type == R.JSON and not cmd.is_response and not cmd.is_oneway
    assert cmd.body == b""


@pytest.mark.parametrize("frame", [ROUTE_REQUEST, HEARTBEAT_RESPONSE, MAX_OFFSET_RESPONSE])
def test_json_frames_reencode_byte_for_byte(frame: bytes) -> None:
    assert R.encode(R.decode(frame[4:])) == frame


def test_responses_encode_as_captured() -> None:
    heartbeat = R.Command(code=R.RequestCode.HEART_BEAT, opaque=8)
    assert R.encode(R.response_to(heartbeat)) == HEARTBEAT_RESPONSE
    max_offset = R.Command(code=R.RequestCode.GET_MAX_OFFSET, opaque=11,
                           ext={"topic": "CapT", "queueId": "0"})  # fmt: skip
    assert R.encode(R.response_to(max_offset, ext={"offset": "9"})) == MAX_OFFSET_RESPONSE


def test_binary_request_decodes_as_captured() -> None:
    assert len(BENCH_ROUTE_REQUEST) == 46
    cmd = R.decode(BENCH_ROUTE_REQUEST[4:])
    assert cmd.serialize_type == R.ROCKETMQ
    assert cmd.code == 105 and cmd.language == "JAVA" and cmd.version == 409
    assert cmd.ext == {"topic": "BenchT"} and cmd.remark is None
    assert R.encode(cmd) == BENCH_ROUTE_REQUEST


def test_binary_answer_mirrors_the_request_type() -> None:
    request = R.Command(code=R.RequestCode.HEART_BEAT, opaque=0x3C6, serialize_type=R.ROCKETMQ)
    assert R.encode(R.response_to(request)) == BENCH_HEARTBEAT_RESPONSE
    cmd = R.decode(BENCH_HEARTBEAT_RESPONSE[4:])
    assert cmd.is_response and cmd.opaque == 966 and cmd.ext is None


def test_ali_ons_numeric_and_boolean_ext_fields_become_java_strings() -> None:
    header = (b'{"code":310,"extFields":{"a":"PG","d":4,"k":false,"queueId":0,"i":null},'
              b'"flag":0,"language":"JAVA","opaque":3,"version":121}')  # fmt: skip
    frame = struct.pack(">ii", 4 + len(header) + 2, len(header)) + header + b"hi"
    cmd = R.decode(frame[4:])
    assert cmd.ext == {"a": "PG", "d": "4", "k": "false", "queueId": "0"}
    assert cmd.version == 121 and cmd.body == b"hi"


def test_lenient_json_header() -> None:
    header = b'{"opaque":5,"language":3,"unknown":[1],"code":34}'
    cmd = R.decode(struct.pack(">i", len(header)) + header)
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.flag) == (34, 5, "PYTHON", 0, 0)
    assert cmd.ext is None


def test_properties_control_characters_are_escaped_in_json() -> None:
    cmd = R.Command(code=310, ext={"i": "TAGS\x01TagA\x02KEYS\x01k"})
    frame = R.encode(cmd)
    assert b"TAGS\\u0001TagA\\u0002KEYS\\u0001k" in frame
    assert R.decode(frame[4:]).ext == cmd.ext


def _fastjson_header(cmd: R.Command) -> bytes:
    """The JSON header written by the standard encoder: fastjson's layout (keys sorted,
    compact, nulls left out, non-ASCII as is), ext values as Java strings."""
    obj: dict = {"code": cmd.code, "flag": cmd.flag, "language": cmd.language,
                 "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON", "version": cmd.version}
    if cmd.ext is not None:
        obj["extFields"] = {k: R.java_string(v) for k, v in cmd.ext.items() if v is not None}
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)  # Cs: no UTF-8
_PLAIN = st.text(st.characters(min_codepoint=0x20, exclude_characters='"\\',
                                exclude_categories=["Cs"]), max_size=12)
_EXT_VALUE = st.one_of(_PLAIN, _TEXT, st.none(), st.integers(-(2**40), 2**40), st.booleans())


@settings(max_examples=300, deadline=None)
@given(ext=st.one_of(st.none(), st.dictionaries(_PLAIN | _TEXT, _EXT_VALUE, max_size=6)),
       remark=st.one_of(st.none(), _PLAIN, _TEXT),
       language=st.one_of(st.sampled_from(R.LANGUAGES), _TEXT),
       code=st.integers(-1, 400), opaque=st.integers(-(2**31), 2**31 - 1),
       flag=st.integers(0, 3))  # fmt: skip
def test_json_header_as_the_standard_encoder_writes_it(ext, remark, language, code, opaque,
                                                       flag) -> None:  # fmt: skip
    cmd = R.Command(code=code, opaque=opaque, flag=flag, ext=ext, remark=remark,
                    language=language)  # fmt: skip
    assert R.json_header(cmd) == _fastjson_header(cmd)


def test_json_header_of_a_pull_answer_and_of_escaped_strings() -> None:
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": "32", "minOffset": "0",
           "maxOffset": "100"}  # fmt: skip
    for cmd in (R.Command(code=0, opaque=9, flag=R.FLAG_RESPONSE, ext=ext, remark="FOUND"),
                R.Command(code=0, ext={"k": 'a"b\\c\n'}, remark="x\x01"),
                R.Command(code=R.RequestCode.PULL_MESSAGE, ext={"v": 7, "w": None}),
                R.Command(code=1, ext={}, remark="")):  # fmt: skip
        assert R.json_header(cmd) == _fastjson_header(cmd)


@pytest.mark.parametrize("serialize_type", [R.JSON, R.ROCKETMQ])
def test_round_trip(serialize_type: int) -> None:
    cmd = R.Command(code=R.ResponseCode.TOPIC_NOT_EXIST, opaque=-7, flag=R.FLAG_RESPONSE,
                    ext={"queueId": "2", "msgId": "7F00000100007CA70000000000000000"},
                    remark="No topic route info in name server for the topic: T",
                    body=b"\x00\x01body", serialize_type=serialize_type)  # fmt: skip
    assert R.decode(R.encode(cmd)[4:]) == cmd


def test_binary_zero_length_values_are_null() -> None:
    cmd = R.Command(code=35, ext={"clientID": "c", "producerGroup": ""}, serialize_type=R.ROCKETMQ)
    assert R.decode(R.encode(cmd)[4:]).ext == {"clientID": "c"}


def test_split_takes_whole_frames_only() -> None:
    stream = ROUTE_REQUEST + BENCH_ROUTE_REQUEST + ROUTE_REQUEST[:50]
    cmds, used = R.split(stream)
    assert [c.ext for c in cmds] == [{"topic": "CapT"}, {"topic": "BenchT"}]
    assert used == len(ROUTE_REQUEST) + len(BENCH_ROUTE_REQUEST)
    assert R.split(b"\x00\x00")[1] == 0


@pytest.mark.parametrize("bad", [
    struct.pack(">i", R.FRAME_MAX + 1) + b"\x00" * 4,
    struct.pack(">i", 2) + b"\x00\x00",
    struct.pack(">ii", 8, 0x02000000) + b"{}{}",  # serialize type 2
    struct.pack(">ii", 8, 100) + b"{}{}",  # header longer than the frame
    struct.pack(">ii", 7, 3) + b"{x}",  # not JSON
    struct.pack(">ii", 6, 2) + b"[]",  # JSON, not an object
    struct.pack(">ii", 9, 0x01000005) + b"\x00" * 5,  # binary header cut short
])  # fmt: skip
def test_malformed_frames_raise_frame_error(bad: bytes) -> None:
    with pytest.raises(R.FrameError):
        R.split(bad)


def test_names_and_bodies() -> None:
    assert R.code_name(310) == "SEND_MESSAGE_V2"
    assert R.code_name(17, response=True) == "TOPIC_NOT_EXIST"
    assert R.code_name(9999) == "9999"
    assert R.parse_json_body(b'{"brokerAddrs":{0:"127.0.0.1:10911"}}') == {
        "brokerAddrs": {"0": "127.0.0.1:10911"}
    }
    assert R.json_body({"b": 1, "a": [True]}) == b'{"a":[true],"b":1}'
    assert R.message_queue_key("b", 0, "T") == '{"brokerName":"b","queueId":0,"topic":"T"}'


def test_required_and_numeric_fields_name_what_is_missing():
    cmd = R.Command(code=11, ext={"queueId": "3", "topic": "T", "bad": "x"})
    assert cmd.required("topic") == "T"
    assert cmd.number("queueId") == 3 and cmd.number("maxMsgNums", 32) == 32
    with pytest.raises(ValueError, match="<group> is null"):
        cmd.required("group")
    with pytest.raises(ValueError, match="<sysFlag> is null"):
        cmd.number("sysFlag")
    with pytest.raises(ValueError, match="<bad> is not a number: x"):
        cmd.number("bad")
