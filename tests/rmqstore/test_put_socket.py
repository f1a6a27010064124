"""The put socket's framing (the writer's side is tested with the writer, the proxy's with
the proxy)."""

import asyncio

import pytest

from rmqstore import put_socket
from rmqstore.server import MAX_MESSAGE_BYTES


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_frames_round_trip_and_end_cleanly_between_frames():
    async def frames(data):
        reader, out = _reader(data), []
        while (f := await put_socket.read_frame(reader)) is not None:
            out.append(f)
        return out

    data = put_socket.frame(b"one") + put_socket.frame(b"") + put_socket.frame(b"x" * 70_000)
    assert data[:4] == b"\x00\x00\x00\x03"  # big-endian length first
    assert asyncio.run(frames(data)) == [b"one", b"", b"x" * 70_000]


def test_a_cut_frame_and_an_oversized_one_are_errors():
    async def first(data):
        return await put_socket.read_frame(_reader(data))

    cut = put_socket.frame(b"abcdef")[:-2]
    with pytest.raises(asyncio.IncompleteReadError):
        asyncio.run(first(cut))
    with pytest.raises(asyncio.IncompleteReadError):  # cut inside the header
        asyncio.run(first(b"\x00\x00"))
    huge = put_socket.HEADER.pack(MAX_MESSAGE_BYTES + 1)
    with pytest.raises(put_socket.FrameError, match="over the"):
        asyncio.run(first(huge))
