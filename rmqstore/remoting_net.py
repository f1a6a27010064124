"""RocketMQ 4.x remoting over asyncio TCP: the connection, the server and the client that the
name server and the broker's remoting front end share (frames: ``formats/remoting.py``).

One ``Connection`` carries requests both ways (``spec`` §1.4): the peer's requests are
answered concurrently and out of order (a handler that returns a command answers at once; one
that returns an awaitable is run as a task, so a slow request never holds up the next; one
that returns ``LATER`` answers through ``Connection.respond`` itself, without a task); our
own requests (``invoke``) are matched to their responses by ``opaque``. A frame that does not
decode closes only its connection. Oneway requests are never answered. The frames written
while the requests of one read are taken (their answers made at once) go out in one write,
in the order they were made: one system call and one wake-up of the peer for the lot.
"""

import asyncio
import contextlib
import inspect
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from rmqstore.formats import remoting as R
from rmqstore.formats import remoting_acl

log = logging.getLogger(__name__)

Answer = R.Command | None


class Later:
    """What a handler returns when it will answer through ``Connection.respond`` itself."""


LATER = Later()
Handler = Callable[["Connection", R.Command], Answer | Awaitable[Answer] | Later]
Observer = Callable[[int, int | None, float], None]  # request code, response code, seconds
READ_CHUNK = 256 * 1024
_opaques = itertools.count(1)  # our own requests' opaques, process-wide (as Java's counter)


def parse_namesrv(text: str) -> list[str]:
    """``HOST:PORT;HOST:PORT`` (RocketMQ's namesrvAddr) as a list; ValueError if malformed."""
    out = []
    for part in text.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--namesrv {text!r}: {part!r} is not HOST:PORT")
        out.append(part)
    return out


class RemotingError(Exception):
    """A request of ours that got no answer (timeout, connection lost) or could not be sent."""


def not_supported(request: R.Command) -> R.Command:
    return R.response_to(request, R.ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                         remark=f" request type {request.code} not supported")  # fmt: skip


class Writer(Protocol):
    """What a connection writes through: an ``asyncio.StreamWriter`` or a transport."""

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


def peer_text(writer: Writer) -> str:
    """The peer's ``ip:port`` (``[v6]:port``), or "" when unknown."""
    peer = writer.get_extra_info("peername")
    if not peer:
        return ""
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Connection:
    """One TCP connection speaking remoting frames. ``handler`` answers the peer's requests
    (None: every request is answered REQUEST_CODE_NOT_SUPPORTED). Its bytes come from
    ``reader`` (``run``), or are handed to ``feed`` by the protocol that reads them (a
    server's connections: no task woken per read)."""

    def __init__(
        self,
        reader: asyncio.StreamReader | None,
        writer: Writer,
        handler: Handler | None = None,
        observe: Observer | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.handler = handler
        self.observe = observe
        self.remote = peer_text(writer)
        self.closed = asyncio.Event()
        self._pending: dict[int, asyncio.Future[R.Command]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._started: dict[int, float] = {}  # id of a request answered LATER -> when taken
        self._buf = bytearray()  # the start of a frame not yet whole
        # frames to write once the read's requests are taken
        self._out: list[bytes | memoryview] | None = None
        self.attrs: dict[str, Any] = {}  # what a service keeps about the peer

    async def run(self) -> None:
        """Read frames from ``reader`` until the peer closes or sends one that does not
        decode."""
        assert self.reader is not None
        try:
            while True:
                chunk = await self.reader.read(READ_CHUNK)
                if not chunk:
                    break
                self.feed(chunk)
        except R.FrameError as e:
            log.warning("closing the connection from %s: %s", self.remote, e)
        except (ConnectionError, OSError):
            pass
        finally:
            self.close()

    def feed(self, chunk: bytes) -> None:
        """Bytes read from the peer: the frames they complete taken in order (FrameError for
        one that does not decode)."""
        buf = self._buf
        if buf:
            buf += chunk
            commands, used = R.split(buf)
            del buf[:used]
        else:  # mostly whole frames: decoded from the chunk, nothing copied
            commands, used = R.split(chunk)
            if used < len(chunk):
                buf += chunk[used:]
        if len(commands) == 1:
            self._received(commands[0])
        elif commands:
            self._take(commands)

    def _take(self, commands: list[R.Command]) -> None:
        """The requests of one read, their frames written together."""
        out: list[bytes | memoryview] = []
        self._out = out
        try:
            for cmd in commands:
                self._received(cmd)
        finally:
            self._out = None
            if out and not self.writer.is_closing():
                self.writer.write(b"".join(out))

    def _write(self, head: bytes, body: bytes = b"", pieces: Sequence[bytes | memoryview] = ()
               ) -> None:  # fmt: skip
        if self._out is not None:
            self._out += (head, body)
            if pieces:
                self._out += pieces
        elif pieces:
            self.writer.write(b"".join((head, body, *pieces)))
        else:
            self.writer.write(head + body)

    def _received(self, cmd: R.Command) -> None:
        if cmd.flag & R.FLAG_RESPONSE:
            future = self._pending.pop(cmd.opaque, None)
            if future is not None and not future.done():
                future.set_result(cmd)
            return
        started = time.perf_counter() if self.observe is not None else 0.0
        try:
            answer = self.handler(self, cmd) if self.handler is not None else not_supported(cmd)
        except Exception:
            log.exception("request %s from %s failed", R.code_name(cmd.code), self.remote)
            answer = R.response_to(cmd, R.ResponseCode.SYSTEM_ERROR, remark="internal error")
        if answer is LATER:
            if self.observe is not None:
                self._started[id(cmd)] = started
            return
        if answer is not None and type(answer) is not R.Command and inspect.isawaitable(answer):
            task = asyncio.ensure_future(self._await(cmd, answer, started))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self._answer(cmd, answer, started)  # type: ignore[arg-type]

    async def _await(self, cmd: R.Command, answer: Awaitable[Answer], started: float) -> None:
        try:
            result = await answer
        except Exception:
            log.exception("request %s from %s failed", R.code_name(cmd.code), self.remote)
            result = R.response_to(cmd, R.ResponseCode.SYSTEM_ERROR, remark="internal error")
        self._answer(cmd, result, started)

    def respond(self, cmd: R.Command, answer: Answer | BaseException) -> None:
        """The answer to a request its handler took ``LATER`` (never from inside that
        handler's call); an exception is a failure to log and answer as such."""
        if isinstance(answer, BaseException):
            log.error("request %s from %s failed", R.code_name(cmd.code), self.remote,
                      exc_info=answer)  # fmt: skip
            answer = R.response_to(cmd, R.ResponseCode.SYSTEM_ERROR, remark="internal error")
        started = 0.0
        if self.observe is not None:
            started = self._started.pop(id(cmd), 0.0) or time.perf_counter()
        self._answer(cmd, answer, started)

    def _answer(self, cmd: R.Command, answer: Answer, started: float) -> None:
        if self.observe is not None:
            self.observe(cmd.code, None if answer is None else answer.code,
                         time.perf_counter() - started)  # fmt: skip
        if answer is None or cmd.is_oneway:
            return
        self.send(answer)

    def send(self, cmd: R.Command) -> None:
        if self.writer.is_closing():
            return
        try:
            self._write(R.encode_head(cmd), cmd.body, cmd.pieces)
        except R.FrameError as e:
            log.error("answer to %s too large: %s", self.remote, e)
            self._write(R.encode(R.response_to(cmd, R.ResponseCode.SYSTEM_ERROR,
                                               remark=str(e))))  # fmt: skip

    async def invoke(self, cmd: R.Command, timeout: float) -> R.Command:
        """Send a request of ours; its response (``RemotingError`` if none in ``timeout``)."""
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag = 0
        future: asyncio.Future[R.Command] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = future
        try:
            if self.writer.is_closing():
                raise RemotingError(f"connection to {self.remote} is closed")
            self._write(R.encode(cmd))
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise RemotingError(f"{R.code_name(cmd.code)} to {self.remote}: no answer in "
                                f"{timeout} s") from None  # fmt: skip
        finally:
            self._pending.pop(cmd.opaque, None)

    def oneway(self, cmd: R.Command) -> None:
        """Send a request of ours that is never answered."""
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag = R.FLAG_ONEWAY
        self.send(cmd)

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RemotingError(f"connection to {self.remote} closed"))
        self._pending.clear()
        self._started.clear()
        self.writer.close()


class RemotingServer:
    """Accepts connections on ``host:port`` and serves each with ``handler``: the frames of
    each read are taken in the callback that receives them. ``on_close(conn)`` is called
    when a connection ends."""

    def __init__(
        self,
        handler: Handler,
        observe: Observer | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.handler = handler
        self.observe = observe
        self.on_close = on_close
        self.connections: set[Connection] = set()
        self.address = ""  # host:port once started
        self._none_open = asyncio.Event()
        self._none_open.set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> str:
        """Listen; the bound address as ``host:port``."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Served(self), host, port,
                                                reuse_address=True)  # fmt: skip
        bound = self._server.sockets[0].getsockname()[1]
        self.address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        return self.address

    def _opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self._none_open.clear()

    def _lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if not self.connections:
            self._none_open.set()
        if self.on_close is not None:
            self.on_close(conn)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        with contextlib.suppress(TimeoutError):  # each ends once its transport is closed
            await asyncio.wait_for(self._none_open.wait(), 5)
        if self._server is not None:
            await self._server.wait_closed()


class _Served(asyncio.Protocol):
    """A server's connection: bytes handed to its ``Connection`` as they are read."""

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.conn: Connection | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = Connection(None, transport, self.server.handler, self.server.observe)
        self.server._opened(self.conn)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None
        try:
            conn.feed(data)
        except R.FrameError as e:
            log.warning("closing the connection from %s: %s", conn.remote, e)
            conn.close()

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if conn is None:
            return
        self.conn = None
        conn.close()
        self.server._lost(conn)


class RemotingClient:
    """Requests to one address over one connection, opened on first use and again after it
    broke. ``handler`` answers what the peer asks of us on it; ``keys`` (access key, secret
    key): every request is signed with them (RocketMQ's ACL signature) when given."""

    def __init__(
        self, address: str, handler: Handler | None = None, connect_timeout: float = 3.0,
        keys: tuple[str, str] = ("", ""),
    ) -> None:  # fmt: skip
        self.address = address
        self.handler = handler
        self.connect_timeout = connect_timeout
        self.keys = keys
        self._conn: Connection | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def connection(self) -> Connection:
        async with self._lock:
            if self._conn is not None and not self._conn.closed.is_set():
                return self._conn
            host, _, port = self.address.rpartition(":")
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host.strip("[]"), int(port), limit=R.FRAME_MAX),
                    self.connect_timeout)  # fmt: skip
            except (OSError, TimeoutError, ValueError) as e:
                raise RemotingError(f"cannot connect to {self.address}: {e}") from None
            self._conn = Connection(reader, writer, self.handler)
            self._reader_task = asyncio.ensure_future(self._conn.run())
            return self._conn

    async def invoke(self, cmd: R.Command, timeout: float = 3.0) -> R.Command:
        conn = await self.connection()
        try:
            return await conn.invoke(self._signed(cmd), timeout)
        except RemotingError:
            conn.close()  # as Java: a timed-out request closes its connection
            raise

    async def oneway(self, cmd: R.Command) -> None:
        (await self.connection()).oneway(self._signed(cmd))

    def _signed(self, cmd: R.Command) -> R.Command:
        return remoting_acl.sign(cmd, *self.keys) if self.keys[0] else cmd

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._reader_task is not None:
            await asyncio.gather(self._reader_task, return_exceptions=True)
