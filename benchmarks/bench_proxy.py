"""The RocketMQ 5 protocol service: sends per second through the proxy into the store, next
to the same clients against a MessagingService that stores nothing, in the same run.

* the official Python producer (``rocketmq-python-client``): synchronous ``send`` from
  4 processes (more senders than cores: the machine is saturated) and from 2, and
  ``send_async`` with many in flight: proxy rate / no-op rate;
* our own load generator (``benchmarks.proxy_load``): requests of 32 messages of 1 KiB, 8 in
  flight, and of 128 messages, 4 in flight, from two processes each;
* the proxy's own CPU per message (from /proc, over the run), the writer's, and the sending
  processes' (the clients are the bottleneck of their own rows: on this 2-core machine every
  microsecond the proxy and the writer spend is taken from them);
* for synchronous sends, a third target: a second proxy whose puts go to a put socket that
  stores nothing (``benchmarks.noop_put_socket``), so what it costs is the proxy and the hop
  to a writer process, without the append: the ceiling of this design on this machine.

Each scenario runs the no-op and the proxy one after the other, ``rounds`` times (3 at full
scale): this machine's speed moves by the minute, so a ratio is only meaningful within a
round, and the rounds show the spread. Every sending process is set up (imports, routes, a
warm-up send) before any of them starts sending, so no start-up overlaps the measured part;
the senders' CPU counts that part only.

The writer runs with asynchronous flush and without builders (what is measured is the path
from a RocketMQ client into the commitlog); the proxy puts over the writer's Unix socket, as
under ``rmqstore serve``.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import procs
from benchmarks.scale import Scale
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
CLIENT_PYTHON = ROOT / "tests" / "clients" / ".venv" / "bin" / "python"
SEND = Path(__file__).parent / "clients" / "python_send.py"
BODY = 1024


def _rate(results: list[dict]) -> tuple[int, float]:
    sent = sum(r["sent"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return sent, sent / span if span > 0 else 0.0


def _max_offset(writer: str) -> int:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer))
    return stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset


def run(scale: Scale) -> list[dict]:
    sync_each = scale.pick(3000, 300, 10)
    sync_procs = scale.pick(4, 2, 2)
    async_count = scale.pick(20_000, 2_000, 50)
    load_each = scale.pick(200_000, 20_000, 640)
    rounds = scale.pick(3, 1, 1)
    env = {**os.environ, "HOME": tempfile.mkdtemp(prefix="bench-proxy-")}  # the client's logs
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        writer = procs.start("services.commitlog", "--store", f"{tmp}/store", "--listen",
                             "127.0.0.1:0", "--commitlog-segment-size", str(256 << 20),
                             "--put-socket", f"{tmp}/writer.sock")  # fmt: skip
        proxy = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                            writer.address, "--commitlog-socket", f"{tmp}/writer.sock")  # fmt: skip
        noop = procs.start("benchmarks.noop_messaging", "--listen", "127.0.0.1:0")
        nothing = procs.start("benchmarks.noop_put_socket", "--socket", f"{tmp}/nothing.sock")
        hop = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                          writer.address, "--commitlog-socket", f"{tmp}/nothing.sock")  # fmt: skip
        try:
            rates: dict[tuple[str, str], float] = {}
            for scenario, commands in (
                ("client sync", lambda t, topic: [
                    [str(CLIENT_PYTHON), str(SEND), t, topic, "sync", str(sync_each), "1",
                     str(BODY)] for _ in range(sync_procs)]),
                ("client sync 2 processes", lambda t, topic: [
                    [str(CLIENT_PYTHON), str(SEND), t, topic, "sync", str(2 * sync_each), "1",
                     str(BODY)] for _ in range(2)]),
                ("client async", lambda t, topic: [
                    [str(CLIENT_PYTHON), str(SEND), t, topic, "async", str(async_count), "256",
                     str(BODY)]]),
                ("own generator 32x8", lambda t, topic: [
                    [sys.executable, "-m", "benchmarks.proxy_load", t, topic, str(load_each),
                     "32", "8", str(BODY)] for _ in range(2)]),
                ("own generator 128x4", lambda t, topic: [
                    [sys.executable, "-m", "benchmarks.proxy_load", t, topic, str(load_each),
                     "128", "4", str(BODY)] for _ in range(2)]),
            ):  # fmt: skip
                targets = [("no-op", noop, None), ("proxy", proxy, writer)]
                if scenario.startswith("client sync"):
                    targets.append(("proxy, writer stores nothing", hop, nothing))
                for round_, target, svc, store in [
                    (r, *t) for r in range(1, rounds + 1) for t in targets
                ]:  # fmt: skip
                    topic = f"Bench{scenario.title().replace(' ', '')}"
                    before = _max_offset(writer.address)
                    cpu0 = procs.cpu_seconds(svc.proc.pid)
                    writer_cpu0 = procs.cpu_seconds(store.proc.pid) if store else 0.0
                    results = procs.run_json_all(commands(svc.address, topic), env, True)
                    clients = sum(r["cpu"] for r in results)
                    cpu = procs.cpu_seconds(svc.proc.pid) - cpu0
                    writer_cpu = procs.cpu_seconds(store.proc.pid) - writer_cpu0 if store else 0.0
                    sent, rate = _rate(results)
                    stored = _max_offset(writer.address) - before
                    if target == "proxy" and stored < sent * BODY:
                        raise RuntimeError(f"{scenario}: {sent} sent, only {stored} bytes stored")
                    rates[(scenario, target)] = rate
                    row = {
                        "scenario": scenario, "round": round_, "target": target,
                        "messages": sent, "msgs/s": rate,
                        "server CPU us/msg": cpu / sent * 1e6 if sent else 0.0,
                        "senders CPU us/msg": clients / sent * 1e6 if sent else 0.0,
                        "load": os.getloadavg()[0],
                    }  # fmt: skip
                    if store is not None:
                        noop_rate = rates[(scenario, "no-op")]
                        row["of no-op"] = rate / noop_rate if noop_rate else 0.0
                        row["writer CPU us/msg"] = writer_cpu / sent * 1e6 if sent else 0.0
                        if store is writer:
                            row["MB/s into store"] = stored / 1e6 / (sent / rate) if rate else 0.0
                    rows.append(row)
        finally:
            for p in (hop, nothing, noop, proxy, writer):
                p.stop()
    return rows


if __name__ == "__main__":
    t0 = time.time()
    for r in run(Scale.QUICK):
        print(r)
    print(f"{time.time() - t0:.0f}s")
