"""Consumption through the RocketMQ 5 protocol service: messages received and acknowledged
per second, next to the same clients against a MessagingService that serves prebuilt
messages and stores nothing (``benchmarks.noop_consume``), in the same run.

* the official Python SimpleConsumer (``rocketmq-python-client``): receive batches of 32,
  ack each message: proxy rate / no-op rate;
* our own load generator (``benchmarks.consume_load``): two processes of four receivers,
  batches of 32, one AckMessage per batch;
* end-to-end latency, send → received by a long-polling consumer, at about half the rate
  the generator reached (p50, p99);
* the proxy's own CPU per message (from /proc, over the run).

The store is filled with 1 KiB messages through the writer beforehand; the consume-queue
builder runs (the proxy reads its files).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import procs
from benchmarks.scale import Scale
from services.proxy.queue_files import QueueFiles

ROOT = Path(__file__).resolve().parents[1]
CLIENT_PYTHON = ROOT / "tests" / "clients" / ".venv" / "bin" / "python"
RECEIVE = Path(__file__).parent / "clients" / "python_receive.py"
BODY = 1024
QUEUES = 8


def _rate(results: list[dict]) -> tuple[int, float]:
    got = sum(r["received"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return got, got / span if span > 0 else 0.0


def _fill(writer: str, store: Path, topic: str, count: int) -> None:
    subprocess.run(
        [sys.executable, "-m", "services.cli.main", "put", "--commitlog", writer, "--topic",
         topic, "--queues", str(QUEUES), "--count", str(count), "--body-size", str(BODY)],
        cwd=ROOT, check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    files = QueueFiles(store)
    deadline = time.monotonic() + 600
    while sum(files.max_offset(topic, q) for q in range(QUEUES)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the consume queues of {topic} were not built in time")
        time.sleep(0.2)  # polling the builder's progress


def run(scale: Scale) -> list[dict]:
    client_count = scale.pick(20_000, 3_000, 100)
    load_count = scale.pick(200_000, 20_000, 640)
    latency_s = scale.pick(20.0, 5.0, 1.0)
    env = {**os.environ, "HOME": tempfile.mkdtemp(prefix="bench-consume-")}  # client logs
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-consume-") as tmp:
        store = Path(tmp) / "store"
        writer = procs.start("services.commitlog", "--store", str(store), "--listen",
                             "127.0.0.1:0", "--commitlog-segment-size", str(256 << 20),
                             "--queues-per-topic", str(QUEUES))  # fmt: skip
        builder = procs.start("services.indexer", "consume-queue", "--store", str(store),
                              "--commitlog", writer.address)  # fmt: skip
        proxy = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                            writer.address, "--store", str(store))  # fmt: skip
        noop = procs.start("benchmarks.noop_consume", "--listen", "127.0.0.1:0")
        try:
            _fill(writer.address, store, "BenchClient", client_count)
            _fill(writer.address, store, "BenchLoad", load_count)
            rates: dict[tuple[str, str], float] = {}
            for scenario, topic, commands in (
                ("official SimpleConsumer, batch 32, ack each", "BenchClient", lambda t, g: [
                    [str(CLIENT_PYTHON), str(RECEIVE), t, g, "BenchClient", str(client_count)]]),
                ("own generator, 2 procs x 4 receivers", "BenchLoad", lambda t, g: [
                    [sys.executable, "-m", "benchmarks.consume_load", "rate", t, g, "BenchLoad",
                     str(load_count // 2), "4"] for _ in range(2)]),
            ):  # fmt: skip
                for target, svc in (("no-op", noop), ("proxy", proxy)):
                    cpu0 = procs.cpu_seconds(svc.proc.pid)
                    results = procs.run_json_all(commands(svc.address, f"G{target}{topic}"), env)
                    cpu = procs.cpu_seconds(svc.proc.pid) - cpu0
                    got, rate = _rate(results)
                    rates[(scenario, target)] = rate
                    row = {
                        "scenario": scenario, "target": target, "messages": got, "msgs/s": rate,
                        "server CPU us/msg": cpu / got * 1e6 if got else 0.0,
                    }  # fmt: skip
                    if target == "proxy":
                        noop_rate = rates[(scenario, "no-op")]
                        row["of no-op"] = rate / noop_rate if noop_rate else 0.0
                    rows.append(row)
            own = rates[("own generator, 2 procs x 4 receivers", "proxy")]
            half = max(100, int(own / 2))
            latency = [sys.executable, "-m", "benchmarks.consume_load", "latency", proxy.address,
                       "GLatency", "BenchLatency", str(half), str(latency_s)]  # fmt: skip
            (lat,) = procs.run_json_all([latency])
            rows.append({"scenario": f"send -> receive latency at {half:,} msgs/s asked",
                         "target": "proxy", "messages": lat["received"], "msgs/s": lat["rate"],
                         "p50 ms": lat["p50_ms"], "p99 ms": lat["p99_ms"]})  # fmt: skip
        finally:
            for p in (noop, proxy, builder, writer):
                p.stop()
    return rows


if __name__ == "__main__":
    t0 = time.time()
    for r in run(Scale.QUICK):
        print(r)
    print(f"{time.time() - t0:.0f}s")
