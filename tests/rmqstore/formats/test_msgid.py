"""Message ids (spec §4, TV6, TV7): offset ids and UNIQ_KEY layout."""

import datetime as dt

import pytest

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats.hosts import Host, parse_host
from rmqstore.formats.msgid import (
    UniqKeyGenerator,
    decode_offset_msg_id,
    month_start_ms,
    offset_msg_id,
    offset_msg_ids,
    uniq_key,
    uniq_key_parts,
    uniq_key_time,
)


@pytest.mark.parametrize(
    ("host", "offset", "msg_id"),
    [
        ("192.168.0.1:10911", 1073741924, "C0A8000100002A9F0000000040000064"),
        ("127.0.0.1:9103", 123456, "7F0000010000238F000000000001E240"),
        ("[::1]:10911", 3232, "0000000000000000000000000000000100002A9F0000000000000CA0"),
    ],
)
def test_tv6_offset_msg_id_encode_and_decode(host, offset, msg_id):
    h = parse_host(host)
    assert offset_msg_id(h.ip, h.port, offset) == msg_id
    ip, port, off = decode_offset_msg_id(msg_id)
    assert (ip, port, off) == (h.ip, h.port, offset)
    assert decode_offset_msg_id(msg_id.lower()) == (ip, port, off)  # lower case is accepted


@pytest.mark.parametrize("host", ["192.168.0.1:10911", "127.0.0.1:0", "[::1]:65535"])
def test_many_offset_ids_are_the_ids_made_one_by_one(host):
    h = parse_host(host)
    offsets = [0, 1, 1073741924, 2**32, 2**63 - 1]
    one_by_one = [offset_msg_id(h.ip, h.port, o) for o in offsets]
    assert offset_msg_ids(h.ip, h.port, offsets) == one_by_one
    assert offset_msg_ids(h.ip, h.port, []) == []


def test_tv6_decoded_hosts_print_like_java():
    ip, port, off = decode_offset_msg_id("C0A8000100002A9F0000000040000064")
    assert (str(Host(ip, port)), off) == ("192.168.0.1:10911", 1073741924)
    ip, port, off = decode_offset_msg_id(
        "0000000000000000000000000000000100002A9F0000000000000CA0"
    )
    assert (str(Host(ip, port)), off) == ("[0:0:0:0:0:0:0:1]:10911", 3232)


@pytest.mark.parametrize("bad", ["", "C0A8", "Z" * 32, "C0A8000100002A9F000000004000006", "0" * 40])
def test_malformed_offset_ids_are_invalid_argument(bad):
    with pytest.raises(InvalidArgumentError):
        decode_offset_msg_id(bad)


def test_tv7_uniq_key_layout():
    key = uniq_key(bytes([10, 0, 0, 1]), 12345, 0x12345678, 0xABCD, 1)
    assert key == "0A0000013039123456780000ABCD0001"
    parts = uniq_key_parts(key)
    assert parts.ip == bytes([10, 0, 0, 1]) and parts.pid == 12345
    assert parts.class_loader_hash == 0x12345678
    assert parts.ms_since_month_start == 0xABCD and parts.counter == 1


def test_tv7_truncation():
    key = uniq_key(bytes([10, 0, 0, 1]), 70000, 0x12345678, 2592000000, 65537)
    parts = uniq_key_parts(key)
    assert parts.pid == 0x1170
    assert parts.ms_since_month_start == 0x9A7EC800  # (int)2592000000, read back unsigned
    assert parts.counter == 0x0001
    assert key[8:12] == "1170" and key[20:28] == "9A7EC800" and key[28:] == "0001"


def test_tv7_negative_class_loader_hash_and_ipv6():
    key = uniq_key(bytes(range(16)), 1, -1, 5, 2)
    assert len(key) == 56
    assert uniq_key_parts(key).class_loader_hash == 0xFFFFFFFF
    assert uniq_key_parts(key).ip == bytes(range(16))


def test_generator_counts_and_embeds_time():
    now = int(dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC).timestamp() * 1000)
    gen = UniqKeyGenerator(ip=bytes([10, 0, 0, 1]), pid=70000)
    a, b = gen.next(now), gen.next(now + 5)
    pa, pb = uniq_key_parts(a), uniq_key_parts(b)
    assert pa.pid == pb.pid == 70000 & 0xFFFF
    assert pb.counter == (pa.counter + 1) & 0xFFFF
    assert pa.ms_since_month_start == now - month_start_ms(now)
    assert uniq_key_time(a, now_ms=now + 1000) == now
    # read back early in the next month: the span points past "now", so the month before is used
    next_month = month_start_ms(month_start_ms(now) + 32 * 86_400_000)
    assert uniq_key_time(a, now_ms=next_month + 1000) == now


def test_many_keys_are_the_keys_made_one_by_one():
    now = int(dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC).timestamp() * 1000)
    one, many = UniqKeyGenerator(pid=7), UniqKeyGenerator(pid=7)
    many._loader = one._loader  # the same generator but for its identity
    make = one.at(now)
    singly = [make() for _ in range(70_000)]  # the 16-bit counter wraps
    assert many.many(now, 70_000) == singly and len(set(singly)) == 0x10000
    assert uniq_key_parts(many.many(now, 1)[0]).counter == 70_000 & 0xFFFF
    # a batch that starts five keys below the wrap (``many`` has made one key more so far)
    skip = 0x10000 - 70_001 % 0x10000 - 5
    [make() for _ in range(skip + 1)]
    many.many(now, skip)
    across = [make() for _ in range(100)]
    assert many.many(now, 100) == across
    assert [uniq_key_parts(k).counter for k in across[:7]] == [65_531, 65_532, 65_533, 65_534,
                                                               65_535, 0, 1]  # fmt: skip


def test_uniq_key_time_rejects_bad_ids():
    with pytest.raises(InvalidArgumentError):
        uniq_key_time("abc")
    with pytest.raises(InvalidArgumentError):
        uniq_key_parts("G" * 32)


def test_rocketmq_5_message_id_time():
    from rmqstore.formats.msgid import is_v5_id, v5_id_time

    # 01 | MAC 02FC00000001 | pid 36BF | 0x0B196305 s since 2021-01-01 | sequence 00000000
    mid = "0102FC0000000136BF0B19630500000000"
    assert is_v5_id(mid) and not is_v5_id(mid[:-1]) and not is_v5_id("02" + mid[2:])
    assert v5_id_time(mid) == 1_609_459_200_000 + 0x0B196305 * 1000
