"""Replication: pipelined puts with no slave, an async slave and a sync slave; a slave's lag.

Every row runs real writer processes on loopback: a master (``--role async_master`` or
``sync_master`` with an HA port) and, but for the first rows, a second writer process as its
slave (``--role slave --ha-master``), each on a fresh store.

- **Throughput**: one producer (this process, on ``grpc.aio``, as ``rmqstore put``) sends 1 KiB
  messages as ``MessageColumns`` batches of 100 over one ``PutStream`` with 4 unanswered, as
  fast as the master answers; the rate is compared with the no-slave row. Puts are counted
  per status (a sync row is only meaningful if its puts are ``PUT_OK``); after the last
  answer the slave must end with the master's max offset.
- **One at a time**: single-message ``PutBatch`` calls, each waiting for its answer: the
  latency a sync put adds (the slave's round trip) with nothing queued behind it.
- **Lag**: the producer sends batches of 100 paced to ``LAG_RATE`` messages/s to an
  ``async_master``; another process polls the slave's ``GetOffsets`` every millisecond and
  keeps each (time, max offset) it sees. A batch's lag is the time from its answer on the
  master until the first poll that saw the slave hold its last byte (0 when the slave held it
  before the answer came), so it includes up to one poll interval plus one ``GetOffsets``.
"""

import asyncio
import bisect
import collections
import multiprocessing as mp
import tempfile
import time

import grpc

from benchmarks.procs import ServiceProcess, cpu_seconds, start
from benchmarks.scale import Scale
from rmqstore.server import CHANNEL_OPTIONS, channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.cli import put_stream
from tests.procs import free_port

BODY = 1024
BATCH = 100
WINDOW = 4
SEGMENT = 256 * 1024 * 1024
LAG_RATE = 50_000  # messages/s
POLL_S = 0.001
CONNECT_TIMEOUT_S = 60.0
CATCH_UP_TIMEOUT_S = 60.0


def _batch(k: int) -> commitlog_pb2.PutBatchRequest:
    return commitlog_pb2.PutBatchRequest(
        columns=commitlog_pb2.MessageColumns(
            topic="BenchTopic", body_size=[BODY] * BATCH, bodies=b"x" * BODY * BATCH,
            queue_id=[i % 8 for i in range(BATCH)], tags=["TagA"],
            keys=[f"order-{k * BATCH + i}" for i in range(BATCH)],
        ),
        columnar_results=True,
    )  # fmt: skip


class Pair:
    """A master writer and, with ``slave``, a slave writer following it, on fresh stores."""

    def __init__(self, role: str, slave: bool) -> None:
        self._dirs = [tempfile.TemporaryDirectory() for _ in range(1 + slave)]
        ha_port = free_port()
        common = ["--listen", "127.0.0.1:0", "--commitlog-segment-size", str(SEGMENT)]
        self.master = start("services.commitlog", "--store", self._dirs[0].name, *common,
                            "--role", role, "--ha-port", str(ha_port))  # fmt: skip
        self.slave: ServiceProcess | None = None
        if slave:
            self.slave = start("services.commitlog", "--store", self._dirs[1].name, *common,
                               "--role", "slave", "--ha-master", f"127.0.0.1:{ha_port}",
                               "--ha-retry-seconds", "0.2")  # fmt: skip
            self._wait(lambda s: s.replication.in_sync >= 1, CONNECT_TIMEOUT_S, "connect")

    def _wait(self, done, timeout: float, what: str) -> None:
        stub = commitlog_pb2_grpc.CommitLogStub(channel(self.master.address))
        deadline = time.monotonic() + timeout
        while not done(stub.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=5)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the slave did not {what} within {timeout:.0f} s")
            time.sleep(0.02)

    def caught_up(self) -> None:
        """Wait until the slave holds the master's every byte."""
        assert self.slave is not None
        master = commitlog_pb2_grpc.CommitLogStub(channel(self.master.address))
        end = master.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5).max_offset
        self._wait(lambda s: s.replication.acked_offset >= end, CATCH_UP_TIMEOUT_S,
                   f"catch up with offset {end}")  # fmt: skip

    def close(self) -> None:
        for p in (self.slave, self.master):
            if p is not None:
                p.stop()
        for d in self._dirs:
            d.cleanup()


async def _pipelined(address: str, count: int) -> tuple[float, list[float], collections.Counter]:
    reqs = [_batch(k) for k in range(count // BATCH)]
    lat: list[float] = []
    statuses: collections.Counter = collections.Counter()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as ch:
        stub = commitlog_pb2_grpc.CommitLogStub(ch)
        await stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connect
        t0 = time.perf_counter()
        await put_stream.send_all(stub, reqs, WINDOW, lat, statuses=statuses)
        return time.perf_counter() - t0, lat, statuses


def _one_at_a_time(address: str, count: int) -> tuple[list[float], collections.Counter]:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(address))
    stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connect
    req = commitlog_pb2.PutBatchRequest(
        columns=commitlog_pb2.MessageColumns(topic="BenchTopic", body_size=[BODY],
                                             bodies=b"x" * BODY, queue_id=[0], tags=["TagA"]),
        columnar_results=True,
    )  # fmt: skip
    lat: list[float] = []
    statuses: collections.Counter = collections.Counter()
    for _ in range(count):
        t = time.perf_counter()
        reply = stub.PutBatch(req)
        lat.append(time.perf_counter() - t)
        statuses[commitlog_pb2.PutStatus.Name(reply.columns.status)] += 1
    return lat, statuses


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def _status_text(statuses: collections.Counter) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(statuses.items()))


def _poll(address: str, q, stop) -> None:
    """In its own process: (monotonic time, max offset) each time the slave's end moves."""
    stub = commitlog_pb2_grpc.CommitLogStub(channel(address))
    samples: list[tuple[float, int]] = []
    last = -1
    q.put("ready")
    while not stop.is_set():
        end = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5).max_offset
        if end != last:
            samples.append((time.monotonic(), end))
            last = end
        time.sleep(POLL_S)
    q.put(samples)


async def _paced(address: str, batches: int, rate: float) -> list[tuple[float, int]]:
    """Batches at ``rate`` messages/s over one PutStream; (answer time, end offset) each."""
    acks: list[tuple[float, int]] = []
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as ch:
        stub = commitlog_pb2_grpc.CommitLogStub(ch)
        await stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connect
        call = stub.PutStream()

        async def read() -> None:
            for _ in range(batches):
                reply = await call.read()
                if reply is grpc.aio.EOF or reply.status_code:
                    raise RuntimeError(f"put refused: {reply}")
                cols = reply.response.columns
                acks.append((time.monotonic(), cols.phy_offset[-1] + cols.size[-1]))

        reader = asyncio.create_task(read())
        t0 = time.monotonic()
        for k in range(batches):
            await asyncio.sleep(max(0.0, t0 + k * BATCH / rate - time.monotonic()))
            await call.write(_batch(k))
        await call.done_writing()
        await reader
    return acks


def lag(count: int) -> dict:
    pair = Pair("async_master", slave=True)
    try:
        assert pair.slave is not None
        ctx = mp.get_context("spawn")
        q, stop = ctx.Queue(), ctx.Event()
        poller = ctx.Process(target=_poll, args=(pair.slave.address, q, stop))
        poller.start()
        if (ready := q.get(timeout=60)) != "ready":
            raise RuntimeError(f"the poller did not start: {ready!r}")
        t0 = time.monotonic()
        acks = asyncio.run(_paced(pair.master.address, count // BATCH, LAG_RATE))
        sent_s = time.monotonic() - t0
        pair.caught_up()
        time.sleep(0.05)  # a last poll after the slave's last report
        stop.set()
        samples = q.get(timeout=60)
        poller.join(30)
    finally:
        pair.close()
    times, ends = [s[0] for s in samples], [s[1] for s in samples]
    lags = []
    for t_ack, end in acks:
        i = bisect.bisect_left(ends, end)
        if i == len(ends):
            raise RuntimeError(f"the slave was never seen at offset {end}")
        lags.append(max(0.0, times[i] - t_ack))
    return {
        "scenario": f"slave lag, async_master, paced to {LAG_RATE:,} msgs/s",
        "msgs/s": len(acks) * BATCH / sent_s,
        "lag p50 ms": _pct(lags, 0.5),
        "lag p99 ms": _pct(lags, 0.99),
        "lag max ms": max(lags) * 1000,
        "messages": len(acks) * BATCH,
    }


CONFIGS = (("no slave", "async_master", False), ("async slave", "async_master", True),
           ("sync slave", "sync_master", True))  # fmt: skip


def run(scale: Scale = Scale.FULL) -> list[dict]:
    count = scale.pick(200_000, 40_000, 2_000)
    singles = scale.pick(5_000, 1_000, 100)
    lag_count = scale.pick(500_000, 150_000, 10_000)  # 10 s / 3 s / 0.2 s at LAG_RATE
    rows: list[dict] = []
    base = 0.0
    for name, role, slave in CONFIGS:
        pair = Pair(role, slave)
        try:
            cpu0 = cpu_seconds(pair.master.proc.pid)
            scpu0 = cpu_seconds(pair.slave.proc.pid) if pair.slave else 0.0
            seconds, lat, statuses = asyncio.run(_pipelined(pair.master.address, count))
            rate = count / seconds
            base = base or rate
            row = {
                "scenario": f"{name} ({role}), PutStream {WINDOW} in flight, columns",
                "msgs/s": rate, "vs no slave": rate / base,
                "batch p50 ms": _pct(lat, 0.5), "batch p99 ms": _pct(lat, 0.99),
                "master CPU µs/msg": (cpu_seconds(pair.master.proc.pid) - cpu0) / count * 1e6,
                "slave CPU µs/msg": ((cpu_seconds(pair.slave.proc.pid) - scpu0) / count * 1e6
                                     if pair.slave else 0.0),
                "statuses": _status_text(statuses),
            }  # fmt: skip
            if slave:
                pair.caught_up()  # and the slave holds every byte the master wrote
            rows.append(row)
            if role == "sync_master" or not slave:
                one_lat, one_statuses = _one_at_a_time(pair.master.address, singles)
                rows.append({
                    "scenario": f"{name} ({role}), one message at a time",
                    "msgs/s": singles / sum(one_lat), "put p50 ms": _pct(one_lat, 0.5),
                    "put p99 ms": _pct(one_lat, 0.99), "statuses": _status_text(one_statuses),
                })  # fmt: skip
        finally:
            pair.close()
    rows.append(lag(lag_count))
    return rows
