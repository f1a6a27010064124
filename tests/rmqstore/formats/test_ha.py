"""HA wire format (spec rocketmq-ha §1–2): reports and transfer frames."""

import pytest

from rmqstore.formats import ha

FILE = 1024 * 1024


def test_report_bytes_and_last_whole_value():
    assert ha.encode_report(0x0102030405060708).hex() == "0102030405060708"
    buf = ha.encode_report(5) + ha.encode_report(9) + b"\x00\x00\x01"
    assert ha.last_report(buf) == (9, 16)  # the partial third value stays
    assert ha.last_report(b"\x00" * 7) == (None, 0)
    with pytest.raises(ValueError):
        ha.encode_report(-1)


def test_frame_header_round_trip_and_heartbeat():
    raw = ha.encode_frame_header(4096, 100)
    assert raw.hex() == "0000000000001000" "00000064"
    assert ha.decode_frame_header(raw) == ha.FrameHeader(4096, 100)
    beat = ha.decode_frame_header(ha.encode_frame_header(77, 0))
    assert beat.is_heartbeat and beat.end == 77


@pytest.mark.parametrize("offset,size", [(-1, 0), (0, ha.MAX_FRAME_BODY + 1), (0, -1)])
def test_bad_frame_headers_refused(offset, size):
    with pytest.raises(ValueError):
        ha.decode_frame_header(ha.FRAME_HEADER.pack(offset, size))


def test_frames_never_exceed_32k_nor_cross_a_file_end():
    assert ha.frame_span(0, 10 * FILE, FILE) == 32 * 1024
    assert ha.frame_span(FILE - 100, 10 * FILE, FILE) == 100
    assert ha.frame_span(FILE, FILE + 10, FILE) == 10
    assert ha.frame_span(50, 50, FILE) == 0


def test_start_offset_empty_slave_gets_last_file():
    assert ha.start_offset(0, 3 * FILE + 500, FILE) == 3 * FILE
    assert ha.start_offset(1234, 3 * FILE + 500, FILE) == 1234
