"""The writer's background services, through real processes (writer + builders).

* Delivery lateness: N delayed messages (100,000 in the full run) are put over a few seconds,
  spread over three delay levels, so that all of them are pending before the first is due.
  A poller reads the real topic's consume-queue files every few ms and notes when each unit
  appears; lateness = appearance - delivery time (store time + the level's delay). Also the
  lateness by the delivered record's own store time (the writer's side alone).
* Retention's effect on puts: segments are filled, then put latency is measured while no
  segment has expired yet (baseline) and while retention deletes the expired ones (the
  writer's GetStatus counts the deletions, so the window is known).
"""

import random
import tempfile
import threading
import time
from collections.abc import Sequence

import numpy as np

from benchmarks.procs import ServiceProcess, start
from benchmarks.scale import Scale
from rmqstore.formats import commitlog
from rmqstore.layout import StoreLayout
from rmqstore.schedule_queue import ScheduleQueue
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, indexer_pb2, indexer_pb2_grpc

MIB = 1024 * 1024
TOPIC = "Late"
QUEUES = 4


def _services(store: str, writer_args: tuple[str, ...], index: bool) -> list[ServiceProcess]:
    w = start("services.commitlog", "--store", store, "--listen", "127.0.0.1:0",
              "--flush-interval-ms", "50", *writer_args)  # fmt: skip
    procs = [w]
    builders = ("consume-queue", "index") if index else ("consume-queue",)
    for name in builders:
        extra = ("--index-slots", "50000", "--index-entries", "200000") if name == "index" else ()
        procs.append(start("services.indexer", name, "--store", store, "--commitlog", w.address,
                           "--listen", "127.0.0.1:0", "--flush-interval-ms", "50",
                           *extra))  # fmt: skip
    return procs


def _stop(procs: list[ServiceProcess]) -> None:
    for p in reversed(procs):
        p.stop()


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


# -- delivery lateness ------------------------------------------------------------------------
def lateness(count: int, levels: str, put_seconds: float) -> dict:
    level_ms = [int(t[:-1]) * 1000 for t in levels.split()]
    with tempfile.TemporaryDirectory(prefix="bench-delivery-") as d:
        procs = _services(d, ("--delay-levels", levels), index=False)
        try:
            stub = commitlog_pb2_grpc.CommitLogStub(channel(procs[0].address))
            due: dict[str, int] = {}
            batch = 500
            t0 = time.monotonic()
            for first in range(0, count, batch):
                msgs = [common_pb2.Message(topic=TOPIC, queue_id=i % QUEUES, body=b"x" * 64,
                                           delay_level=1 + i % len(level_ms))
                        for i in range(first, min(first + batch, count))]  # fmt: skip
                resp = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=30)
                for m, r in zip(msgs, resp.results, strict=True):
                    due[r.unique_key] = r.store_timestamp + level_ms[m.delay_level - 1]
                pause = t0 + put_seconds * (first + batch) / count - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            put_done = int(time.time() * 1000)
            first_due = min(due.values())
            assert put_done < first_due, "messages became due before all were put"
            seen = _watch(StoreLayout.of(d), count, timeout=max(level_ms) / 1000 + 120)
            phys = sorted(seen)
            delivered: dict[int, commitlog.Record] = {}
            for i in range(0, len(phys), 1000):
                chunk = phys[i : i + 1000]
                raws = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=chunk),
                                        timeout=60).records  # fmt: skip
                delivered.update((p, commitlog.decode(r)) for p, r in zip(chunk, raws, strict=True))
            status = stub.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10).delivery
        finally:
            _stop(procs)
    late = [seen[p] - due[rec.uniq_key] for p, rec in delivered.items()]
    store_late = [rec.store_timestamp - due[rec.uniq_key] for rec in delivered.values()]
    assert len({rec.uniq_key for rec in delivered.values()}) == count
    assert min(store_late) >= 0, "a message was delivered before its time"
    return {
        "scenario": f"delivery, {count:,} pending over levels {levels}",
        "delivered": len(delivered),
        "lateness p50 ms (in consume queue)": _pct(late, 50),
        "lateness p99 ms (in consume queue)": _pct(late, 99),
        "lateness max ms": max(late),
        "store-time lateness p99 ms": _pct(store_late, 99),
        "possible duplicates": status.possible_duplicates,
    }


def _watch(layout: StoreLayout, count: int, timeout: float) -> dict[int, int]:
    """Poll the real topic's consume queues; commitlog offset -> ms it was first seen."""
    queues = [ScheduleQueue(layout.queue_dir(TOPIC, q)) for q in range(QUEUES)]
    next_offset = [0] * QUEUES
    seen: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(seen)} of {count} delivered in time")
            now = int(time.time() * 1000)
            for q, queue in enumerate(queues):
                units = queue.read(next_offset[q], 2048)
                next_offset[q] += len(units)
                for phy, _size, _code in units:
                    seen.setdefault(phy, now)
            time.sleep(0.002)
    finally:
        for queue in queues:
            queue.close()
    return seen


# -- retention's effect on puts ---------------------------------------------------------------
def put_latency_during_deletion(segment: int, segments: int, retention_s: float) -> dict:
    args = ("--commitlog-segment-size", str(segment), "--retention-hours",
            str(retention_s / 3600), "--delete-when", "always",
            "--retention-check-seconds", "0.2")  # fmt: skip
    rng = random.Random(0)
    filler = rng.randbytes(16 * 1024)
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as d:
        procs = _services(d, args, index=True)
        try:
            stub = commitlog_pb2_grpc.CommitLogStub(channel(procs[0].address))
            t_fill = time.monotonic()
            msgs = [common_pb2.Message(topic="Fill", queue_id=i % QUEUES, body=filler,
                                       keys=f"f{i}") for i in range(64)]  # fmt: skip
            fill = segment * segments
            while stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset < fill:
                stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=30)
            fill_s = time.monotonic() - t_fill
            _caught_up(procs[1:], stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset)
            samples = _timed_puts(stub, until=lambda: _deleted(stub) >= segments - 1,
                                  timeout=retention_s + fill_s + 120)  # fmt: skip
            deletions = _deletion_window(samples)
        finally:
            _stop(procs)
    before = [lat for t, lat, deleted in samples if deleted == 0 and t < deletions[0] - 0.5]
    during = [lat for t, lat, _ in samples if deletions[0] <= t <= deletions[1]]
    p99_before, p99_during = _pct(before, 99), _pct(during, 99)
    return {
        "scenario": f"puts while retention deletes {segments - 1} segments of "
        f"{segment / MIB:,.0f} MiB",
        "puts before": len(before),
        "puts during": len(during),
        "put p99 ms, no deletion": p99_before,
        "put p99 ms, during deletion": p99_during,
        "ratio during/before": p99_during / p99_before,
    }


def _caught_up(builders: list[ServiceProcess], end: int) -> None:
    """Wait until both builders have made ``end`` durable (so the baseline is not measured
    while they catch up with the filler)."""
    for b in builders:
        stub = indexer_pb2_grpc.BuilderStub(channel(b.address))
        deadline = time.monotonic() + 300
        while stub.GetProgress(indexer_pb2.GetProgressRequest(), timeout=10).durable_offset < end:
            if time.monotonic() > deadline:
                raise AssertionError(f"builder at {b.address} did not catch up")
            time.sleep(0.05)


def _deleted(stub: commitlog_pb2_grpc.CommitLogStub) -> int:
    status = stub.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10)
    return int(status.retention.deleted_segments)


def _timed_puts(stub, until, timeout: float) -> list[tuple[float, float, int]]:
    """Paced puts of 10 x 1 KiB (every 5 ms) until ``until()`` and a sample has seen the final
    deletion count: (time, latency ms, deleted segments so far) each; the deletion count is
    polled in a thread."""
    deleted = [_deleted(stub)]
    if deleted[0]:
        raise AssertionError("retention deleted segments before the baseline puts began: give "
                             "the benchmark a longer retention time")
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            deleted[0] = _deleted(stub)
            done.wait(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    msgs = [common_pb2.Message(topic="Timed", body=b"y" * 1024) for _ in range(10)]
    request = commitlog_pb2.PutBatchRequest(messages=msgs)
    out: list[tuple[float, float, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while not (until() and out and out[-1][2] >= _deleted(stub)):
            if time.monotonic() > deadline:
                raise AssertionError("retention deleted too little in time")
            for _ in range(20):
                t0 = time.perf_counter()
                stub.PutBatch(request, timeout=30)
                out.append((time.monotonic(), (time.perf_counter() - t0) * 1000, deleted[0]))
                time.sleep(0.005)
    finally:
        done.set()
        poller.join()
    return out


def _deletion_window(samples: list[tuple[float, float, int]]) -> tuple[float, float]:
    """From just before the first deletion was seen to just after the last."""
    first = next(t for t, _lat, n in samples if n > 0)
    last_count = samples[-1][2]
    last = next(t for t, _lat, n in samples if n == last_count)
    return first - 0.1, last + 0.1


def run(scale: Scale) -> list[dict]:
    count = scale.pick(100_000, 10_000, 300)
    levels = scale.pick("20s 25s 30s", "4s 6s 8s", "1s 2s")
    put_s = scale.pick(12.0, 2.0, 0.2)
    rows = [lateness(count, levels, put_s)]
    segment = scale.pick(64 * MIB, 16 * MIB, MIB)
    rows.append(put_latency_during_deletion(segment, scale.pick(6, 4, 3),
                                            scale.pick(30.0, 10.0, 6.0)))  # fmt: skip
    return rows


def main() -> None:  # pragma: no cover - by hand: python -m benchmarks.bench_delivery
    for row in run(Scale.QUICK):
        print(row)


if __name__ == "__main__":
    main()
