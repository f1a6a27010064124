"""End to end: stored *and indexed* msgs/s (writer + both builders as processes; producers
on PutStream with 4 batches in flight, as ``rmqstore put --inflight 4``) with the CPU time
each process spent per message until both builders had caught up and how long after the
last put that was (how far behind the builders are at the full rate), the dispatch lag of
each builder at half of that rate, and how fast both builders catch up on a commitlog
written before they started (as when an existing store is served for the first time: the
writer decodes its dispatch records from the segment files)."""

import tempfile
import threading
import time
from pathlib import Path

from benchmarks.bench_put import WINDOW, _messages, over_grpc, peak_rss_mib
from benchmarks.procs import cpu_seconds, start
from benchmarks.scale import Scale
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, indexer_pb2, indexer_pb2_grpc

SEGMENT = str(256 * 1024 * 1024)


def _node(store: str, segment: str = SEGMENT):
    w = start(
        "services.commitlog",
        "--store",
        store,
        "--listen",
        "127.0.0.1:0",
        "--commitlog-segment-size",
        segment,
    )
    cq = start(
        "services.indexer",
        "consume-queue",
        "--store",
        store,
        "--commitlog",
        w.address,
        "--listen",
        "127.0.0.1:0",
    )
    ix = start(
        "services.indexer",
        "index",
        "--store",
        store,
        "--commitlog",
        w.address,
        "--listen",
        "127.0.0.1:0",
    )
    return w, cq, ix


def _progress(addr: str):
    return indexer_pb2_grpc.BuilderStub(channel(addr))


def stored_and_indexed(count: int, producers: int, columns: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d:
        w, cq, ix = _node(d)
        try:
            procs = {"writer": w, "cq": cq, "index": ix}
            writer = commitlog_pb2_grpc.CommitLogStub(channel(w.address))
            stubs = [_progress(cq.address), _progress(ix.address)]
            writer.GetOffsets(commitlog_pb2.GetOffsetsRequest())  # connected before the puts
            for s in stubs:
                s.GetProgress(indexer_pb2.GetProgressRequest())
            cpu = {k: cpu_seconds(p.proc.pid) for k, p in procs.items()}

            def built() -> tuple[int, float, dict[str, float]]:
                """Once every put is answered: the commitlog's end, when both builders had
                built up to it, and each process's CPU time until then."""
                end = writer.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
                request = indexer_pb2.GetProgressRequest()
                while any(s.GetProgress(request).built_offset < end for s in stubs):
                    time.sleep(0.001)
                at = time.time()
                return end, at, {k: cpu_seconds(p.proc.pid) - cpu[k] for k, p in procs.items()}

            put = over_grpc(w.address, 1024, producers, count, True, WINDOW, columns, after=built)
            end, built_at, cpu = put["_after"]
            built = built_at - put["_start"]
            while any(
                s.GetProgress(indexer_pb2.GetProgressRequest()).durable_offset < end for s in stubs
            ):
                time.sleep(0.01)
            durable = time.time() - put["_start"]
            rss = {
                n: peak_rss_mib(p.proc.pid) for n, p in (("writer", w), ("cq", cq), ("index", ix))
            }
        finally:
            for p in (ix, cq, w):
                p.stop()
    n = put["_n"]
    per_msg = {f"{k} CPU µs/msg": v / n * 1e6 for k, v in cpu.items()}
    per_msg["producers CPU µs/msg"] = put["producers CPU µs/msg"]
    return {
        "scenario": f"stored+indexed 1 KiB, {producers} producer(s), async"
        + (", columns" if columns else ""),
        "put msgs/s": put["msgs/s"],
        "stored+indexed msgs/s": n / built,
        "stored+indexed+flushed msgs/s": n / durable,
        # at the full rate: how far behind the builders were when the puts ended
        "built ms after the last put": (built_at - put["_end"]) * 1000,
        **per_msg,
        "total CPU µs/msg": sum(per_msg.values()),
        **{f"peak RSS {k} MiB": v for k, v in rss.items()},
    }


def lag_at_rate(rate: float, seconds: float) -> dict:
    """Put 100-message batches at ``rate`` msgs/s; per batch, time until each builder built it."""
    with tempfile.TemporaryDirectory() as d:
        w, cq, ix = _node(d)
        try:
            stub = commitlog_pb2_grpc.CommitLogStub(channel(w.address))
            marks: list[tuple[int, float]] = []
            done = threading.Event()
            lags: dict[str, list[float]] = {"consume-queue": [], "index": []}

            def watch(name: str, addr: str) -> None:
                s = _progress(addr)
                i = 0
                while not (done.is_set() and i >= len(marks)):
                    built = s.GetProgress(indexer_pb2.GetProgressRequest()).built_offset
                    now = time.perf_counter()
                    while i < len(marks) and marks[i][0] <= built:
                        lags[name].append(now - marks[i][1])
                        i += 1
                    time.sleep(0.001)

            watchers = [
                threading.Thread(target=watch, args=a)
                for a in (("consume-queue", cq.address), ("index", ix.address))
            ]
            for t in watchers:
                t.start()
            interval = 100 / rate
            batches = int(seconds / interval)
            t0 = time.perf_counter()
            for k in range(batches):
                t_put = time.perf_counter()
                r = stub.PutBatch(
                    commitlog_pb2.PutBatchRequest(
                        messages=_messages(100, 1024, k * 100), columnar_results=True
                    )
                ).columns
                marks.append((r.phy_offset[-1] + r.size[-1], t_put))
                delay = t0 + (k + 1) * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            done.set()
            for t in watchers:
                t.join(60)
        finally:
            for p in (ix, cq, w):
                p.stop()
    row: dict[str, object] = {"scenario": f"dispatch lag at {rate:,.0f} msgs/s"}
    for name, xs in lags.items():
        xs.sort()
        row[f"{name} p50 ms"] = xs[len(xs) // 2] * 1000 if xs else float("nan")
        row[f"{name} p99 ms"] = xs[int(len(xs) * 0.99)] * 1000 if xs else float("nan")
    return row


def catch_up(total_bytes: int) -> dict:
    """Both builders, started on a store whose commitlog is already written, until each has
    built all of it (the writer started and recovered first: not counted)."""
    from benchmarks.bench_rebuild import write_synthetic

    segment = 1024 * 1024 * 1024
    with tempfile.TemporaryDirectory() as d:
        size, records = write_synthetic(Path(d), total_bytes, segment)
        w = start("services.commitlog", "--store", d, "--listen", "127.0.0.1:0",
                  "--commitlog-segment-size", str(segment))  # fmt: skip
        builders = []
        try:
            end = (
                commitlog_pb2_grpc.CommitLogStub(channel(w.address))
                .GetOffsets(commitlog_pb2.GetOffsetsRequest())
                .max_offset
            )
            t0 = time.time()
            for kind in ("consume-queue", "index"):
                builders.append(start("services.indexer", kind, "--store", d, "--commitlog",
                                      w.address, "--listen", "127.0.0.1:0"))  # fmt: skip
            stubs = [_progress(b.address) for b in builders]
            while any(
                s.GetProgress(indexer_pb2.GetProgressRequest()).built_offset < end for s in stubs
            ):
                time.sleep(0.01)
            secs = time.time() - t0
        finally:
            for p in (*builders, w):
                p.stop()
    return {
        "scenario": f"catch-up: both builders from offset 0 of a {size / 2**20:,.0f} MiB commitlog",
        "seconds": secs,
        "stored+indexed msgs/s": records / secs,
        "MiB/s": size / 2**20 / secs,
    }


def run(scale: Scale = Scale.FULL) -> list[dict]:
    count = scale.pick(300_000, 20_000, 2_000)
    rows = [stored_and_indexed(count, p, c) for c in (False, True) for p in (1, 4)]
    best = max(r["stored+indexed msgs/s"] for r in rows)
    rows.append(lag_at_rate(best / 2, scale.pick(15, 3, 1)))
    rows.append(catch_up(scale.pick(1024, 64, 4) * 2**20))
    return rows
