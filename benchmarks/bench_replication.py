"""Replication: pipelined puts with no slave, an async slave and a sync slave; a slave's lag.

Every row runs real writer processes on loopback: a master (``--role async_master`` or
``sync_master`` with an HA port) and, but for the "no slave" rows, a second writer process as
its slave (``--role slave --ha-master``), each on a fresh store. The three configurations run
side by side and are measured in turn, a chunk each, several rounds (see ``_run``). On a
machine of two cores or more the master and the producer are pinned to one core and the
slave to another, as if the slave ran on its own machine: otherwise the slave's CPU would
come out of the master's and the producer's, and the rows would compare one machine's CPU
shared three ways with it shared two ways.

- **Throughput**: one producer (this process, on ``grpc.aio``, as ``rmqstore put``) sends 1 KiB
  messages as ``MessageColumns`` batches of 100 over one ``PutStream`` with 4 (then 16)
  unanswered, as fast as the master answers; the rate is compared with the no-slave row of
  the same window (a sync put's answer waits for the slave's round trip, so how many batches
  a producer keeps in flight decides how much of it is hidden). Puts are counted
  per status (a sync row is only meaningful if its puts are ``PUT_OK``); after the last
  answer the slave must end with the master's max offset.
- **One at a time**: single-message ``PutBatch`` calls, each waiting for its answer: the
  latency a sync put adds (the slave's round trip) with nothing queued behind it.
- **Lag**: the producer sends batches of 100 paced to ``LAG_RATE`` messages/s to an
  ``async_master``; another process (on the slave's core, which has room to spare) polls the
  slave's ``GetOffsets`` every 2 ms and keeps each (time, max offset) it sees. A batch's lag
  is the time from its answer on the master until the first poll that saw the slave hold its
  last byte (0 when the slave held it before the answer came), so it includes up to one poll
  interval plus one ``GetOffsets``.
"""

import asyncio
import bisect
import collections
import multiprocessing as mp
import os
import tempfile
import time
from contextlib import suppress

import grpc

from benchmarks.procs import ServiceProcess, cpu_seconds, start
from benchmarks.scale import Scale
from rmqstore.server import CHANNEL_OPTIONS, channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.cli import put_stream
from tests.procs import free_port

BODY = 1024
BATCH = 100
WINDOWS = (4, 16)  # PutStream batches in flight
SEGMENT = 256 * 1024 * 1024
LAG_RATE = 50_000  # messages/s
POLL_S = 0.002
CONNECT_TIMEOUT_S = 60.0
WARM_UP = 10_000  # messages put before the clock starts, on each fresh master
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


def _cores(allowed: set[int]) -> tuple[set[int], set[int]] | None:
    """(the master's, the slave's) core: the first two of ``allowed``; None with fewer."""
    mine = sorted(allowed)
    return ({mine[0]}, {mine[1]}) if len(mine) >= 2 else None


def _pin(pid: int, cores: set[int] | None) -> None:
    """Every thread of ``pid`` (0: this process) to ``cores``; threads it starts later
    inherit it."""
    if cores is None:
        return
    for tid in os.listdir(f"/proc/{pid or os.getpid()}/task"):
        with suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cores)


class Pair:
    """A master writer and, with ``slave``, a slave writer following it, on fresh stores."""

    def __init__(self, role: str, slave: bool, cores: tuple[set[int], set[int]] | None,
                 ) -> None:  # fmt: skip
        self._dirs = [tempfile.TemporaryDirectory() for _ in range(1 + slave)]
        ha_port = free_port()
        common = ["--listen", "127.0.0.1:0", "--commitlog-segment-size", str(SEGMENT)]
        self.master = start("services.commitlog", "--store", self._dirs[0].name, *common,
                            "--role", role, "--ha-port", str(ha_port))  # fmt: skip
        _pin(self.master.proc.pid, cores and cores[0])
        self.slave: ServiceProcess | None = None
        if slave:
            self.slave = start("services.commitlog", "--store", self._dirs[1].name, *common,
                               "--role", "slave", "--ha-master", f"127.0.0.1:{ha_port}",
                               "--ha-retry-seconds", "0.2")  # fmt: skip
            _pin(self.slave.proc.pid, cores and cores[1])
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


async def _pipelined(address: str, count: int, window: int,
                     ) -> tuple[float, list[float], collections.Counter]:  # fmt: skip
    reqs = [_batch(k) for k in range(count // BATCH)]
    lat: list[float] = []
    statuses: collections.Counter = collections.Counter()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as ch:
        stub = commitlog_pb2_grpc.CommitLogStub(ch)
        await stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connect
        t0 = time.perf_counter()
        await put_stream.send_all(stub, reqs, window, lat, statuses=statuses)
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


def lag(count: int, cores: tuple[set[int], set[int]] | None) -> dict:
    pair = Pair("async_master", True, cores)
    try:
        assert pair.slave is not None
        ctx = mp.get_context("spawn")
        q, stop = ctx.Queue(), ctx.Event()
        poller = ctx.Process(target=_poll, args=(pair.slave.address, q, stop))
        poller.start()
        _pin(poller.pid or 0, cores and cores[1])  # the slave's core has room to spare
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


def _chunk(pair: Pair, count: int, window: int) -> dict:
    """``count`` pipelined puts to ``pair``'s master; the slave then catches up, untimed."""
    cpu0 = cpu_seconds(pair.master.proc.pid)
    scpu0 = cpu_seconds(pair.slave.proc.pid) if pair.slave else 0.0
    seconds, lat, statuses = asyncio.run(_pipelined(pair.master.address, count, window))
    master_cpu = cpu_seconds(pair.master.proc.pid) - cpu0
    if pair.slave:
        pair.caught_up()  # and the slave holds every byte the master wrote
    return {
        "rate": count / seconds, "lat": lat, "statuses": statuses, "master_cpu": master_cpu,
        # an async slave may still be copying when the last put is answered: its CPU until
        # it has caught up
        "slave_cpu": cpu_seconds(pair.slave.proc.pid) - scpu0 if pair.slave else 0.0,
    }  # fmt: skip


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def run(scale: Scale = Scale.FULL) -> list[dict]:
    before = os.sched_getaffinity(0)
    cores = _cores(before)
    try:
        _pin(0, cores and cores[0])  # the producer: with the master
        return _run(scale, cores)
    finally:
        _pin(0, before)


def _run(scale: Scale, cores: tuple[set[int], set[int]] | None) -> list[dict]:
    """The three configurations run side by side (idle but for the one measured) and are
    measured in turn, a chunk each, ``rounds`` times: the machine's speed, which drifts by
    the minute, drifts alike for each, and each ratio is taken within one round."""
    rounds = scale.pick(5, 3, 1)
    chunk = scale.pick(200_000, 40_000, 2_000) // rounds // BATCH * BATCH
    singles = scale.pick(5_000, 1_000, 100) // rounds
    lag_count = scale.pick(500_000, 150_000, 10_000)  # 10 s / 3 s / 0.2 s at LAG_RATE
    pairs: dict[str, Pair] = {}
    rows: list[dict] = []
    try:
        for name, role, slave in CONFIGS:
            pairs[name] = pair = Pair(role, slave, cores)
            asyncio.run(_pipelined(pair.master.address, min(chunk, WARM_UP), WINDOWS[0]))
            if slave:
                pair.caught_up()
        for window in WINDOWS:
            runs: dict[str, list[dict]] = {name: [] for name, _r, _s in CONFIGS}
            for _ in range(rounds):
                for name, _role, _slave in CONFIGS:
                    runs[name].append(_chunk(pairs[name], chunk, window))
            base = [r["rate"] for r in runs[CONFIGS[0][0]]]
            for name, role, _slave in CONFIGS:
                got = runs[name]
                lat = [x for r in got for x in r["lat"]]
                n = chunk * rounds
                rows.append({
                    "scenario": f"{name} ({role}), PutStream {window} in flight, columns",
                    "msgs/s": _median([r["rate"] for r in got]),
                    "vs no slave": _median([r["rate"] / b for r, b in zip(got, base,
                                                                          strict=True)]),
                    "batch p50 ms": _pct(lat, 0.5), "batch p99 ms": _pct(lat, 0.99),
                    "master CPU µs/msg": sum(r["master_cpu"] for r in got) / n * 1e6,
                    "slave CPU µs/msg": sum(r["slave_cpu"] for r in got) / n * 1e6,
                    "statuses": _status_text(sum((r["statuses"] for r in got),
                                                 collections.Counter())),
                })  # fmt: skip
        ones: dict[str, tuple[list[float], collections.Counter]] = {
            name: ([], collections.Counter()) for name, role, _s in CONFIGS
            if name == "no slave" or role == "sync_master"}  # fmt: skip
        for _ in range(rounds):
            for name, (lat, statuses) in ones.items():
                more, seen = _one_at_a_time(pairs[name].master.address, singles)
                lat += more
                statuses.update(seen)
        for name, (lat, statuses) in ones.items():
            role = next(r for n, r, _s in CONFIGS if n == name)
            rows.append({
                "scenario": f"{name} ({role}), one message at a time",
                "msgs/s": len(lat) / sum(lat), "put p50 ms": _pct(lat, 0.5),
                "put p99 ms": _pct(lat, 0.99), "statuses": _status_text(statuses),
            })  # fmt: skip
    finally:
        for pair in pairs.values():
            pair.close()
    rows.append(lag(lag_count, cores))
    for row in rows:
        row["rounds"] = rounds
    return rows
