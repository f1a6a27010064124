"""Appends through the commitlog writer, batching concurrent sends into ``PutBatch``: what
the RocketMQ 5 proxy and the 4.x remoting front end share.

Each send waits on a future (``put``), or is called back (``submit``: no task of the
sender's); one task per batch slot takes whatever has queued up (at most ``batch_max``
messages) and puts it on its own long-lived ``PutStream`` (a stream costs less per batch
than a call), or writes it to its put-socket connection and settles it in the callback that
reads the replies (no task woken on the way); a send with nothing to batch with goes out
alone, on an idle put-socket connection from the ``submit`` call itself. At rest a send
goes out at once; under load (a batch started less than ``spacing_s`` ago) from a
pipelining sender, the next one waits out the rest of that time and takes everything that
came meanwhile, and goes on waiting (in steps of ``spacing_s``, at most ``linger_s`` in
all) while such a sender's puts keep arriving and no other put comes, so the writer gets
fewer, larger batches: the writer's and the proxy's cost is mostly per batch, not per
message. A sender is pipelining while it has more than one put waiting here (``put``'s
``sender``: the client id); while none is, batches go out at once, as a synchronous sender
(one send at a time) gains nothing from the wait but latency. The writer validates a whole
batch before writing any of it: when it refuses one, every message of that batch is retried
alone, so only the bad one fails. Messages that must be stored together (a commit and its
op record) are one group.

A batch goes out as one request per kind of group: groups of ``Plain`` messages of one topic
from one peer become a ``MessageColumns`` request each (no protobuf object per message on
either side, the writer's fast path); the other groups one request of ``Message``s. The
requests of a batch are written back to back on the stream, then their replies read.
"""

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from rmqstore.append_gather import Gathering
from rmqstore.append_outcomes import (
    BUSY,
    REFUSED,
    UNAVAILABLE,
    AppendError,
    Done,
    ErrorFactory,
    Stored,
    Waiter,
    grpc_error,
    reply_outcome,
)
from rmqstore.put_requests import Plain, Record
from rmqstore.put_requests import requests_of as _requests
from rmqstore.put_socket import PutConnection
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc

__all__ = ["BUSY", "REFUSED", "UNAVAILABLE", "AppendError", "Appender", "Done", "ErrorFactory",
           "Plain", "Record", "Stored"]  # fmt: skip
log = logging.getLogger(__name__)
BATCH_BYTES = 16 << 20  # a batch stops growing here (the writer takes 64 MiB requests)
PIPELINER_S = 1.0  # a sender whose puts overlapped this recently is still a pipeliner
LINGER_BELOW = 32  # a batch lingers only while fewer messages than this wait for it

Settled = asyncio.Future | Waiter  # what a queued put's results are set on
Group = tuple[list[Record], Settled, int]  # records, where their results go, their bytes


class Appender:
    """``put_socket``: the writer's put socket (``rmqstore.put_socket``), taken instead of
    ``PutStream`` for puts when given; reads always go through ``channel``. Failures reach
    callers as ``make_error(kind, message)`` (an ``AppendError`` by default)."""

    def __init__(self, channel: grpc.aio.Channel, batch_max: int = 1024, slots: int = 2,
                 spacing_s: float = 0.001, put_socket: str = "", linger_s: float = 0.0,
                 linger_below: int = LINGER_BELOW, gather_s: float = 0.0,
                 merge_below: int = 0,
                 make_error: ErrorFactory = AppendError) -> None:  # fmt: skip
        self.make_error = make_error
        self.stub = commitlog_pb2_grpc.CommitLogStub(channel)
        self.put_socket = put_socket
        self.batch_max = batch_max
        self.spacing_s = spacing_s
        self.linger_s = linger_s  # the longest a pipelining sender's batch waits
        self.linger_below = linger_below  # ... while fewer messages than this wait
        self.gather_s = gather_s  # the longest a batch waits for synchronous senders (above)
        self.merge_below = merge_below  # smaller batches are one writer request (_requests)
        self._gathering = Gathering(gather_s, batch_max)  # synchronous senders' batches
        self._queued = 0  # messages in the queue
        self._next_at = 0.0  # loop time before which no batch starts (under load)
        self._queue: deque[Group] = deque()  # puts waiting for a slot's batch
        self._getters: deque[asyncio.Future[None]] = deque()  # slots waiting for a put
        self._waiting: dict[str, int] = {}  # sender -> its puts not answered yet
        self._pipelined = 0  # puts made while their sender had another one waiting
        self._arrivals = 0  # puts ever made by a pipeliner (see below)
        self._pipeliners: dict[str, float] = {}  # sender -> when it last had puts overlap
        self._lone: set[Settled] = set()  # queued puts of other senders
        self._streams: dict[int, Any] = dict.fromkeys(range(slots))  # slot -> its put stream
        self._busy = [asyncio.Lock() for _ in range(slots)]  # held while a slot puts
        self._claims = [0] * slots  # puts holding or waiting for each slot
        self._tasks = [asyncio.ensure_future(self._run(slot)) for slot in range(slots)]
        self._putting: set[asyncio.Task] = set()  # the slots' batches being put
        self.batches = 0  # puts made (for tests and metrics)
        self.on_batch: Callable[[int], None] | None = None  # called with each put's size

    async def put(self, messages: Sequence[Record], *, sender: str = "") -> list[Stored]:
        """Store ``messages`` (all or none of them); their results in order. ``sender``: who
        asks (puts of one sender that overlap make batches wait to fill up; see above)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        group, slot, before = self._take(messages, sender, future, loop)
        try:
            if slot is not None:  # nothing to batch with: straight out, no hop through a task
                await self._direct(slot, group)
            return await future
        finally:
            self._left(sender, before)

    def submit(self, messages: Sequence[Record], done: Done, *, sender: str = "") -> None:
        """``put`` without a task of the caller's: ``done(results, None)`` once stored,
        ``done(None, error)`` once failed (never from inside this call)."""
        loop = asyncio.get_running_loop()
        waiter = Waiter(self._left, sender, done)
        group, slot, waiter.before = self._take(messages, sender, waiter, loop)
        if slot is not None and not self._send_direct(slot, group):
            task = asyncio.ensure_future(self._direct(slot, group))
            self._putting.add(task)
            task.add_done_callback(self._putting.discard)

    def _take(self, messages: Sequence[Record], sender: str, future: Settled,
              loop: asyncio.AbstractEventLoop) -> tuple[Group, int | None, int]:  # fmt: skip
        """A put taken in: its group, queued unless it goes out alone on the slot returned
        (claimed), and how many puts of its sender were waiting before it."""
        size = sum(len(r.body) if isinstance(r, Plain) else r.ByteSize() for r in messages)
        before = self._waiting.get(sender, 0)
        self._waiting[sender] = before + 1
        self._pipelined += before > 0
        now = loop.time()
        if before and sender:
            if len(self._pipeliners) > 10_000:
                self._pipeliners.clear()
            self._pipeliners[sender] = now
        last = self._pipeliners.get(sender)
        if last is not None and now - last < PIPELINER_S:
            self._arrivals += 1
        else:
            self._lone.add(future)
        group = (list(messages), future, size)
        if self.gather_s and sender:
            self._gathering.put(sender, now)
        slot = self._direct_slot(loop)
        if slot is None:
            self._queued += len(messages)
            self._queue.append(group)
            while self._getters:  # wake one waiting slot (as asyncio.Queue, without its costs)
                getter = self._getters.popleft()
                if not getter.done():
                    getter.set_result(None)
                    break
            if self.gather_s and sender:
                self._gathering.queued(future, sender, self._queued)
        else:
            self._lone.discard(future)
            self._claims[slot] += 1
        return group, slot, before

    def _send_direct(self, slot: int, group: Group) -> bool:
        """``group`` (alone on ``slot``, claimed by ``_take``) written on the slot's idle
        put-socket connection now and settled from the callback that reads its reply
        (``_send_now``): no task. False (nothing done) when the connection is not open and
        idle."""
        stream = self._streams[slot]
        if not isinstance(stream, PutConnection) or not stream.idle():
            return False
        if not _acquired_at_once(self._busy[slot]):  # (free: no other claim on the slot)
            return False
        if not self._send_now(slot, [group]):
            self._busy[slot].release()
            return False
        return True

    async def _direct(self, slot: int, group: Group) -> None:
        """Put ``group`` alone on ``slot`` (claimed by ``_take``)."""
        try:
            async with self._busy[slot]:
                await self._put(slot, [group])
        finally:
            self._claims[slot] -= 1

    def _left(self, sender: str, before: int) -> None:
        """A put of ``sender`` is answered (or given up)."""
        self._pipelined -= before > 0
        if self._waiting[sender] > 1:
            self._waiting[sender] -= 1
        else:
            del self._waiting[sender]

    def _direct_slot(self, loop: asyncio.AbstractEventLoop) -> int | None:
        """A free slot for a put that would go out alone and at once anyway (nothing queued,
        no pipelining sender waiting), or None."""
        if self._queue or self._pipelined or len(self._gathering.recent) > 1:
            return None  # (several synchronous senders: their puts gather)
        for slot, claims in enumerate(self._claims):
            if not claims:
                self._next_at = loop.time() + self.spacing_s
                return slot
        return None

    async def read(self, offset: int) -> bytes:
        return (await self.read_many([offset]))[0]

    async def read_many(self, offsets: Sequence[int]) -> list[bytes]:
        """Raw records at these commitlog offsets (each must start a record)."""
        try:
            reply = await self.stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=offsets))
        except grpc.aio.AioRpcError as e:
            err = grpc_error(e)
            raise self.make_error(err.kind, str(err)) from None
        return list(reply.records)

    async def _run(self, slot: int) -> None:
        """Take the slot's next batch: its first put, then (while the slot's previous batch
        may still be in flight) the wait for it to fill, then the slot, then (not under a
        pipelining sender's load) the wait for the synchronous senders (``Gathering``), then the
        puts queued behind the first: a group commit (the puts that arrived while the slot's
        previous batch was in flight go out as one). The batch is written at once, its
        replies settled in the callback that reads them (``_send_now``), or else put by a
        task of its own (``_batch``)."""
        loop = asyncio.get_running_loop()
        busy = self._busy[slot]
        while True:
            while not self._queue:
                getter = loop.create_future()
                self._getters.append(getter)
                await getter
            first = self._queue.popleft()
            self._queued -= len(first[0])
            lone = bool(self._lone) and first[1] in self._lone
            self._lone.discard(first[1])
            self._claims[slot] += 1  # no put goes out on the slot ahead of this one
            try:
                await self._fill(lone, loop)
                await busy.acquire()
            except BaseException:
                self._claims[slot] -= 1
                raise
            try:
                if self.gather_s and not self._pipelined:
                    await self._gathering.wait(loop, self._queued)
            except BaseException:
                self._release(slot)
                raise
            groups = self._take_queued(first)
            if not self._send_now(slot, groups):
                task = asyncio.ensure_future(self._batch(slot, groups))
                self._putting.add(task)
                task.add_done_callback(self._putting.discard)

    def _take_queued(self, first: Group) -> list[Group]:
        """``first`` and the puts queued behind it, up to ``batch_max`` messages and
        ``BATCH_BYTES``, out of the queue."""
        self._gathering.taken(first[1])
        groups = [first]
        count, size = len(first[0]), first[2]
        while self._queue and count < self.batch_max and size < BATCH_BYTES:
            g = self._queue.popleft()
            self._gathering.taken(g[1])
            self._lone.discard(g[1])
            self._queued -= len(g[0])
            groups.append(g)
            count += len(g[0])
            size += g[2]
        return groups

    def _release(self, slot: int) -> None:
        """The slot's batch is settled: the next may go out on it."""
        self._busy[slot].release()
        self._claims[slot] -= 1

    async def _fill(self, lone: bool, loop: asyncio.AbstractEventLoop) -> None:
        """Under a pipelining sender's load, wait for more of its puts (see above)."""
        now = loop.time()
        wait = self._next_at - now
        if wait > 0 and self._pipelined:  # a batch started a moment ago: let this fill up
            self._next_at += self.spacing_s
            await asyncio.sleep(wait)
            if not lone:
                await self._linger(now + self.linger_s)
        else:
            self._next_at = now + self.spacing_s

    async def _batch(self, slot: int, groups: list[Group]) -> None:
        """Put ``groups``, the slot held (released here)."""
        try:
            await self._put(slot, groups)
        finally:
            self._release(slot)

    def _send_now(self, slot: int, groups: list[Group]) -> bool:
        """Write ``groups``' requests on the slot's put-socket connection now, and settle them
        (and release the slot) in the callback that reads their replies: no task, no wake-up
        in between. False (nothing done) when the connection is not open and idle."""
        stream = self._streams[slot]
        if not isinstance(stream, PutConnection) or not stream.idle():
            return False
        try:
            requests = _requests(groups, self.merge_below)
            stream.send(
                [r for r, _gs in requests],
                lambda replies: self._replied(slot, stream, groups, requests, replies),
            )
        except Exception as e:  # never leave a sender waiting (a broken socket is told to
            self._fail(groups, e)  # ``_replied``: a transport's write does not raise)
            self._release(slot)
        return True

    def _replied(self, slot: int, stream: PutConnection, groups: list[Group],
                 requests: list[tuple[commitlog_pb2.PutBatchRequest, list[Group]]],
                 replies: list[bytes] | None) -> None:  # fmt: skip
        """``_send_now``'s requests answered (``replies``), or their connection lost (None)."""
        retry: list[Group] = []
        try:
            if replies is None:
                if self._streams[slot] is stream:
                    self._streams[slot] = None
                raise AppendError(UNAVAILABLE, "the store closed the stream")
            outcomes = [reply_outcome(commitlog_pb2.PutStreamReply.FromString(r)) for r in replies]
        except Exception as e:
            if replies is not None:  # a reply that does not parse: the connection is done
                self._streams[slot] = None
                stream.cancel()
            self._fail(groups, e)
        else:
            try:
                retry = self._settle_replies(requests, outcomes)
            except Exception as e:  # a bug: still never leave a sender waiting, the slot held
                self._fail(groups, e)
        if not retry:
            self._release(slot)
            return
        task = asyncio.ensure_future(self._retry(slot, retry))
        self._putting.add(task)
        task.add_done_callback(self._putting.discard)

    async def _retry(self, slot: int, groups: list[Group]) -> None:
        """Each of ``groups`` (a refused request's) put alone, the slot held (released here)."""
        try:
            for g in groups:
                await self._put(slot, [g])
        finally:
            self._release(slot)

    async def _linger(self, until: float) -> None:
        """Wait on in steps of ``spacing_s`` while puts of pipelining senders keep coming (at
        most until loop time ``until``, and while fewer than ``linger_below`` messages wait:
        the cost per message hardly falls beyond, and a sender with a few large requests in
        flight, all of them here soon, would be held to that many per wait): a sender with many
        sends in flight (``send_async``) has them arrive one by one, and a larger batch costs
        the writer and the proxy less per message; a sender whose sends all wait here already
        gains nothing from more waiting, and its batch goes after one step. Any other put (a
        synchronous sender's, the proxy's own) ends the wait: it would only add to its
        latency."""
        loop = asyncio.get_running_loop()
        seen = self._arrivals
        while self._pipelined and self._queued < self.linger_below:
            step = min(self.spacing_s, until - loop.time())
            if step <= 0:
                return
            await asyncio.sleep(step)
            if self._arrivals == seen or self._lone:
                return
            seen = self._arrivals
            self._next_at = max(self._next_at, loop.time() + self.spacing_s)

    async def _call(self, slot: int, requests: list[commitlog_pb2.PutBatchRequest]
                    ) -> list[commitlog_pb2.PutBatchResponse | AppendError]:  # fmt: skip
        """Requests over the slot's stream (opened on first use, again after a failure),
        written back to back; each one's response, or the AppendError it was refused with."""
        stream = self._streams[slot]
        if stream is None:
            stream = self._streams[slot] = await self._open()
        out: list[commitlog_pb2.PutBatchResponse | AppendError] = []
        try:
            if isinstance(stream, PutConnection):
                await stream.write_many(requests)  # one write: one wake-up of the writer
            else:
                for request in requests:
                    await stream.write(request)
            for _ in requests:
                reply = await stream.read()
                if reply is grpc.aio.EOF or reply is None:
                    self._streams[slot] = None
                    raise AppendError(UNAVAILABLE, "the store closed the stream")
                out.append(reply_outcome(reply))
        except OSError as e:  # the put socket broke
            self._streams[slot] = None
            stream.cancel()
            raise AppendError(UNAVAILABLE, f"store unavailable: {e}") from None
        except BaseException:
            self._streams[slot] = None
            stream.cancel()
            raise
        return out

    async def _open(self) -> Any:
        """A put stream: the writer's ``PutStream``, or a connection to its put socket."""
        if not self.put_socket:
            return self.stub.PutStream()
        try:
            return await PutConnection.open(self.put_socket)
        except OSError as e:
            raise AppendError(
                UNAVAILABLE, f"store unavailable: {self.put_socket}: {e.strerror}"
            ) from None

    async def _put(self, slot: int, groups: list[Group]) -> None:
        try:
            requests = _requests(groups, self.merge_below)
            replies = await self._call(slot, [r for r, _gs in requests])
        except grpc.aio.AioRpcError as e:
            self._fail(groups, grpc_error(e))
            return
        except Exception as e:  # never leave a sender waiting
            self._fail(groups, e)
            return
        for g in self._settle_replies(requests, replies):  # find the bad one: each alone
            await self._put(slot, [g])

    def _settle_replies(self, requests: list[tuple[commitlog_pb2.PutBatchRequest, list[Group]]],
                        replies: list[commitlog_pb2.PutBatchResponse | AppendError]
                        ) -> list[Group]:  # fmt: skip
        """Each request's puts settled with its reply; the groups of a refused request of
        several, to put again each alone (so only the bad one fails)."""
        retry: list[Group] = []
        for (_request, gs), reply in zip(requests, replies, strict=True):
            if isinstance(reply, AppendError):
                if reply.kind == REFUSED and len(gs) > 1:
                    retry += gs
                else:
                    self._fail(gs, reply)
                continue
            c = reply.columns
            self.batches += 1
            if self.on_batch is not None:
                self.on_batch(len(c.phy_offset))
            results = [Stored(p, q, c.status) for p, q in zip(c.phy_offset, c.queue_offset,
                                                             strict=True)]  # fmt: skip
            at = 0
            for rs, f, _n in gs:
                if not f.done():
                    f.set_result(results[at : at + len(rs)])
                at += len(rs)
        return retry

    async def close(self) -> None:
        for stream in self._streams.values():
            if stream is not None:
                stream.cancel()
        tasks = [*self._tasks, *self._putting]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _fail(self, groups: list[Group], e: BaseException) -> None:
        if isinstance(e, AppendError):
            e = self.make_error(e.kind, str(e))
        for _rs, f, _n in groups:
            if not f.done():
                f.set_exception(e)


def _acquired_at_once(lock: asyncio.Lock) -> bool:
    """Take ``lock`` if that needs no wait: asyncio's ``acquire`` returns without suspending
    when the lock is free and nobody waits for it, so one step of it takes it or (False)
    leaves it as it was."""
    if lock.locked():
        return False
    step = lock.acquire()
    try:
        step.send(None)
    except StopIteration:
        return True
    step.close()  # it would wait: its waiter is withdrawn
    return False
