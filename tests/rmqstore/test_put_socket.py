"""The put socket's framing (the writer's side is tested with the writer, the proxy's with
the proxy)."""

import pytest

from rmqstore import put_socket
from rmqstore.server import MAX_MESSAGE_BYTES


def test_frames_come_whole_however_the_bytes_are_cut():
    data = put_socket.frame(b"one") + put_socket.frame(b"") + put_socket.frame(b"x" * 70_000)
    assert data[:4] == b"\x00\x00\x00\x03"  # big-endian length first
    whole = [b"one", b"", b"x" * 70_000]
    assert put_socket.Frames().feed(data) == whole
    for cut in (1, 2, 5, 8, 12, 100, len(data) - 1):  # in two pieces, inside a frame
        frames = put_socket.Frames()
        first = frames.feed(data[:cut])
        assert frames.partial
        assert first + frames.feed(data[cut:]) == whole
        assert not frames.partial
    frames = put_socket.Frames()  # a byte at a time
    assert [f for i in range(len(data)) for f in frames.feed(data[i : i + 1])] == whole
    assert put_socket.Frames().feed(put_socket.frame(b"solo")) == [b"solo"]


def test_an_oversized_frame_is_an_error():
    huge = put_socket.HEADER.pack(MAX_MESSAGE_BYTES + 1)
    with pytest.raises(put_socket.FrameError, match="over the"):
        put_socket.Frames().feed(huge)
    frames = put_socket.Frames()
    frames.feed(put_socket.frame(b"ok")[:3])
    with pytest.raises(put_socket.FrameError, match="over the") as e:
        frames.feed(put_socket.frame(b"ok")[3:] + huge + b"rest")
    assert e.value.before == [b"ok"]  # what came whole ahead of it
