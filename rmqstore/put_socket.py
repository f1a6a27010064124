"""Puts over a Unix-domain socket: the writer's ``PutStream`` without gRPC, for a client on
the writer's machine (the proxy, when ``rmqstore serve`` runs both).

A gRPC-aio stream costs each side ~150 µs of CPU per request and reply on this project's
machines, most of a one-message put; this framing costs ~20. Same messages, same order,
same answers as ``PutStream``: each request is a ``PutBatchRequest``, each answer the
``PutStreamReply`` gRPC would have sent, in request order. A frame:

┌─────────────────────────┬──────────────────────────────────────────┐
│ length (uint32, BE)     │ the serialized message (length bytes)    │
└─────────────────────────┴──────────────────────────────────────────┘

A refused request is answered with its status and the connection goes on; a connection
the writer cannot serve at all (too many streams, bytes that do not parse, a frame over
``MAX_MESSAGE_BYTES``) gets one reply with the status, then is closed. The socket file is
made readable and writable by its owner only: whoever can open it can put.
"""

import asyncio
import contextlib
import os
import stat
import struct
from collections.abc import AsyncIterator, Callable

import grpc

from rmqstore.errors import StoreError
from rmqstore.server import MAX_MESSAGE_BYTES, UNDECODABLE, status_code
from rmqstore.v1 import commitlog_pb2

HEADER = struct.Struct(">I")  # the message's length
Replies = Callable[[AsyncIterator[commitlog_pb2.PutBatchRequest]],
                   AsyncIterator[commitlog_pb2.PutStreamReply]]  # fmt: skip


class FrameError(Exception):
    """A frame that cannot be taken (too long, or a message that does not parse)."""


def frame(payload: bytes) -> bytes:
    """``payload`` with its length in front."""
    return HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's message bytes; None at a clean end of the stream (between frames)."""
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    (size,) = HEADER.unpack(head)
    if size > MAX_MESSAGE_BYTES:
        raise FrameError(f"a frame of {size} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    return await reader.readexactly(size)


class PutConnection:
    """The client side: ``write`` requests, ``read`` their replies in order (None when the
    writer closed the connection), ``cancel`` to drop it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, path: str) -> "PutConnection":
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
        return cls(reader, writer)

    async def write(self, request: commitlog_pb2.PutBatchRequest) -> None:
        self._writer.write(frame(request.SerializeToString()))
        await self._writer.drain()

    async def read(self) -> commitlog_pb2.PutStreamReply | None:
        try:
            data = await read_frame(self._reader)
        except (asyncio.IncompleteReadError, FrameError, OSError):
            return None
        return None if data is None else commitlog_pb2.PutStreamReply.FromString(data)

    def cancel(self) -> None:
        self._writer.close()


def _refusal(code: grpc.StatusCode, message: str) -> bytes:
    return frame(commitlog_pb2.PutStreamReply(status_code=code.value[0], error=message)
                 .SerializeToString())  # fmt: skip


async def _serve_one(replies: Replies, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:  # fmt: skip
    async def requests() -> AsyncIterator[commitlog_pb2.PutBatchRequest]:
        while (data := await read_frame(reader)) is not None:
            try:
                yield commitlog_pb2.PutBatchRequest.FromString(data)
            except Exception:  # protobuf's DecodeError and friends
                raise FrameError(UNDECODABLE) from None

    try:
        async for reply in replies(requests()):
            writer.write(frame(reply.SerializeToString()))
            await writer.drain()
    except StoreError as e:
        writer.write(_refusal(status_code(e), str(e)))
    except FrameError as e:
        writer.write(_refusal(grpc.StatusCode.INTERNAL, str(e)))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client went away mid-frame: nothing to answer
    finally:
        with contextlib.suppress(ConnectionError):
            writer.close()
            await writer.wait_closed()


async def serve(path: str, replies: Replies) -> asyncio.Server:
    """Answer puts on the Unix socket ``path`` (a stale socket file there is replaced; any
    other file is an error): each connection's requests go through ``replies``."""
    with contextlib.suppress(FileNotFoundError):
        if not _is_socket(path):
            raise OSError(f"{path} exists and is not a socket")
        os.unlink(path)
    server = await asyncio.start_unix_server(
        lambda r, w: _serve_one(replies, r, w), path, limit=1 << 20
    )
    os.chmod(path, 0o600)
    return server


def _is_socket(path: str) -> bool:
    return stat.S_ISSOCK(os.lstat(path).st_mode)


async def close(server: asyncio.Server, path: str) -> None:
    """Take no more connections and remove the socket file (open ones end with the loop)."""
    server.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
