"""Commitlog record codec (spec §2, TV3, TV4, TV5): bytes, sanity checks, round trips."""

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from rmqstore.formats import properties as p
from rmqstore.formats.hosts import Host, parse_host
from rmqstore.formats.msgid import offset_msg_id

UNIQ = "7F0000010B6E18B4AAC23E9C5AD50000"
TV4_HEX = (
    "000000CD DAA320A7 69C865ED 00000003 00000000 0000000000000005 0000000040000000 00000000"
    " 0000018BCFE56800 C0A8010A0000D431 0000018BCFE5687B C0A8000100002A9F 00000000"
    " 0000000000000000 0000000E 48656C6C6F20526F636B65744D51 09 546F70696354657374 005B"
    " 4B455953016F726465725F3130303836"
    " 02554E49515F4B455901374630303030303130423645313842344141"
    " 433233453943354144353030303002434C5553"
    " 5445520144656661756C74436C757374657202544147530154616741"
)
TV4 = bytes.fromhex(TV4_HEX.replace(" ", ""))


def tv4_record() -> cl.Record:
    props = p.encode({"KEYS": "order_10086", "TAGS": "TagA", "UNIQ_KEY": UNIQ,
                      "CLUSTER": "DefaultCluster"})
    return cl.Record(
        topic="TopicTest", queue_id=3, body=b"Hello RocketMQ", properties=props, flag=0,
        queue_offset=5, physical_offset=1073741824, sys_flag=0, born_timestamp=1700000000000,
        born_host=parse_host("192.168.1.10:54321"), store_timestamp=1700000000123,
        store_host=parse_host("192.168.0.1:10911"), reconsume_times=0,
        prepared_transaction_offset=0,
    )


@pytest.mark.parametrize(
    ("body", "crc"),
    [(b"", 0), (b"hello", 907060870), (b"123456789", 1274296614),
     (b"Hello RocketMQ", 1774740973), (b"hello!q!", 1020379427)],
)
def test_tv3_masked_body_crc(body, crc):
    assert cl.body_crc(body) == crc


def test_tv4_encode_byte_for_byte():
    assert len(TV4) == 205
    assert cl.encode(tv4_record()) == TV4


def test_tv4_decode_every_field():
    r = cl.decode(TV4)
    assert r.total_size == 205 and r.magic == cl.MAGIC_V1
    assert r.body_crc == 1774740973
    assert (r.topic, r.queue_id, r.flag, r.queue_offset) == ("TopicTest", 3, 0, 5)
    assert r.physical_offset == 1073741824 and r.sys_flag == 0
    assert r.born_timestamp == 1700000000000 and r.store_timestamp == 1700000000123
    assert str(r.born_host) == "192.168.1.10:54321"
    assert str(r.store_host) == "192.168.0.1:10911"
    assert r.reconsume_times == 0 and r.prepared_transaction_offset == 0
    assert r.body == b"Hello RocketMQ"
    assert r.tags == "TagA" and r.keys == "order_10086" and r.uniq_key == UNIQ
    assert offset_msg_id(r.store_host.ip, r.store_host.port, r.physical_offset) == (
        "C0A8000100002A9F0000000040000000"
    )
    assert cl.record_size(len(r.body), 9, 91) == 205


def test_tv4_size_formula():
    assert cl.record_size(0, 0, 0) == 91
    assert cl.record_size(0, 0, 0, cl.BORNHOST_V6_FLAG | cl.STOREHOST_V6_FLAG) == 115
    assert cl.record_size(0, 0, 0, 0, cl.MAGIC_V2) == 92


def test_tv5_blank_record():
    seg = bytearray(b"\xee" * 24)
    seg[0:8] = cl.blank(24)
    assert bytes(seg[:8]).hex() == "00000018cbd43194"
    assert seg[8:] == b"\xee" * 16  # the 16 bytes after the marker are not touched
    end, blank, err = commitlog_segment.scan_end(bytes(seg))
    assert (end, blank, err) == (0, commitlog_segment.Blank(0, 24), None)
    assert list(commitlog_segment.iter_segment(bytes(seg))) == []


@pytest.mark.parametrize("v6", [(False, True), (True, False), (True, True)])
def test_ipv6_hosts_round_trip(v6):
    r = tv4_record()
    if v6[0]:
        r.born_host = parse_host("[2001:db8::1]:54321")
    if v6[1]:
        r.store_host = parse_host("[::1]:10911")
    data = cl.encode(r)
    back = cl.decode(data)
    flags = (cl.BORNHOST_V6_FLAG if v6[0] else 0) | (cl.STOREHOST_V6_FLAG if v6[1] else 0)
    assert back.sys_flag == flags
    assert len(data) == 205 + 12 * sum(v6)
    assert back.born_host == r.born_host and back.store_host == r.store_host
    assert cl.store_timestamp_at(back.sys_flag) == (68 if v6[0] else 56)
    assert struct.unpack_from(">q", data, cl.store_timestamp_at(back.sys_flag))[0] == (
        1700000000123
    )
    assert cl.encode(back) == data


def test_patch_fills_writer_fields():
    buf = bytearray(cl.encode(tv4_record()))
    cl.patch(buf, 0, 77, 12345, 1700000009999, 0)
    r = cl.decode(buf)
    assert (r.queue_offset, r.physical_offset, r.store_timestamp) == (77, 12345, 1700000009999)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.__setitem__(slice(4, 8), b"\0\0\0\0"), "magic"),
        (lambda b: b.__setitem__(slice(0, 4), (300).to_bytes(4, "big")), "runs past"),
        (lambda b: b.__setitem__(slice(0, 4), (204).to_bytes(4, "big")), "does not match"),
        (lambda b: b.__setitem__(100, b[100] ^ 1), "CRC"),
        (lambda b: b.__setitem__(102, 0x80), "negative topic length"),
    ],
)
def test_corruption_is_typed_and_located(mutate, reason):
    buf = bytearray(TV4)
    mutate(buf)
    with pytest.raises(CorruptRecordError, match=reason) as e:
        cl.decode(bytes(buf), base_offset=4096)
    assert e.value.offset == 4096
    assert e.value.grpc_status == "DATA_LOSS"


def test_crc_check_can_be_skipped():
    buf = bytearray(TV4)
    buf[100] ^= 1
    assert cl.decode(bytes(buf), check_crc=False).body != b"Hello RocketMQ"


def test_encode_refuses_oversize_topic_and_properties():
    r = tv4_record()
    r.topic = "t" * 128
    with pytest.raises(CorruptRecordError, match="128 bytes"):
        cl.encode(r)
    r = tv4_record()
    r.properties = "k\x01" + "v" * 32766
    with pytest.raises(CorruptRecordError, match="32768"):
        cl.encode(r)


def test_transaction_type():
    assert cl.transaction_type(0x1C) == cl.TRANSACTION_ROLLBACK_TYPE
    assert cl.transaction_type(0x29) == cl.TRANSACTION_COMMIT_TYPE


_ipv4 = st.binary(min_size=4, max_size=4)
_ipv6 = st.binary(min_size=16, max_size=16)
_host = st.builds(Host, st.one_of(_ipv4, _ipv6), st.integers(0, 65535))
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_name = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                min_size=1, max_size=12)
_records = st.builds(
    cl.Record,
    topic=st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    queue_id=_int32,
    body=st.binary(max_size=300),
    properties=st.dictionaries(_name, _name, max_size=6).map(p.encode),
    flag=_int32,
    queue_offset=_int64,
    physical_offset=_int64,
    sys_flag=_int32,
    born_timestamp=_int64,
    born_host=_host,
    store_timestamp=_int64,
    store_host=_host,
    reconsume_times=_int32,
    prepared_transaction_offset=_int64,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records)
def test_encode_decode_encode_is_identical(r):
    data = cl.encode(r)
    back = cl.decode(data)
    assert cl.encode(back) == data
    assert back.total_size == len(data)
    assert (back.topic, back.body, back.properties) == (r.topic, r.body, r.properties)
    assert (back.born_host, back.store_host) == (r.born_host, r.store_host)
    assert back.body_crc == cl.body_crc(r.body)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 64))
def test_random_bytes_only_raise_corrupt_record(data, at):
    with contextlib.suppress(CorruptRecordError):
        cl.decode(data, min(at, len(data)))
    end, _, err = commitlog_segment.scan_end(data)  # reports a bad record, never raises
    assert 0 <= end <= len(data)
    assert err is None or isinstance(err, CorruptRecordError)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 204), st.integers(0, 255))
def test_any_single_byte_change_in_tv4_decodes_or_raises_typed(pos, value):
    buf = bytearray(TV4)
    buf[pos] = value
    try:
        r = cl.decode(bytes(buf))
    except CorruptRecordError as e:
        assert e.offset == 0
    else:
        assert r.total_size == 205


@given(st.binary(max_size=5000), st.integers(0, 64))
def test_body_crc_is_zlibs_crc32(data, skip):
    """The CRC in use (ISA-L's where installed) is zlib's CRC-32, on bytes and on views."""
    import zlib

    view = memoryview(data)[min(skip, len(data)) :]
    assert cl.crc32(data) == zlib.crc32(data) and cl.crc32(view) == zlib.crc32(view)
    assert cl.body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF
