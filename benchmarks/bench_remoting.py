"""The RocketMQ 4.x remoting front end: sends per second through it into the store, next to
the same load against a remoting server that stores nothing (``benchmarks.noop_remoting``,
same connection code), in the same run.

* synchronous: 4 connections (2 sending processes of 2), one message of 1 KiB per call, each
  waiting for its answer (RocketMQ's benchmark Producer, sync, 4 threads);
* pipelined: 2 connections (2 processes), 32 sends unanswered on each;
* the front end's CPU per message (from /proc, over the run), the writer's, the senders'.

Two more targets split the front end's gap to the no-op: a second front end whose puts go to
a put socket that stores nothing (``benchmarks.noop_put_socket``): the front end and the hop
to a writer process, without the append; and the no-op putting each send through that socket
as the front end does (``noop_remoting --put-socket``): the no-op and the hop, the ceiling of
any front end that stores through a writer process over the put socket. A last one appends
with no hop at all: the no-op putting each send through the same batching into a writer engine
in its own process (``noop_remoting --append-in-process``): the ceiling of any front end that
stores with this append path, whatever the process layout.

All rows use the benchmark Producer's binary header (``benchmarks.remoting_load``). The
writer runs with asynchronous flush and without builders; the front end puts over the
writer's Unix socket, as under ``rmqstore serve``. Each scenario runs the four targets one
after the other, ``rounds`` times: this machine's speed moves by the minute, so a ratio is
only meaningful within a round.
"""

import os
import sys
import tempfile
import time

from benchmarks import procs
from benchmarks.scale import Scale
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc

BODY = 1024


def _max_offset(writer: str) -> int:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer))
    return stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset


def _rate(results: list[dict]) -> tuple[int, float]:
    sent = sum(r["sent"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return sent, sent / span if span > 0 else 0.0


def run(scale: Scale) -> list[dict]:
    sync_count = scale.pick(20_000, 2_000, 40)
    piped_count = scale.pick(100_000, 10_000, 200)
    rounds = scale.pick(3, 1, 1)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-remoting-") as tmp:
        writer = procs.start("services.commitlog", "--store", f"{tmp}/store", "--listen",
                             "127.0.0.1:0", "--commitlog-segment-size", str(256 << 20),
                             "--put-socket", f"{tmp}/writer.sock")  # fmt: skip
        broker = procs.start("services.remoting", "--store", f"{tmp}/store", "--listen",
                             "127.0.0.1:0", "--commitlog",
                             writer.address, "--commitlog-socket", f"{tmp}/writer.sock",
                             "--query", "127.0.0.1:1")  # fmt: skip
        noop = procs.start("benchmarks.noop_remoting", "--listen", "127.0.0.1:0")
        nothing = procs.start("benchmarks.noop_put_socket", "--socket", f"{tmp}/nothing.sock")
        hollow = procs.start("services.remoting", "--store", f"{tmp}/store", "--listen",
                             "127.0.0.1:0", "--commitlog",
                             writer.address, "--commitlog-socket", f"{tmp}/nothing.sock",
                             "--query", "127.0.0.1:1")  # fmt: skip
        hop = procs.start("benchmarks.noop_remoting", "--listen", "127.0.0.1:0",
                          "--put-socket", f"{tmp}/nothing.sock")  # fmt: skip
        inline = procs.start("benchmarks.noop_remoting", "--listen", "127.0.0.1:0",
                             "--append-in-process", f"{tmp}/inline-store")  # fmt: skip
        targets = [("no-op", noop, None), ("remoting", broker, writer),
                   ("remoting, writer stores nothing", hollow, nothing),
                   ("no-op through a writer hop", hop, nothing),
                   ("no-op appending in process, no hop", inline, inline)]  # fmt: skip
        try:
            noop_rates: dict[tuple[str, int], float] = {}
            for scenario, count, processes, connections, inflight in (
                ("sync, 4 connections", sync_count, 2, 2, 1),
                ("pipelined, 32 in flight x 2", piped_count, 2, 1, 32),
            ):
                for round_ in range(1, rounds + 1):
                    for target, svc, store in targets:
                        topic = "BenchRemoting"
                        before = _max_offset(writer.address)
                        cpu0 = procs.cpu_seconds(svc.proc.pid)
                        store_cpu0 = procs.cpu_seconds(store.proc.pid) if store else 0.0
                        commands = [
                            [sys.executable, "-m", "benchmarks.remoting_load", svc.address, topic,
                             str(count // processes), str(connections), str(inflight),
                             str(BODY)] for _ in range(processes)
                        ]  # fmt: skip
                        results = procs.run_json_all(commands, None, True)
                        cpu = procs.cpu_seconds(svc.proc.pid) - cpu0
                        store_cpu = procs.cpu_seconds(store.proc.pid) - store_cpu0 if store else 0.0
                        senders = sum(r["cpu"] for r in results)
                        sent, rate = _rate(results)
                        stored = _max_offset(writer.address) - before
                        if store is writer and stored < sent * BODY:
                            raise RuntimeError(f"{scenario}: {sent} sent, {stored} B stored")
                        row = {
                            "scenario": scenario, "round": round_, "target": target,
                            "messages": sent, "msgs/s": rate,
                            "server CPU us/msg": cpu / sent * 1e6 if sent else 0.0,
                            "senders CPU us/msg": senders / sent * 1e6 if sent else 0.0,
                            "load": os.getloadavg()[0],
                        }  # fmt: skip
                        if store is None:
                            noop_rates[(scenario, round_)] = rate
                        else:
                            noop_rate = noop_rates[(scenario, round_)]
                            row["of no-op"] = rate / noop_rate if noop_rate else 0.0
                            if store is not svc:  # (in process: all in the server's CPU)
                                row["writer CPU us/msg"] = store_cpu / sent * 1e6 if sent else 0.0
                        rows.append(row)
        finally:
            for p in (inline, hop, hollow, nothing, noop, broker, writer):
                p.stop()
    return rows


if __name__ == "__main__":
    t0 = time.time()
    for r in run(Scale.QUICK):
        print(r)
    print(f"{time.time() - t0:.0f}s")
