"""Puts over a Unix-domain socket: the writer's ``PutStream`` without gRPC, for a client on
the writer's machine (the proxy, when ``rmqstore serve`` runs both).

A gRPC-aio stream costs each side ~150 µs of CPU per request and reply on this project's
machines, most of a one-message put. Here both sides are plain asyncio protocols: a request
is parsed, appended and answered in the callback that received its bytes, with no task,
queue or wake-up in between (under async flush; under sync flush the answer waits for its
group commit, and the requests behind it are appended meanwhile, so they share it). Same
messages, same order, same answers as ``PutStream``: each request is a
``PutBatchRequest``, each answer the ``PutStreamReply`` gRPC would have sent, in request
order. A frame:

┌─────────────────────────┬──────────────────────────────────────────┐
│ length (uint32, BE)     │ the serialized message (length bytes)    │
└─────────────────────────┴──────────────────────────────────────────┘

A refused request is answered with its status and the connection goes on; a connection
the writer cannot serve at all (too many streams, bytes that do not parse, a frame over
``MAX_MESSAGE_BYTES``) gets the answers to the requests before, then one reply with the
status, then is closed. The socket file is made readable and writable by its owner only:
whoever can open it can put. When the writer stops, each connection takes no more requests,
writes the answers of those it took (under sync flush, once their group commit is done;
for up to ``DRAIN_S``), then ends the connection: a put it appended is not reported lost.
"""

import asyncio
import contextlib
import inspect
import logging
import os
import stat
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import grpc

from rmqstore.errors import StoreError
from rmqstore.server import MAX_MESSAGE_BYTES, UNDECODABLE, status_code
from rmqstore.v1 import commitlog_pb2

HEADER = struct.Struct(">I")  # the message's length
AHEAD = 16  # requests appended while earlier answers still wait (sync flush), at most
DRAIN_S = 5.0  # how long a stopping writer waits for the answers its connections owe
log = logging.getLogger(__name__)
Answer = commitlog_pb2.PutStreamReply | Awaitable[commitlog_pb2.PutStreamReply]


class FrameError(Exception):
    """A frame that cannot be taken (too long, or a message that does not parse); ``before``:
    the whole frames that came ahead of it."""

    def __init__(self, message: str, before: list[bytes] | None = None) -> None:
        super().__init__(message)
        self.before = before or []


def frame(payload: bytes) -> bytes:
    """``payload`` with its length in front."""
    return HEADER.pack(len(payload)) + payload


class Frames:
    """Cuts a byte stream into frames: ``feed`` takes bytes as they come and returns the
    messages of the frames they complete."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The messages completed by ``data``; FrameError for a frame over the limit (no
        frame comes after it)."""
        buf = self._buf
        if not buf and len(data) >= HEADER.size:  # as nearly always: whole frames at once
            (size,) = HEADER.unpack_from(data)
            if len(data) == HEADER.size + size and size <= MAX_MESSAGE_BYTES:
                return [data[HEADER.size :]]
        buf += data
        out: list[bytes] = []
        at = 0
        while len(buf) - at >= HEADER.size:
            (size,) = HEADER.unpack_from(buf, at)
            if size > MAX_MESSAGE_BYTES:
                raise FrameError(
                    f"a frame of {size} bytes is over the {MAX_MESSAGE_BYTES}-byte limit", out
                )
            if len(buf) - at - HEADER.size < size:
                break
            out.append(bytes(buf[at + HEADER.size : at + HEADER.size + size]))
            at += HEADER.size + size
        del buf[:at]
        return out

    @property
    def partial(self) -> bool:
        """Whether bytes of an unfinished frame are held."""
        return bool(self._buf)


class Puts(Protocol):
    """What the socket serves: the writer's puts."""

    def open_put_stream(self) -> None:
        """Count a new stream in; a StoreError when no more may open."""

    def close_put_stream(self) -> None:
        """Count a stream out."""

    def answer_put(self, request: commitlog_pb2.PutBatchRequest) -> "Answer":
        """Append ``request``: its reply, or something to await for it; a StoreError raised
        or awaited refuses this request only."""


class PutConnection(asyncio.Protocol):
    """The client side: ``write`` requests, ``read`` their replies in order (None once the
    writer closed the connection), ``cancel`` to drop it. Or, while ``idle``: ``send``
    requests and have their replies handed to a callback as they are read, with no task
    woken for them."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._frames = Frames()
        self._replies: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None  # a read waiting for a reply
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused
        self._closed = False
        self._expected: tuple[int, Callable[[list[bytes] | None], None]] | None = None  # send's

    @classmethod
    async def open(cls, path: str) -> "PutConnection":
        _transport, conn = await asyncio.get_running_loop().create_unix_connection(cls, path)
        return conn

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._replies.extend(self._frames.feed(data))
        except FrameError:
            self.cancel()
        expected = self._expected
        if expected is not None and len(self._replies) >= expected[0]:
            self._expected = None
            expected[1]([self._replies.popleft() for _ in range(expected[0])])
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        expected, self._expected = self._expected, None
        if expected is not None:
            expected[1](None)
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def write(self, request: commitlog_pb2.PutBatchRequest) -> None:
        if self._closed or self._transport is None:
            raise ConnectionResetError("the writer closed the put socket")
        self._transport.write(frame(request.SerializeToString()))
        if self._writable is not None:
            await self._writable

    async def write_many(self, requests: Sequence[commitlog_pb2.PutBatchRequest]) -> None:
        """``write`` each of ``requests``, in one write to the socket."""
        if self._closed or self._transport is None:
            raise ConnectionResetError("the writer closed the put socket")
        self._transport.write(_frames(requests))
        if self._writable is not None:
            await self._writable

    def idle(self) -> bool:
        """Open, writable now, and no reply owed or unread: ``send`` may be called."""
        return (not self._closed and self._transport is not None and self._writable is None
                and self._expected is None and self._waiter is None
                and not self._replies)  # fmt: skip

    def send(self, requests: Sequence[commitlog_pb2.PutBatchRequest],
             replied: Callable[[list[bytes] | None], None]) -> None:  # fmt: skip
        """``write_many`` without waiting (only while ``idle``); ``replied`` is called with
        the replies' bytes, in order, from the callback that reads the last of them, or with
        None if the connection ends first (never from inside this call)."""
        assert self._transport is not None and self.idle()
        self._transport.write(_frames(requests))
        self._expected = (len(requests), replied)

    async def read(self) -> commitlog_pb2.PutStreamReply | None:
        while not self._replies:
            if self._closed:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return commitlog_pb2.PutStreamReply.FromString(self._replies.popleft())

    def cancel(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _reply_bytes(reply: commitlog_pb2.PutStreamReply) -> bytes:
    return frame(reply.SerializeToString())


def _refusal(code: grpc.StatusCode, message: str) -> bytes:
    return _reply_bytes(commitlog_pb2.PutStreamReply(status_code=code.value[0], error=message))


class _Served(asyncio.Protocol):
    """One connection on the writer's side. Answers go out in request order: an answer that
    is ready with nothing before it still waiting is written at once; otherwise it joins
    ``_pending``, which one task writes out in order."""

    def __init__(self, puts: Puts, server: "PutServer") -> None:
        self._puts = puts
        self._server = server
        self._frames = Frames()
        self._transport: asyncio.Transport | None = None
        self._pending: deque[bytes | Awaitable[commitlog_pb2.PutStreamReply]] = deque()
        self._writing: asyncio.Task | None = None  # writes ``_pending`` out
        self._awaited: object = None  # the answer that task waits for now
        self._lost = False  # the connection is gone
        self._counted = False  # counted in as a put stream
        self._ending = False  # no more requests are taken; closed once answers are out
        self._paused = 0  # reasons reading is paused: the socket's buffer, answers waiting
        self._draining = False  # the writer stops: answers out, then end of file
        self._out: list[bytes] | None = None  # answers ready while a read is handled

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._transport = transport
        self._server.opened(self)
        try:
            self._puts.open_put_stream()
        except StoreError as e:
            self._end(_refusal(status_code(e), str(e)))
            return
        self._counted = True

    def data_received(self, data: bytes) -> None:
        """The requests of ``data``, their ready answers written at the end in one write
        (a client's batch of requests, one wake-up of it)."""
        if self._ending:
            return
        self._out = []
        try:
            self._received(data)
        finally:
            self._flush_out()

    def _flush_out(self) -> None:
        out, self._out = self._out, None
        if out and self._transport is not None:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _received(self, data: bytes) -> None:
        error: bytes | None = None
        try:
            messages = self._frames.feed(data)
        except FrameError as e:
            messages, error = e.before, _refusal(grpc.StatusCode.INTERNAL, str(e))
        for message in messages:
            try:
                request = commitlog_pb2.PutBatchRequest.FromString(message)
            except Exception:  # protobuf's DecodeError and friends
                error = _refusal(grpc.StatusCode.INTERNAL, UNDECODABLE)
                break
            self._answer(request)
            if self._ending:  # it failed the connection: nothing after it is taken
                return
        if error is not None:
            self._end(error)

    def _answer(self, request: commitlog_pb2.PutBatchRequest) -> None:
        try:
            reply = self._puts.answer_put(request)
        except StoreError as e:
            self._send(_refusal(status_code(e), str(e)))
            return
        except Exception as e:  # a bug: say so and serve this connection no more
            log.exception("a put on the put socket failed")
            self._end(_refusal(grpc.StatusCode.INTERNAL, f"the writer failed: {e}"))
            return
        if isinstance(reply, commitlog_pb2.PutStreamReply):  # (isawaitable's ABC test costs more)
            self._send(_reply_bytes(reply))
        else:  # a coroutine (sync flush)
            self._send(reply)

    def _send(self, item: bytes | Awaitable[commitlog_pb2.PutStreamReply]) -> None:
        if not self._pending and isinstance(item, bytes):
            assert self._transport is not None
            if self._out is not None:
                self._out.append(item)
            else:
                self._transport.write(item)
            return
        self._pending.append(item)
        if len(self._pending) == AHEAD:
            self._pause(1)
        if self._writing is None:
            self._writing = asyncio.ensure_future(self._write_pending())

    def _end(self, last: bytes) -> None:
        """Take no more requests; close after the answers before and ``last``."""
        self._ending = True
        self._send(last)
        if self._writing is None:  # ``last`` went out already
            self._close()

    async def _write_pending(self) -> None:
        assert self._transport is not None
        try:
            while self._pending:
                item = self._pending[0]
                if not isinstance(item, bytes):
                    self._awaited = item
                    try:
                        item = _reply_bytes(await item)
                    except StoreError as e:
                        item = _refusal(status_code(e), str(e))
                    finally:
                        self._awaited = None
                    if self._lost:  # while it waited (a cancel can come too late to stop it)
                        return
                self._pending.popleft()
                if len(self._pending) == AHEAD - 1:
                    self._pause(-1)
                self._transport.write(item)
        except Exception as e:
            log.exception("answering a put on the put socket failed")
            self._pending.clear()
            self._ending = True
            self._transport.write(_refusal(grpc.StatusCode.INTERNAL, f"the writer failed: {e}"))
        finally:
            self._writing = None
        if self._ending:
            self._close()

    def _pause(self, by: int) -> None:
        if self._draining:  # reading goes on, to discard what the client still sends
            return
        was = self._paused
        self._paused += by
        if self._transport is None or self._transport.is_closing():
            return
        if not was and self._paused:
            self._transport.pause_reading()
        elif was and not self._paused:
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        self._pause(1)

    def resume_writing(self) -> None:
        self._pause(-1)

    def drain(self) -> None:
        """Take no more requests; once the answers of those taken are written, end the
        connection with an end of file (read on until the client closes: closing with its
        requests unread would reset the connection, and could lose those answers)."""
        if self._ending or self._transport is None:
            return
        self._ending = self._draining = True
        if self._paused:
            self._paused = 0
            self._transport.resume_reading()
        if self._writing is None:  # no answer waits
            self._close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _close(self) -> None:
        if self._transport is None:
            return
        self._flush_out()
        if self._draining and self._transport.can_write_eof():
            self._transport.write_eof()  # the client closes; then the connection is lost
        else:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.lost(self)
        self._lost = True
        pending, self._pending = self._pending, deque()
        if self._writing is not None:  # the answer it waits for ends with it
            self._writing.cancel()
        for item in pending:  # answers nobody will read (the puts stay appended)
            if item is self._awaited:
                continue
            if isinstance(item, asyncio.Future):
                item.cancel()
            elif inspect.iscoroutine(item):
                item.close()
        if self._counted:
            self._counted = False
            self._puts.close_put_stream()


class PutServer:
    """A put socket being served: its listening server and the connections open on it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.server: asyncio.Server | None = None
        self.connections: set[_Served] = set()
        self._none_open = asyncio.Event()
        self._none_open.set()

    def opened(self, conn: "_Served") -> None:
        self.connections.add(conn)
        self._none_open.clear()

    def lost(self, conn: "_Served") -> None:
        self.connections.discard(conn)
        if not self.connections:
            self._none_open.set()

    async def drained(self, timeout_s: float) -> bool:
        """Whether every connection closed within ``timeout_s``."""
        try:
            await asyncio.wait_for(self._none_open.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


async def serve(path: str, puts: Puts) -> PutServer:
    """Answer puts on the Unix socket ``path`` (a stale socket file there is replaced; any
    other file is an error)."""
    with contextlib.suppress(FileNotFoundError):
        if not _is_socket(path):
            raise OSError(f"{path} exists and is not a socket")
        os.unlink(path)
    served = PutServer(path)
    loop = asyncio.get_running_loop()
    served.server = await loop.create_unix_server(lambda: _Served(puts, served), path)
    os.chmod(path, 0o600)
    return served


def _is_socket(path: str) -> bool:
    return stat.S_ISSOCK(os.lstat(path).st_mode)


async def close(served: PutServer, grace_s: float = DRAIN_S) -> None:
    """Take no more connections and remove the socket file; each open connection takes no
    more requests, writes the answers it owes and closes (those still open after
    ``grace_s`` are cut)."""
    if served.server is not None:
        served.server.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(served.path)
    for conn in list(served.connections):
        conn.drain()
    if not await served.drained(grace_s):
        log.warning("%d put-socket connections still owed answers after %.0f s: cut",
                    len(served.connections), grace_s)  # fmt: skip
        for conn in list(served.connections):
            conn.abort()


def _frames(requests: Sequence[commitlog_pb2.PutBatchRequest]) -> bytes:
    """The requests' frames, back to back (one write)."""
    return b"".join(frame(r.SerializeToString()) for r in requests)
