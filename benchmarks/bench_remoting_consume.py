"""RocketMQ 4.x consumers through the remoting front end: messages pulled per second, and the
send → receive latency with long polling, next to a remoting server that stores nothing
(``benchmarks.noop_remoting``, same connection code) driven the same way, in the same run.

* pull throughput: one connection, one pull in flight on each of the topic's 4 queues (a push
  consumer's way), batches of 32 1 KiB records, from offset 0 of queues filled beforehand
  (``benchmarks.remoting_pull_load rate``); then 4 groups reading a quarter of it each at
  once (16 pulls in flight); then one group whose pulls commit the offset they pull from
  (sysFlag 0x1, as a push consumer's do: the broker passes those commits on to the proxy,
  which owns consumer progress). The no-op answers every pull with a full prebuilt batch. Each
  round runs the no-op, then the front end: this machine's speed moves by the minute, so a
  ratio is only meaningful within a round.
* latency: RATE sends per second (the send time in the body) to a new topic, received by
  long-polling pulls of its 4 queues; p50 and p99 of those sent after the first second. The
  no-op keeps the sends in memory and holds empty pulls until the next send (``--keep``).
  The sender pipelines (it does not wait for answers), so the front end's batch lingers while
  its sends keep arriving (``--batch-linger-ms``, 16 ms): a second front end with
  ``--batch-linger-ms 0`` on the same store shows what that wait adds and what it saves.
* the server's CPU per message (from /proc, over the run; in the latency rows it includes the
  sends), the puller's own, and in the front end's pull rows the query service's and the
  writer's (a pull reads the store's files itself: both should stay near zero) and the
  proxy's (the commits).

The queues are filled through the front end (``benchmarks.remoting_load``, pipelined); the
writer runs with asynchronous flush, the consume-queue builder and the query service beside
it, and the proxy, as under ``rmqstore serve``.
"""

import itertools
import sys
import tempfile
import time

from benchmarks import procs
from benchmarks.scale import Scale
from rmqstore.server import channel
from rmqstore.v1 import query_pb2, query_pb2_grpc

QUEUES = 4  # remoting_load sends to queue (connection % 4)
BODY = 1024
TOPIC = "BenchPull"
RATES = (500, 2000)  # latency: a light load, and a busier one
SCENARIOS = (  # name, groups, whether the pulls commit
    (f"pull, 1 group: {QUEUES} queues x 1 in flight, batch 32", 1, False),
    (f"pull, 4 groups: {4 * QUEUES} pulls in flight, batch 32", 4, False),
    (f"pull, 1 group committing with each pull: {QUEUES} queues x 1 in flight, batch 32", 1,
     True),
)


def _stored(query: str, topic: str) -> int:
    stub = query_pb2_grpc.QueryStub(channel(query))
    total = 0
    for q in range(QUEUES):
        req = query_pb2.QueueOffsetsRequest(topic=topic, queue_id=q)
        total += stub.QueueOffsets(req, timeout=30).max_offset
    return total


def _fill(broker: str, query: str, count: int) -> None:
    """``count`` messages (and one per connection before them) over the 4 queues."""
    procs.run_json_all([[sys.executable, "-m", "benchmarks.remoting_load", broker, TOPIC,
                         str(count), str(QUEUES), "32", str(BODY)]], None, True)  # fmt: skip
    deadline = time.monotonic() + 600
    while _stored(query, TOPIC) < count + QUEUES:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the consume queues of {TOPIC} were not built in time")
        time.sleep(0.2)  # polling the builder's progress


def _load(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.remoting_pull_load", *args]


def _pull_row(svc: procs.ServiceProcess, hops: dict[str, procs.ServiceProcess], group: str,
              count: int, groups: int, commit: bool) -> dict:  # fmt: skip
    """One pull run: rate and CPU per message of ``svc`` and of ``hops`` (by name)."""
    every = (svc, *hops.values())
    cpu0 = [procs.cpu_seconds(p.proc.pid) for p in every]
    load = _load("rate", svc.address, group, TOPIC, str(QUEUES), str(count // groups),
                 str(groups), *(["commit"] if commit else []))  # fmt: skip
    (r,) = procs.run_json_all([load], None, True)
    cpu = [procs.cpu_seconds(p.proc.pid) - c for p, c in zip(every, cpu0, strict=True)]
    got, span = r["received"], r["end"] - r["start"]
    per_msg = [c / got * 1e6 if got else 0.0 for c in cpu]
    row = {"messages": got, "msgs/s": got / span if span > 0 else 0.0,
           "server CPU us/msg": per_msg[0],
           "puller CPU us/msg": r["cpu"] / got * 1e6 if got else 0.0}  # fmt: skip
    for name, us in zip(hops, per_msg[1:], strict=True):
        row[f"{name} CPU us/msg"] = us
    return row


def _latency_row(svc: procs.ServiceProcess, per_s: int, seconds: float, topic: str) -> dict:
    """One latency run on a topic of its own (pulled from its offset 0)."""
    cpu0 = procs.cpu_seconds(svc.proc.pid)
    (lat,) = procs.run_json_all([_load("latency", svc.address, "GLatency", topic,
                                       str(QUEUES), str(per_s),
                                       str(seconds))])  # fmt: skip
    cpu = procs.cpu_seconds(svc.proc.pid) - cpu0
    if lat["measured"] < lat["expected"]:
        raise RuntimeError(f"latency at {per_s}/s: not all received: {lat}")
    got = lat["received"]
    return {"messages": lat["measured"], "msgs/s": lat["rate"],
            "server CPU us/msg": cpu / got * 1e6 if got else 0.0,
            "p50 ms": lat["p50_ms"], "p99 ms": lat["p99_ms"]}  # fmt: skip


def run(scale: Scale) -> list[dict]:
    count = scale.pick(200_000, 20_000, 256)
    rounds = scale.pick(3, 1, 1)
    latency_s = scale.pick(10.0, 4.0, 1.2)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-remoting-consume-") as tmp:
        store = f"{tmp}/store"
        writer = procs.start("services.commitlog", "--store", store, "--listen", "127.0.0.1:0",
                             "--commitlog-segment-size", str(256 << 20), "--put-socket",
                             f"{tmp}/writer.sock")  # fmt: skip
        started = [writer]
        try:
            started.append(procs.start("services.indexer", "consume-queue", "--store", store,
                                       "--commitlog", writer.address))  # fmt: skip
            query = procs.start("services.query", "--store", store, "--commitlog",
                                writer.address, "--listen", "127.0.0.1:0")  # fmt: skip
            started.append(query)
            proxy = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                                writer.address, "--store", store)  # fmt: skip
            started.append(proxy)
            broker = procs.start("services.remoting", "--store", store, "--listen",
                                 "127.0.0.1:0", "--commitlog", writer.address,
                                 "--commitlog-socket", f"{tmp}/writer.sock",
                                 "--query", query.address, "--proxy", proxy.address)  # fmt: skip
            started.append(broker)
            eager = procs.start("services.remoting", "--store", store, "--listen",
                                "127.0.0.1:0", "--commitlog", writer.address,
                                "--commitlog-socket", f"{tmp}/writer.sock",
                                "--query", query.address, "--proxy", proxy.address,
                                "--batch-linger-ms", "0")  # fmt: skip
            started.append(eager)
            noop = procs.start("benchmarks.noop_remoting", "--listen", "127.0.0.1:0")
            started.append(noop)
            keep = procs.start("benchmarks.noop_remoting", "--listen", "127.0.0.1:0", "--keep")
            started.append(keep)
            _fill(broker.address, query.address, count)
            hops = {"query": query, "writer": writer, "proxy": proxy}
            for (scenario, groups, commit), n in itertools.product(SCENARIOS,
                                                                   range(1, rounds + 1)):
                group = f"GPull{groups}x{n}{'C' if commit else ''}"
                base = _pull_row(noop, {}, group, count, groups, commit)
                row = _pull_row(broker, hops, group, count, groups, commit)
                row["of no-op"] = row["msgs/s"] / base["msgs/s"] if base["msgs/s"] else 0.0
                head = {"scenario": scenario, "round": n}
                rows += [{**head, "target": "no-op", **base}, {**head, "target": "remoting", **row}]
            for per_s in RATES:
                head = {"scenario": f"send -> receive latency, {per_s:,} msgs/s asked", "round": 1}
                for target, svc, topic in (
                    ("no-op", keep, f"BenchLatency{per_s}"),
                    ("remoting", broker, f"BenchLatency{per_s}"),
                    ("remoting, --batch-linger-ms 0", eager, f"BenchLatency{per_s}Eager"),
                ):  # fmt: skip
                    rows.append({**head, "target": target,
                                 **_latency_row(svc, per_s, latency_s, topic)})  # fmt: skip
        finally:
            for p in reversed(started):
                p.stop()
    return rows


if __name__ == "__main__":
    t0 = time.time()
    for row in run(Scale.QUICK):
        print(row)
    print(f"{time.time() - t0:.0f}s")
