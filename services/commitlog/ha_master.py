"""The master side of RocketMQ 4.9's replication ("HA") protocol, on the writer's event loop.

Slaves connect to ``--ha-port`` (``rmqstore/formats/ha.py`` has the bytes,
``/spec/rocketmq-ha.md`` the rules). The master sends transfer frames
cut from the segment files: at most 32 KiB, never across a file end, up to what has been
written (blank end-of-file fillers included), a heartbeat after 5 s without sending.

Per connection, one protocol object reads the slave's offset reports (the first is its start
point, later ones acknowledge) in the loop's read callback (no task wakes per report), and one
task sends. An idle sender is woken by a tick every 10 ms when there is something to send, by
a sync master's put at once, and by an async master's puts once 256 KiB wait; it then joins
every frame it has (headers and views of the segment map) into one ``writev`` on the socket:
one system call per wake-up, not one per 32 KiB frame nor one wake-up per put, and no copy
but the kernel's (what the socket does not take then goes to the transport, joined).

Everything runs on the writer's one event loop, as the puts do: an acknowledgement settles
the futures of the sync-master puts it covers in the callback that read it, with no thread in
between, and a put never waits on the loop (it awaits its future, as a sync-flush put awaits
its group commit).

Divergence (spec §6): a first report beyond the master's end is refused (one log line, the
connection closed, nothing sent); a first report below the oldest file can never be served
and is refused with its own log line, metric and status. A first report inside a record is
served from exactly there only if this master has sent bytes up to at least that offset to the
same host (its IP: a reconnect comes from a new port) since it started: a RocketMQ slave that
reconnects without restarting reports the end of the raw bytes it holds, anywhere in a record,
and those bytes came from us. Any other first report inside a record is refused as another
history. The memory lasts as long as the process: after a master restart a RocketMQ slave
resuming inside a record is refused until it restarts (its recovery cuts its log to a whole
record). Our own slave always reports the end of its whole records.
"""

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from rmqstore.errors import StoreError, UnavailableError
from rmqstore.formats import ha
from rmqstore.v1 import commitlog_pb2
from services.commitlog.config import ASYNC_MASTER, SYNC_MASTER
from services.commitlog.record_reads import record_at

log = logging.getLogger(__name__)

PUT_OK = commitlog_pb2.PUT_OK
FLUSH_SLAVE_TIMEOUT = commitlog_pb2.FLUSH_SLAVE_TIMEOUT
SLAVE_NOT_AVAILABLE = commitlog_pb2.SLAVE_NOT_AVAILABLE
STATUS_NAMES = {s: commitlog_pb2.PutStatus.Name(s) for s in commitlog_pb2.PutStatus.values()}

SENDER_TICK_S = 0.01  # an idle sender looks for new bytes this often (RocketMQ's: 100 ms)
WAKE_BYTES = 256 << 10  # an async master's puts wake the sender once this much is waiting
SEND_BURST = 1 << 20  # bytes of frames a sender writes at once before it lets others run

Replica = int | asyncio.Future  # a put's status now, or a future that settles to it


class NotEnoughReplicasError(UnavailableError):
    """``--min-sync-replicas`` is not met: the put is refused before anything is written."""


class SlaveLink:
    """One slave's connection: what it reported and where its next frame starts."""

    def __init__(self, address: str) -> None:
        self.address = address  # its IP:port
        self.host = address.rpartition(":")[0] or address  # its IP: what was sent is kept by it
        self.first_report: int | None = None
        self.acked = -1  # its last report (-1: none yet)
        self.sent = -1  # where the next frame starts (-1: not started)
        self.since = self.last_read = self.last_sent = time.monotonic()
        self.idle: asyncio.Future | None = None  # the sender's, while it has nothing to send

    def wake(self) -> None:
        """New bytes (or a tick): an idle sender looks again."""
        idle = self.idle
        if idle is not None:
            self.idle = None
            if not idle.done():
                idle.set_result(None)


class Replication:
    """The master's replication state: connected slaves, the acknowledged offset (the
    highest any slave reported, never going down), and the puts waiting for it."""

    def __init__(
        self, engine: Any, role: str = ASYNC_MASTER, slave_timeout_s: float = 3.0,
        fallbehind_max: int = 256 << 20, min_sync_replicas: int = 0,
        idle_s: float = ha.IDLE_TIMEOUT_S,
    ) -> None:  # fmt: skip
        if role not in (ASYNC_MASTER, SYNC_MASTER):
            raise ValueError(f"a master's role is {ASYNC_MASTER} or {SYNC_MASTER}, not {role!r}")
        self.engine = engine
        self.role = role
        self.slave_timeout_s = slave_timeout_s
        self.fallbehind_max = fallbehind_max
        self.min_sync_replicas = min_sync_replicas
        self.idle_s = idle_s  # a slave from which nothing was read for this long is dropped
        self.port = 0
        self.acked = 0
        self.slaves: set[SlaveLink] = set()
        self._waiters: list[tuple[int, int, asyncio.Future, float]] = []  # end, seq, fut, t0
        self._seq = itertools.count()
        self.refused_below_min = 0
        self.refused_divergent = 0
        self.sent_to: dict[str, int] = {}  # per slave IP, the highest offset sent (this process)
        self.waited: Callable[[float], None] = lambda _s: None  # sync-put wait time, seconds
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[SlaveConnection] = set()

    # -- puts ----------------------------------------------------------------------------
    @property
    def sync(self) -> bool:
        return self.role == SYNC_MASTER

    def in_sync(self) -> int:
        """Slaves that have reported and are less than ``fallbehind_max`` behind."""
        end = self.engine.max_offset
        return sum(1 for s in self.slaves if s.acked >= 0 and end - s.acked < self.fallbehind_max)

    def check_put(self) -> None:
        """Refuse a put before it is written when ``--min-sync-replicas`` is not met."""
        n = self.min_sync_replicas
        if n and (have := self.in_sync()) < n:
            raise NotEnoughReplicasError(
                f"not stored: {have} slave(s) in sync, --min-sync-replicas is {n} (a slave is "
                f"in sync once connected, reporting and less than {self.fallbehind_max} bytes "
                "behind); start or repair a slave, or lower --min-sync-replicas")

    def replicated(self, end: int) -> Replica:
        """A put that ends at ``end`` was appended: its status, or a future that settles to
        it (sync_master). Wakes the idle senders: a sync master's at once, an async master's
        once ``WAKE_BYTES`` wait (else its next tick, within ``SENDER_TICK_S``)."""
        for s in self.slaves:
            if s.idle is not None and (self.sync or end - s.sent >= WAKE_BYTES):
                s.wake()
        if not self.sync:
            return PUT_OK
        if not self.slaves or end - self.acked >= self.fallbehind_max:
            return SLAVE_NOT_AVAILABLE
        if self.acked >= end:
            return PUT_OK
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        t0 = time.perf_counter()
        heapq.heappush(self._waiters, (end, next(self._seq), fut, t0))
        loop.call_later(self.slave_timeout_s, self._timed_out, fut, t0)
        return fut

    def _timed_out(self, fut: asyncio.Future, t0: float) -> None:
        if not fut.done():
            fut.set_result(FLUSH_SLAVE_TIMEOUT)
            self.waited(time.perf_counter() - t0)

    def acknowledge(self, link: SlaveLink, offset: int) -> None:
        """``link`` reported ``offset``: settle the puts it covers (PUT_OK)."""
        link.acked = offset
        if offset <= self.acked:
            return
        self.acked = offset
        waiters = self._waiters
        now = time.perf_counter()
        while waiters and waiters[0][0] <= offset:
            _end, _seq, fut, t0 = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(PUT_OK)
                self.waited(now - t0)
        # futures settled by their timeout stay in the heap until an ack passes them
        if len(waiters) > 100_000:
            self._waiters = [w for w in waiters if not w[2].done()]
            heapq.heapify(self._waiters)

    # -- the listener --------------------------------------------------------------------
    async def listen(self, host: str, port: int) -> int:
        """Take slaves on ``host:port`` (0: any free port); the port listened on."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: SlaveConnection(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        # (not "listening on": that line is the gRPC address, which scripts look for)
        log.info("%s: slaves may connect to the HA port %s:%d", self.role, host, self.port)
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        senders = [c.stop() for c in list(self._connections)]
        for sender in senders:
            if sender is not None:
                with contextlib.suppress(BaseException):
                    await sender
        for _end, _seq, fut, _t0 in self._waiters:
            if not fut.done():
                fut.set_result(FLUSH_SLAVE_TIMEOUT)

    def report(self, conn: "SlaveConnection", offset: int) -> None:
        """A slave's report: its start point (the sender starts, or it is refused) or an
        acknowledgement (one beyond this master's end closes the connection)."""
        link = conn.link
        if link.first_report is None:
            link.first_report = offset
            conn.refused = self._refusal(link, offset)  # logged there, in one line
            if conn.refused:
                conn.end("")
                return
            self.acknowledge(link, offset)
            conn.start_sending(self._send(conn, link, offset))
        elif offset > self.engine.max_offset:
            conn.end(f"it reported offset {offset}, beyond this master's end "
                     f"{self.engine.max_offset}")  # fmt: skip
        else:
            self.acknowledge(link, offset)

    def _refusal(self, link: SlaveLink, first: int) -> str:
        """Why a first report cannot be served (logged, counted), or ''."""
        e = self.engine
        end, lo, size = e.max_offset, e.min_offset, e.config.segment_size
        if first > end:
            self.refused_divergent += 1
            why = (f"its log ends at {first}, beyond this master's end {end}: it holds a history "
                   "this master does not (was the master wiped or replaced?); wipe the slave's "
                   "store (or move it aside) and start it again")
        elif first != 0 and first < lo:
            self.refused_below_min += 1
            why = (f"its log ends at {first}, below this master's oldest file (offset {lo}): "
                   "the bytes it needs were deleted and it can never catch up; wipe the slave's "
                   "store and start it again (it then copies from the master's last file)")
        elif first in (0, end) or first % size == 0 or _starts_record(e, first):
            return ""
        elif first <= (sent := self.sent_to.get(link.host, -1)):
            log.info("slave %s resumes at offset %d, inside a record: this master has sent %s "
                     "bytes up to %d, so it holds this master's history; sending from there",
                     link.address, first, link.host, sent)  # fmt: skip
            return ""
        else:
            self.refused_divergent += 1
            sent_what = f"up to {sent}" if sent >= 0 else "nothing"
            why = (f"its log ends at {first}, inside a record of this master's, and this master "
                   f"has sent {link.host} {sent_what} since it started: another history, or "
                   "this master restarted since; restart the slave (its recovery cuts its log "
                   "back to a whole record), and if it is refused again wipe the slave's store "
                   "(or move it aside) and start it again")  # fmt: skip
        log.warning("refused slave %s: %s", link.address, why)
        return why

    async def _send(self, conn: "SlaveConnection", link: SlaveLink, first: int) -> None:
        """Frames from the start point on, heartbeats when idle.

        Every frame there is (up to ``SEND_BURST`` bytes) goes out in one write: the headers
        and zero-copy views of the segment map (``SlaveConnection.write``). The loop does not
        run between cutting the views and the write, so retention cannot unmap a file under
        them."""
        e = self.engine
        size = e.config.segment_size
        loop = asyncio.get_running_loop()
        offset = link.sent = ha.start_offset(first, e.max_offset, size)
        link.last_sent = time.monotonic()
        while True:
            end = e.max_offset
            if offset < end:
                parts: list[bytes | memoryview] = []
                budget = SEND_BURST  # frames written before the loop serves anything else
                while offset < end and budget > 0:
                    try:
                        seg = e.segments.find(offset)
                    except (ValueError, StoreError) as err:  # retention deleted it meanwhile
                        raise ConnectionError(f"offset {offset} is no longer on this master: "
                                              f"{err}") from None  # fmt: skip
                    pos = offset - seg.start
                    n = ha.frame_span(offset, end, size)
                    with memoryview(seg.map) as whole:
                        parts += (ha.encode_frame_header(offset, n), whole[pos : pos + n])
                    offset += n
                    budget -= n
                conn.write(parts)
                del parts  # the views of the maps go with it
                link.sent = offset
                if offset > self.sent_to.get(link.host, -1):
                    self.sent_to[link.host] = offset
                link.last_sent = time.monotonic()
                await conn.drain(budget <= 0)
                continue
            if time.monotonic() - link.last_sent >= ha.HEARTBEAT_INTERVAL_S:
                conn.transport.write(ha.encode_frame_header(offset, 0))
                link.last_sent = time.monotonic()
                await conn.drain(False)
                continue
            link.idle = idle = loop.create_future()  # a put or the connection's tick wakes it
            await idle

    # -- status ----------------------------------------------------------------------------
    def status(self) -> commitlog_pb2.ReplicationStatus:
        end = self.engine.max_offset
        now = time.monotonic()
        return commitlog_pb2.ReplicationStatus(
            role=self.role, ha_port=self.port, acked_offset=self.acked,
            min_sync_replicas=self.min_sync_replicas, in_sync=self.in_sync(),
            refused_below_min=self.refused_below_min, refused_divergent=self.refused_divergent,
            slaves=[
                commitlog_pb2.SlaveStatus(
                    address=s.address, acked_offset=s.acked,
                    lag_bytes=end - s.acked if s.acked >= 0 else end, sent_offset=s.sent,
                    connected_seconds=now - s.since,
                )
                for s in sorted(self.slaves, key=lambda s: s.address)
            ],
        )  # fmt: skip


class SlaveConnection(asyncio.Protocol):
    """One slave's socket on the loop: its reports are read in the loop's read callback (no
    task wakes per report), the sender task writes to the transport, and a tick every
    ``SENDER_TICK_S`` wakes an idle sender that has bytes or a heartbeat to send and drops a
    slave silent for 20 s."""

    def __init__(self, replication: Replication) -> None:
        self.replication = replication
        self.link = SlaveLink("?")
        self.transport: asyncio.WriteTransport
        self.refused = ""
        self.why = "closed by the slave"
        self._buf = bytearray()
        self._sender: asyncio.Task | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._paused = False
        self._resumed: asyncio.Future | None = None
        self._fd = -1  # the socket's, for writes that skip the transport's copy

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        peer = transport.get_extra_info("peername")
        self.link = link = SlaveLink(f"{peer[0]}:{peer[1]}" if peer else "?")
        self.replication.slaves.add(link)
        self.replication._connections.add(self)
        log.info("slave %s connected", link.address)
        self._tick = asyncio.get_running_loop().call_later(SENDER_TICK_S, self._on_tick)

    def data_received(self, data: bytes) -> None:
        """Only whole 8-byte values count, and of several only the last one (spec §1)."""
        if self.transport.is_closing():  # refused or ended: nothing more counts
            return
        link = self.link
        link.last_read = time.monotonic()
        buf = self._buf
        buf += data
        offset, used = ha.last_report(buf)
        if offset is None:
            return
        del buf[:used]
        self.replication.report(self, offset)

    def start_sending(self, sending: Coroutine[Any, Any, None]) -> None:
        self._sender = sender = asyncio.ensure_future(sending)
        sender.add_done_callback(self._sent)

    def _sent(self, sender: asyncio.Task) -> None:
        if not sender.cancelled() and (err := sender.exception()) is not None:
            self.end(f"sending failed: {err}")

    def _on_tick(self) -> None:
        link, now = self.link, time.monotonic()
        if now - link.last_read >= (idle_s := self.replication.idle_s):
            self.end(f"nothing read for {idle_s:g} s")
            return
        if link.idle is not None and (self.replication.engine.max_offset > link.sent
                                      or now - link.last_sent >= ha.HEARTBEAT_INTERVAL_S):
            link.wake()
        self._tick = asyncio.get_running_loop().call_later(SENDER_TICK_S, self._on_tick)

    def write(self, parts: list[bytes | memoryview]) -> None:
        """Send ``parts`` in order: straight from them with one ``writev`` on the socket while
        the transport holds nothing unsent (no copy in this process), the rest joined into
        the transport (which keeps it until the socket takes it, and meets any error as it
        would with all of it)."""
        transport = self.transport
        sent = 0
        if self._fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing():
            try:
                sent = os.writev(self._fd, parts)
            except OSError:  # full (or broken): the transport tries and decides
                sent = 0
        if not sent:
            transport.write(b"".join(parts))
            return
        for i, part in enumerate(parts):
            n = len(part)
            if sent < n:
                rest = [memoryview(part)[sent:], *parts[i + 1 :]]
                transport.write(b"".join(rest))
                return
            sent -= n

    async def drain(self, turn: bool) -> None:
        """Until the transport takes more (its buffer is over the high-water mark); with
        ``turn``, at least one loop turn (a sender that used up its burst)."""
        if self._paused:
            self._resumed = asyncio.get_running_loop().create_future()
            await self._resumed
        elif turn:
            await asyncio.sleep(0)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    def end(self, why: str) -> None:
        """Drop the slave for ``why`` ('' when refused: logged already) at once: nothing
        unsent is worth delivering to it (a close would wait for a slave that stopped
        reading, and keep it counted meanwhile)."""
        if why:
            self.why = why
        self.transport.abort()
        self._gone()

    def stop(self) -> asyncio.Task | None:
        """Close at once (the master stops); the sender, cancelled, to await."""
        self.why = "this master stopped replicating"
        self.transport.abort()
        self._gone()
        return self._sender

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.why == "closed by the slave":
            self.why = f"connection error: {exc}"
        self._gone()

    def _gone(self) -> None:
        r, link = self.replication, self.link
        if self not in r._connections:
            return
        r._connections.discard(self)
        r.slaves.discard(link)
        if self._tick is not None:
            self._tick.cancel()
        if self._sender is not None:
            self._sender.cancel()
        if not self.refused:
            log.info("slave %s disconnected (%s), acknowledged up to %d", link.address, self.why,
                     link.acked)  # fmt: skip


def _starts_record(engine: Any, offset: int) -> bool:
    """Whether a record (or an end-of-file blank) starts at ``offset`` on this master."""
    try:
        record_at(engine.segments.find, engine.min_offset, engine.max_offset, offset)
    except (StoreError, ValueError):
        return False
    return True
