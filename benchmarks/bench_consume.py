"""Consumption through the RocketMQ 5 protocol service: messages received and acknowledged
per second, next to the same clients against a MessagingService that serves prebuilt
messages and stores nothing (``benchmarks.noop_consume``), in the same run.

* the official Python SimpleConsumer (``rocketmq-python-client``): receive batches of 32,
  ack each message: proxy rate / no-op rate;
* our own load generator (``benchmarks.consume_load``): one process of eight receivers,
  batches of 32, one AckMessage per batch (with the generator's own CPU per message);
* end-to-end latency, send → received by four long-polling consumers, at half the lower
  rate the generator reached through the proxy in this run, and at a light 500 msgs/s
  (p50, p99 of the messages sent after the first second);
* the proxy's (or the no-op's) own CPU per message (from /proc, over the run; in the
  latency rows it includes the sends).

In a full run each throughput scenario runs twice (no-op, proxy, no-op, proxy).

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
from rmqstore.queue_files import QueueFiles

ROOT = Path(__file__).resolve().parents[1]
CLIENT_PYTHON = ROOT / "tests" / "clients" / ".venv" / "bin" / "python"
RECEIVE = Path(__file__).parent / "clients" / "python_receive.py"
BODY = 1024
QUEUES = 8
PROCS, RECEIVERS = 1, 8  # the generator's processes and receivers in each: one process
# costs ~80 µs of CPU a message on this 2-core VM, two ~110 (measured against the no-op)
LATENCY_CONSUMERS = 4  # 2 fall behind at ~3,000 msgs/s (p50 0.6 s against 24 ms, 09:14)
LOW_RATE = 500  # msgs/s: latency when the machine is far from saturated


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


def _latency_row(proxy: procs.ServiceProcess, rate: int, seconds: float, tag: str,
                 why: str) -> dict:  # fmt: skip
    cpu0 = procs.cpu_seconds(proxy.proc.pid)
    (lat,) = procs.run_json_all([[sys.executable, "-m", "benchmarks.consume_load", "latency",
                                  proxy.address, f"GLatency{tag}", f"BenchLatency{tag}",
                                  str(rate), str(seconds), str(LATENCY_CONSUMERS)]])  # fmt: skip
    cpu = procs.cpu_seconds(proxy.proc.pid) - cpu0
    return {"scenario": f"send -> receive latency, {rate:,} msgs/s asked ({why})",
            "target": "proxy", "messages": lat["measured"], "msgs/s": lat["rate"],
            "server CPU us/msg": cpu / lat["received"] * 1e6 if lat["received"] else 0.0,
            "p50 ms": lat["p50_ms"], "p99 ms": lat["p99_ms"]}  # fmt: skip


def run(scale: Scale) -> list[dict]:
    client_count = scale.pick(20_000, 3_000, 100)
    load_count = scale.pick(200_000, 20_000, 640)
    latency_s = scale.pick(20.0, 5.0, 1.5)
    rounds = scale.pick(2, 1, 1)
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
            own_rates = []
            for scenario, topic, commands in (
                ("official SimpleConsumer, batch 32, ack each", "BenchClient", lambda t, g: [
                    [str(CLIENT_PYTHON), str(RECEIVE), t, g, "BenchClient", str(client_count)]]),
                (f"own generator, {PROCS} procs x {RECEIVERS} receivers", "BenchLoad",
                 lambda t, g: [
                    [sys.executable, "-m", "benchmarks.consume_load", "rate", t, g, "BenchLoad",
                     str(load_count // PROCS), str(RECEIVERS)] for _ in range(PROCS)]),
            ):  # fmt: skip
                for n in range(rounds):
                    noop_rate = 0.0
                    for target, svc in (("no-op", noop), ("proxy", proxy)):
                        cpu0 = procs.cpu_seconds(svc.proc.pid)
                        results = procs.run_json_all(commands(svc.address, f"G{target}{n}"), env)
                        cpu = procs.cpu_seconds(svc.proc.pid) - cpu0
                        got, rate = _rate(results)
                        row = {
                            "scenario": scenario, "target": target, "messages": got,
                            "msgs/s": rate,
                            "server CPU us/msg": cpu / got * 1e6 if got else 0.0,
                        }  # fmt: skip
                        if "cpu_s" in results[0]:  # our generator reports its own CPU
                            client = sum(r["cpu_s"] for r in results)
                            row["client CPU us/msg"] = client / got * 1e6 if got else 0.0
                        if target == "no-op":
                            noop_rate = rate
                        else:
                            row["of no-op"] = rate / noop_rate if noop_rate else 0.0
                            if topic == "BenchLoad":
                                own_rates.append(rate)
                        rows.append(row)
            half = max(100, int(min(own_rates) / 2))
            rows.append(_latency_row(proxy, half, latency_s, "Half", "half the generator's"))
            rows.append(_latency_row(proxy, LOW_RATE, latency_s, "Low", "light load"))
        finally:
            for p in (noop, proxy, builder, writer):
                p.stop()
    return rows


if __name__ == "__main__":
    t0 = time.time()
    for r in run(Scale.QUICK):
        print(r)
    print(f"{time.time() - t0:.0f}s")
