"""Put throughput: in-process engine and batched gRPC, against the no-op gRPC ceiling."""

import asyncio
import multiprocessing as mp
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from benchmarks.procs import cpu_seconds, start
from benchmarks.scale import Scale
from rmqstore.server import CHANNEL_OPTIONS, channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.cli import put_stream
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine

BATCH = 100
WINDOW = 4  # PutStream rows: batches a producer has in flight (as ``rmqstore put --inflight``)


def _messages(n: int, body_size: int, offset: int = 0) -> list:
    body = b"x" * body_size
    return [
        common_pb2.Message(
            topic="BenchTopic", queue_id=i % 8, body=body, tags="TagA", keys=f"order-{offset + i}"
        )
        for i in range(n)
    ]


def _columns(n: int, body_size: int, offset: int = 0) -> commitlog_pb2.MessageColumns:
    """The messages of ``_messages`` as one MessageColumns."""
    return commitlog_pb2.MessageColumns(
        topic="BenchTopic",
        body_size=[body_size] * n,
        bodies=b"x" * body_size * n,
        queue_id=[i % 8 for i in range(n)],
        tags=["TagA"],
        keys=[f"order-{offset + i}" for i in range(n)],
    )


def _batch(n: int, body_size: int, offset: int, columns: bool) -> commitlog_pb2.PutBatchRequest:
    if columns:
        return commitlog_pb2.PutBatchRequest(
            columns=_columns(n, body_size, offset), columnar_results=True
        )
    return commitlog_pb2.PutBatchRequest(
        messages=_messages(n, body_size, offset), columnar_results=True
    )


def in_process(body_size: int, flush: str, count: int, columns: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d:
        e = CommitLogEngine(
            WriterConfig(store=Path(d), flush=flush, segment_size=256 * 1024 * 1024)
        )
        make = _columns if columns else _messages
        batches = [make(BATCH, body_size, k * BATCH) for k in range(count // BATCH)]
        cpu0, t0 = time.process_time(), time.perf_counter()
        for b in batches:
            e.put(b)
        dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        e.close()
    n = len(batches) * BATCH
    return {
        "scenario": f"in-process {body_size} B {flush}" + (", columns" if columns else ""),
        "msgs/s": n / dt,
        "MB/s": n * body_size / dt / 1e6,
        "writer CPU µs/msg": cpu / n * 1e6,  # the flusher's thread included
    }


def _producer(*args) -> None:
    """Runs in its own process; any failure reaches the parent instead of hanging it."""
    q = args[4]
    try:
        _produce(*args)
    except BaseException as e:
        q.put(RuntimeError(f"producer {args[3]} failed: {e!r}"))
        raise


def _produce(
    address: str, body_size: int, count: int, pid: int, q, go, stream: bool, window: int,
    columns: bool,
) -> None:  # fmt: skip
    reqs = [_batch(BATCH, body_size, pid * 10**8 + k, columns) for k in range(0, count, BATCH)]
    lat: list[float] = []
    if stream:  # up to ``window`` batches in flight on one long-lived PutStream
        start, end, cpu = asyncio.run(_stream(address, reqs, window, lat, q, go))
    else:
        stub = commitlog_pb2_grpc.CommitLogStub(channel(address))
        stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connect
        q.put("ready")
        go.wait()
        start, cpu0 = time.time(), time.process_time()
        for r in reqs:
            t = time.perf_counter()
            stub.PutBatch(r)
            lat.append(time.perf_counter() - t)
        end, cpu = time.time(), time.process_time() - cpu0
    q.put((len(reqs) * BATCH, start, end, lat, cpu))


async def _stream(address: str, reqs: list, window: int, lat: list[float], q, go,
                  ) -> tuple[float, float, float]:  # fmt: skip
    """``reqs`` over one PutStream, as ``rmqstore put`` sends them (on an event loop): the
    wall-clock start and end, and the CPU seconds between."""
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as ch:
        stub = commitlog_pb2_grpc.CommitLogStub(ch)
        await stub.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connect
        q.put("ready")
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        start, cpu0 = time.time(), time.process_time()
        await put_stream.send_all(stub, reqs, window, lat)
        return start, time.time(), time.process_time() - cpu0


def over_grpc(
    address: str | list[str], body_size: int, producers: int, count: int, stream: bool = False,
    window: int = 1, columns: bool = False, server: int | None = None,
    after: Callable[[], object] | None = None,
) -> dict:
    """Producers in their own processes start together; the rate is over the common span.

    ``address``: one writer, or several (producer i sends to ``address[i % len(address)]``).
    ``stream``: each producer sends its batches over one PutStream instead of PutBatch calls,
    with up to ``window`` batches unanswered. ``columns``: batches as MessageColumns.
    ``_start``/``_end`` (wall-clock seconds) let callers time what happens after the puts;
    ``after()`` runs as soon as every producer has its last answer, before their processes
    are joined (their exit takes tens of ms), and its result is ``_after``.
    CPU time per message: the producers' together, and the ``server`` process's (a pid) from
    the start until the last answer.
    """
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Event()
    addresses = [address] if isinstance(address, str) else address
    ps = [
        ctx.Process(
            target=_producer,
            args=(addresses[i % len(addresses)], body_size, count // producers, i, q, go, stream,
                  window, columns),
        )  # fmt: skip
        for i in range(producers)
    ]
    for p in ps:
        p.start()
    for _ in ps:
        if isinstance(ready := q.get(), Exception):
            raise ready
    server_cpu = cpu_seconds(server) if server else 0.0
    go.set()
    res = [q.get() for _ in ps]
    if server:
        server_cpu = cpu_seconds(server) - server_cpu
    for r in res:
        if isinstance(r, Exception):
            raise r
    followed = after() if after else None
    for p in ps:
        p.join()
    n = sum(r[0] for r in res)
    start, end = min(r[1] for r in res), max(r[2] for r in res)
    lat = sorted(x for r in res for x in r[3])
    return {
        "msgs/s": n / (end - start),
        "MB/s": n * body_size / (end - start) / 1e6,
        "p50 ms": lat[len(lat) // 2] * 1000,
        "p99 ms": lat[int(len(lat) * 0.99)] * 1000,
        **({"server CPU µs/msg": server_cpu / n * 1e6} if server else {}),
        "producers CPU µs/msg": sum(r[4] for r in res) / n * 1e6,
        "_start": start,
        "_end": end,
        "_n": n,
        "_after": followed,
    }


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a live process: its peak resident set size."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(scale: Scale = Scale.FULL) -> list[dict]:
    count = scale.pick(200_000, 20_000, 2_000)
    rows = []
    for size in (128, 1024, 4096):
        rows.append(in_process(size, "async", count))
    rows.append(in_process(1024, "async", count, columns=True))
    rows.append(in_process(1024, "sync", count // 4))
    # each way of sending: (PutStream?, MessageColumns?); columns only for 1 KiB bodies
    ways = {(False, False): "PutBatch", (True, False): f"PutStream ({WINDOW} in flight)",
            (True, True): f"PutStream ({WINDOW} in flight), columns"}  # fmt: skip
    shapes = [(s, w) for s in (128, 1024, 4096) for w in ways if s == 1024 or not w[1]]
    noop = start("benchmarks.noop_server", "127.0.0.1:0")
    try:
        ceiling = {
            (s, p, way): over_grpc(
                noop.address, s, p, count, way[0], WINDOW if way[0] else 1, way[1],
                noop.proc.pid,
            )
            for s, way in shapes
            for p in (1, 4)
        }
    finally:
        noop.stop()
    for flush in ("async", "sync"):
        with tempfile.TemporaryDirectory() as d:
            w = start(
                "services.commitlog",
                "--store",
                d,
                "--listen",
                "127.0.0.1:0",
                "--flush",
                flush,
                "--commitlog-segment-size",
                str(256 * 1024 * 1024),
            )
            try:
                for size, way in shapes:
                    if flush == "sync" and size != 1024:
                        continue
                    for prod in (1, 4):
                        n = count if flush == "async" else count // 4
                        r = over_grpc(
                            w.address, size, prod, n, way[0], WINDOW if way[0] else 1, way[1],
                            w.proc.pid,
                        )
                        how, top = ways[way], ceiling[(size, prod, way)]
                        rows.append(
                            {
                                "scenario": f"gRPC {how} {size} B {flush}, {prod} producer(s)",
                                **{k: r[k] for k in ("msgs/s", "MB/s", "p50 ms", "p99 ms")},
                                "writer CPU µs/msg": r["server CPU µs/msg"],
                                "no-op ceiling msgs/s": top["msgs/s"],
                                "ratio": r["msgs/s"] / top["msgs/s"],
                                "no-op CPU µs/msg": top["server CPU µs/msg"],
                                "writer peak RSS MiB": peak_rss_mib(w.proc.pid),
                            }
                        )
            finally:
                w.stop()
    return rows
