"""The remoting connection the name server and the broker share: requests of one connection
answered concurrently and out of order, oneways never answered, requests made by the server
on a client's connection (as CHECK_TRANSACTION_STATE is), and the client's reconnection."""

import asyncio

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import (
    LATER,
    Connection,
    RemotingClient,
    RemotingError,
    RemotingServer,
)

SLOW, FAST, ONEWAY_SEEN = 1001, 1002, 1003


def test_answers_out_of_order_and_oneways_unanswered() -> None:
    async def main() -> None:
        release = asyncio.Event()
        seen: list[int] = []

        async def slow(req: R.Command) -> R.Command:
            await release.wait()
            return R.response_to(req, ext={"who": "slow"})

        def handler(conn: Connection, req: R.Command) -> object:
            seen.append(req.code)
            if req.code == SLOW:
                return slow(req)
            return R.response_to(req, ext={"who": "fast"})

        server = RemotingServer(handler)  # type: ignore[arg-type]
        address = await server.start("127.0.0.1", 0)
        client = RemotingClient(address)
        slow_call = asyncio.ensure_future(client.invoke(R.Command(code=SLOW), 30))
        await client.oneway(R.Command(code=ONEWAY_SEEN))
        fast = await client.invoke(R.Command(code=FAST), 30)
        assert fast.ext == {"who": "fast"} and not slow_call.done()
        release.set()
        assert (await slow_call).ext == {"who": "slow"}
        assert sorted(seen) == [SLOW, FAST, ONEWAY_SEEN]
        await client.close()
        await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_request_taken_later_is_answered_through_respond_and_observed() -> None:
    """A handler returning LATER answers when it calls ``respond``: after a later request's
    answer, a failure as SYSTEM_ERROR "internal error"; each observed once, with its code."""

    async def main() -> None:
        held: list[tuple[Connection, R.Command]] = []
        observed: list[tuple[int, int | None]] = []

        def handler(conn: Connection, req: R.Command) -> object:
            if req.code == SLOW:
                held.append((conn, req))
                return LATER
            return R.response_to(req, ext={"who": "fast"})

        server = RemotingServer(handler, lambda code, answer, _s: observed.append((code, answer)))  # type: ignore[arg-type]
        address = await server.start("127.0.0.1", 0)
        client = RemotingClient(address)
        later = [asyncio.ensure_future(client.invoke(R.Command(code=SLOW), 30)) for _ in range(2)]
        assert (await client.invoke(R.Command(code=FAST), 30)).ext == {"who": "fast"}
        assert not any(c.done() for c in later) and len(held) == 2
        conn, req = held[0]
        conn.respond(req, R.response_to(req, ext={"who": "later"}))
        conn, req = held[1]
        conn.respond(req, RuntimeError("a bug"))
        ok, failed = await asyncio.gather(*later)
        assert ok.ext == {"who": "later"}
        assert failed.code == R.ResponseCode.SYSTEM_ERROR and failed.remark == "internal error"
        assert sorted(observed) == [(SLOW, 0), (SLOW, 1), (FAST, 0)]
        await client.close()
        await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_requests_read_together_are_answered_in_their_order_byte_for_byte() -> None:
    """Frames sent in one write (read at once, their answers written together): every
    request answered, in order, each answer's frame as ``encode`` makes it; a oneway still
    unanswered, a failing handler still SYSTEM_ERROR, a large body whole."""

    async def main() -> None:
        big = bytes(range(256)) * 1024

        def handler(conn: Connection, req: R.Command) -> R.Command:
            if req.code == SLOW:
                raise RuntimeError("boom")
            body = big if req.code == FAST else b""
            return R.response_to(req, ext={"n": str(req.opaque)}, body=body)

        server = RemotingServer(handler)  # type: ignore[arg-type]
        address = await server.start("127.0.0.1", 0)
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        requests = [R.Command(code=FAST, opaque=1), R.Command(code=7, opaque=2),
                    R.Command(code=ONEWAY_SEEN, opaque=3, flag=R.FLAG_ONEWAY),
                    R.Command(code=SLOW, opaque=4),
                    R.Command(code=8, opaque=5, serialize_type=R.ROCKETMQ)]  # fmt: skip
        writer.write(b"".join(R.encode(r) for r in requests))
        expected = [
            R.encode(R.response_to(requests[0], ext={"n": "1"}, body=big)),
            R.encode(R.response_to(requests[1], ext={"n": "2"})),
            R.encode(R.response_to(requests[3], R.ResponseCode.SYSTEM_ERROR,
                                   remark="internal error")),  # fmt: skip
            R.encode(R.response_to(requests[4], ext={"n": "5"})),
        ]
        got = await reader.readexactly(sum(map(len, expected)))
        assert got == b"".join(expected)
        writer.close()
        await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_server_asks_the_client_on_its_connection() -> None:
    async def main() -> None:
        connections: list[Connection] = []

        def server_side(conn: Connection, req: R.Command) -> R.Command:
            connections.append(conn)
            return R.response_to(req)

        def client_side(conn: Connection, req: R.Command) -> R.Command:
            return R.response_to(req, ext={"answered": str(req.code)})

        server = RemotingServer(server_side)
        client = RemotingClient(await server.start("127.0.0.1", 0), client_side)
        await client.invoke(R.Command(code=R.RequestCode.HEART_BEAT), 30)
        answer = await connections[0].invoke(R.Command(code=307), 30)
        assert answer.ext == {"answered": "307"}
        await client.close()
        await server.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_client_reconnects_after_the_server_closed_its_connection() -> None:
    async def main() -> None:
        server = RemotingServer(lambda conn, req: R.response_to(req))
        address = await server.start("127.0.0.1", 0)
        client = RemotingClient(address)
        assert (await client.invoke(R.Command(code=1), 30)).code == 0
        for conn in list(server.connections):
            conn.close()
        while True:  # the client sees the close, then opens a new connection
            try:
                assert (await client.invoke(R.Command(code=1), 30)).code == 0
                break
            except RemotingError:
                await asyncio.sleep(0.01)
        await client.close()
        await server.close()
        try:
            await RemotingClient(address, connect_timeout=5).invoke(R.Command(code=1), 5)
        except RemotingError as e:
            assert "cannot connect" in str(e)
        else:
            raise AssertionError("a closed server answered")

    asyncio.run(asyncio.wait_for(main(), 60))


def test_frames_cut_anywhere_are_taken_whole_and_a_bad_one_closes_only_its_connection() -> None:
    """The server takes each read's frames as they come: a frame in pieces, several in one
    write; a frame that does not decode closes its connection (``on_close`` called), and
    the server goes on serving the others."""

    async def read_answer(reader: asyncio.StreamReader) -> R.Command:
        prefix = await reader.readexactly(4)
        return R.decode(await reader.readexactly(R.frame_length(prefix)))

    async def main() -> None:
        closed: list[Connection] = []
        server = RemotingServer(lambda conn, req: R.response_to(req, ext={"n": str(req.opaque)}),
                                on_close=closed.append)  # fmt: skip
        host, port = (await server.start("127.0.0.1", 0)).rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        frames = [R.encode(R.Command(code=FAST, opaque=i)) for i in (1, 2, 3)]
        for i in range(len(frames[0])):  # a byte at a time
            writer.write(frames[0][i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        writer.write(frames[1] + frames[2][:5])  # one and a piece of the next
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(frames[2][5:])
        answers = [await read_answer(reader) for _ in range(3)]
        assert [a.ext for a in answers] == [{"n": "1"}, {"n": "2"}, {"n": "3"}]
        other = RemotingClient(f"{host}:{port}")
        writer.write(b"\x00\x00\x00\x02xx")  # shorter than a header word
        assert await reader.read() == b""  # closed
        await asyncio.wait_for(_until(lambda: len(closed) == 1), 5)
        assert (await other.invoke(R.Command(code=FAST), 30)).ext is not None
        writer.close()
        await other.close()
        await server.close()
        assert len(closed) == 2 and not server.connections

    asyncio.run(asyncio.wait_for(main(), 60))


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await asyncio.sleep(0.01)
