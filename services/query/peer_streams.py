"""How a query service asks its peers for their parts of a cluster-wide lookup: over
long-lived ``PeerStream`` calls, one lookup at a time on each (a unary call's set-up saved per
lookup), up to ``streams`` per peer; past that, or for a while after a peer refuses the
stream (one that predates it), over unary ``QueryByKey`` / ``QueryById`` calls.

A failure reads as a unary call's would (``grpc.aio.AioRpcError``), so a peer that stops
mid-lookup is reported unreachable; the caller bounds the time (``ClusterLookup`` runs an
ask under its deadline, and a stream whose lookup is cancelled is closed, never reused). A
stream found broken on its first use since it last answered (the peer restarted in between)
is replaced by a new one at once, so a peer that is back answers the next lookup.
"""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc

from rmqstore.cluster_members import Peer
from rmqstore.v1 import query_pb2, query_pb2_grpc

STREAMS = 4  # open streams per peer (one per lookup in flight)
STREAM_RETRY_S = 30.0  # after a peer refuses the stream, unary calls this long
_CODES = {code.value[0]: code for code in grpc.StatusCode}
# how a stream ends when its peer dies or its connection breaks (a killed process's stream
# ends UNAVAILABLE, or UNKNOWN / INTERNAL when it was reset; None: closed without a status);
# a lookup's own failure comes in a reply's status instead
_BROKEN = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
           grpc.StatusCode.CANCELLED, None}  # fmt: skip


class _Ended(Exception):
    """The peer closed the stream without an error (it is stopping)."""


def _failed(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _Stream:
    def __init__(self, stub: query_pb2_grpc.QueryStub) -> None:
        self.call = stub.PeerStream()
        self.used = False  # has answered before: may have broken while idle

    async def ask(self, request: query_pb2.PeerRequest) -> query_pb2.PeerReply:
        try:
            await self.call.write(request)
        except asyncio.InvalidStateError:  # the call has ended
            await self.call.read()  # raises its error if it ended with one
            raise _Ended() from None
        reply = await self.call.read()
        if reply is grpc.aio.EOF:
            raise _Ended()
        return reply


class _PeerLink:
    """One peer's channel and streams."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.stub = query_pb2_grpc.QueryStub(channel)
        self.idle: list[_Stream] = []
        self.open: set[_Stream] = set()
        self.unary_until = 0.0

    def checkout(self) -> _Stream | None:
        if self.idle:
            return self.idle.pop()
        if len(self.open) >= STREAMS or time.monotonic() < self.unary_until:
            return None
        stream = _Stream(self.stub)
        self.open.add(stream)
        return stream

    def checkin(self, stream: _Stream) -> None:
        if stream in self.open:
            stream.used = True
            self.idle.append(stream)

    def discard(self, stream: _Stream) -> None:
        self.open.discard(stream)
        stream.call.cancel()

    async def close(self) -> None:
        for s in list(self.open):
            self.discard(s)
        self.idle.clear()
        await self.channel.close()


class PeerStreams:
    """The ``ask`` of ``ClusterLookup`` for the other members, over ``channel_for(address)``
    (made on the event loop that uses it)."""

    def __init__(self, channel_for: Callable[[str], grpc.aio.Channel]) -> None:
        self.channel_for = channel_for
        self.links: dict[str, _PeerLink] = {}

    def ask(self, peer: Peer, request: Any, timeout: float) -> Any:
        link = self.links.get(peer.address)
        if link is None:
            link = self.links[peer.address] = _PeerLink(self.channel_for(peer.address))
        by_key = isinstance(request, query_pb2.QueryByKeyRequest)
        stream = link.checkout()
        if stream is None:  # a unary call: under way from here, ends by its deadline
            call = link.stub.QueryByKey if by_key else link.stub.QueryById
            return call(request, timeout=timeout)
        wrapped = (query_pb2.PeerRequest(by_key=request) if by_key
                   else query_pb2.PeerRequest(by_id=request))  # fmt: skip
        return self._over(link, stream, wrapped, request, timeout)

    async def _over(self, link: _PeerLink, stream: _Stream, wrapped: query_pb2.PeerRequest,
                    request: Any, timeout: float) -> Any:  # fmt: skip
        while True:  # bounded by the caller (ClusterLookup runs it under its deadline)
            try:
                reply = await stream.ask(wrapped)
            except (grpc.aio.AioRpcError, _Ended) as e:
                link.discard(stream)
                code = e.code() if isinstance(e, grpc.aio.AioRpcError) else None
                if code == grpc.StatusCode.UNIMPLEMENTED:  # a peer without the stream
                    link.unary_until = time.monotonic() + STREAM_RETRY_S
                    return await self._unary(link, request, timeout)
                broken = code in _BROKEN  # the connection, not the lookup, failed
                fresh = link.checkout() if broken and stream.used else None
                if fresh is None:
                    if broken:  # as a unary call to a peer that is gone: unreachable
                        detail = e.details() if isinstance(e, grpc.aio.AioRpcError) else ""
                        raise _failed(grpc.StatusCode.UNAVAILABLE, "the peer's stream ended"
                                      + (f": {detail}" if detail else "")) from None  # fmt: skip
                    raise
                stream = fresh
                continue
            except BaseException:  # timed out or cancelled: its answer would come late
                link.discard(stream)
                raise
            link.checkin(stream)
            if reply.status_code:
                code = _CODES.get(reply.status_code, grpc.StatusCode.UNKNOWN)
                raise _failed(code, reply.error)
            return reply.by_key if reply.HasField("by_key") else reply.by_id

    @staticmethod
    async def _unary(link: _PeerLink, request: Any, timeout: float) -> Any:
        by_key = isinstance(request, query_pb2.QueryByKeyRequest)
        call = link.stub.QueryByKey if by_key else link.stub.QueryById
        return await call(request, timeout=timeout)

    async def close(self) -> None:
        for link in self.links.values():
            await link.close()
        self.links.clear()
