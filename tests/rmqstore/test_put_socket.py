"""The put socket's framing (the writer's side is tested with the writer, the proxy's with
the proxy)."""

import asyncio

import grpc
import pytest

from rmqstore import put_socket
from rmqstore.server import MAX_MESSAGE_BYTES
from rmqstore.v1 import commitlog_pb2, common_pb2


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


class _Puts:
    """What the socket serves, kept in memory: appends each request's message count, and
    fails (as a bug would) on a request with ``fail`` as its first message's topic."""

    def __init__(self) -> None:
        self.appended: list[int] = []
        self.open = 0

    def open_put_stream(self) -> None:
        self.open += 1

    def close_put_stream(self) -> None:
        self.open -= 1

    def answer_put(self, request):
        if request.messages and request.messages[0].topic == "fail":
            raise RuntimeError("boom")
        self.appended.append(len(request.messages))
        return commitlog_pb2.PutStreamReply(
            response=commitlog_pb2.PutBatchResponse(
                columns=commitlog_pb2.PutResultColumns(phy_offset=[len(self.appended)])))


def test_a_failing_put_ends_the_connection_and_nothing_after_it_is_taken(tmp_path):
    def request(topic: str) -> commitlog_pb2.PutBatchRequest:
        return commitlog_pb2.PutBatchRequest(messages=[common_pb2.Message(topic=topic)])

    async def run(puts: _Puts) -> list:
        path = str(tmp_path / "p.sock")
        server = await put_socket.serve(path, puts)
        try:
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"".join(  # in one write: one read on the server's side
                put_socket.frame(request(t).SerializeToString()) for t in ("a", "fail", "b")))
            replies = []
            while not reader.at_eof():
                try:
                    (size,) = put_socket.HEADER.unpack(
                        await reader.readexactly(put_socket.HEADER.size))
                except asyncio.IncompleteReadError as e:
                    assert not e.partial  # the connection ends between replies
                    break
                replies.append(commitlog_pb2.PutStreamReply.FromString(
                    await reader.readexactly(size)))  # fmt: skip
            writer.close()
            return replies  # until the server closed the connection
        finally:
            await put_socket.close(server)

    puts = _Puts()
    first, failed = asyncio.run(run(puts))  # and nothing for "b"
    assert not first.status_code and list(first.response.columns.phy_offset) == [1]
    assert failed.status_code == grpc.StatusCode.INTERNAL.value[0]
    assert "the writer failed: boom" in failed.error
    assert puts.appended == [1] and puts.open == 0  # "b" never taken; the stream counted out


class _DurablePuts(_Puts):
    """Answers each put once ``durable`` is set, as under sync flush."""

    def __init__(self) -> None:
        super().__init__()
        self.durable = asyncio.Event()

    def answer_put(self, request):
        reply = super().answer_put(request)

        async def once_durable():
            await self.durable.wait()
            return reply

        return once_durable()


def test_a_stopping_writer_answers_the_puts_it_took_then_closes(tmp_path):
    request = commitlog_pb2.PutBatchRequest(messages=[common_pb2.Message(topic="a")])

    async def run(puts: _DurablePuts) -> tuple[list, bool]:
        path = str(tmp_path / "p.sock")
        server = await put_socket.serve(path, puts)
        conn = await put_socket.PutConnection.open(path)
        for _ in range(3):
            await conn.write(request)
        while len(puts.appended) < 3:  # taken, answers owed
            await asyncio.sleep(0.01)
        closing = asyncio.ensure_future(put_socket.close(server))
        await asyncio.sleep(0)  # the stop begins: the connection takes no more requests
        await conn.write(request)  # in the writer's socket before any answer: not taken
        await asyncio.sleep(0)
        waited = not closing.done()  # the stop waits for the answers it owes
        puts.durable.set()
        replies = [await conn.read() for _ in range(4)]
        await asyncio.wait_for(closing, 5)
        return replies, waited

    puts = _DurablePuts()
    replies, waited = asyncio.run(run(puts))
    assert waited
    assert [list(r.response.columns.phy_offset) for r in replies[:3] if r] == [[1], [2], [3]]
    assert replies[3] is None  # then the connection ended
    assert puts.appended == [1, 1, 1] and puts.open == 0


def test_a_stop_cuts_answers_owed_past_its_grace(tmp_path):
    request = commitlog_pb2.PutBatchRequest(messages=[common_pb2.Message(topic="a")])

    async def run(puts: _DurablePuts) -> object:
        path = str(tmp_path / "p.sock")
        server = await put_socket.serve(path, puts)
        conn = await put_socket.PutConnection.open(path)
        await conn.write(request)
        while not puts.appended:
            await asyncio.sleep(0.01)
        await put_socket.close(server, grace_s=0.2)  # never durable: cut after 0.2 s
        return await asyncio.wait_for(conn.read(), 5)

    puts = _DurablePuts()
    assert asyncio.run(run(puts)) is None
    assert puts.open == 0


def test_sent_requests_are_answered_through_the_callback_or_with_none_once_cut(tmp_path):
    """``send``: the replies of all its requests reach the callback at once, in order, never
    from inside the call; the connection is not ``idle`` while they are owed; a connection
    that ends first calls back with None."""
    request = commitlog_pb2.PutBatchRequest(messages=[common_pb2.Message(topic="a")])

    async def run(puts: _DurablePuts) -> tuple[list, bool, bool, list]:
        path = str(tmp_path / "p.sock")
        server = await put_socket.serve(path, puts)
        conn = await put_socket.PutConnection.open(path)
        got: list = []
        answered = asyncio.Event()

        def replied(replies: list[bytes] | None) -> None:
            got.append(replies)
            answered.set()

        puts.durable.set()
        assert conn.idle()
        conn.send([request, request], replied)
        busy, early = not conn.idle(), bool(got)
        await asyncio.wait_for(answered.wait(), 5)
        first = [list(commitlog_pb2.PutStreamReply.FromString(r).response.columns.phy_offset)
                 for r in got[0]]  # fmt: skip
        assert conn.idle()
        puts.durable.clear()  # the next one is taken, never answered
        answered.clear()
        conn.send([request], replied)
        async def taken() -> None:
            while len(puts.appended) < 3:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(taken(), 10)
        await put_socket.close(server, grace_s=0.2)
        await asyncio.wait_for(answered.wait(), 5)
        return first, busy, early, got[1:]

    first, busy, early, cut = asyncio.run(run(_DurablePuts()))
    assert first == [[1], [2]] and busy and not early
    assert cut == [None]  # the writer cut the connection before answering
