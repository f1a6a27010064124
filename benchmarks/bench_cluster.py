"""Cluster: three brokers against one, in one run on one machine.

A name server and three brokers, each its own store (the same N messages written to disk as
``bench_query`` writes them: every key on every broker, at the same offsets) served by its
own writer and its own query service, the query services announced in the name server as
``rmqstore serve --namesrv`` announces them. A broker here is those two processes: the put
rows measure the writers, the query rows the query services (the builders, proxies and
remoting brokers of a full ``serve`` are left out).

- **Puts**: the same producers (``bench_put``'s, each its own process, batches of 100 on one
  PutStream with 4 in flight, 1 KiB bodies) send to one broker, then spread over three
  (producer i to broker i % 3); twice each, alternating, as this machine's speed drifts.
  ``ratio`` is the three brokers' aggregate msgs/s over the one broker's (goal >= 0.9: on one
  machine the machine is the limit, so a cluster must cost nothing measurable).
- **Key queries**: ``bench_query``'s lookups by unique key and by shared key (10 of the hits),
  one call at a time, through broker 0's query service: its own store only
  (``SCOPE_BROKER``), then the whole cluster (``SCOPE_CLUSTER``: it asks the other two in
  parallel and merges; 3 hits for a unique key, the global limit of 10 for a shared one).
  Between them, the **ceiling**: the benchmark client asks the three brokers' query services
  itself (``SCOPE_BROKER`` on each, the three calls made at once on one ``grpc.aio`` loop,
  all three awaited, nothing merged): three lookups on this machine behind a perfect fan-out
  (``client CPU``: what its three calls cost this process, on the same cores). ``p99 ratio`` is
  the ceiling's or the cluster's p99 over the single broker's (goal <= 2: a cluster goal
  above the ceiling's ratio is above what this machine allows); ``p99 over ceiling`` is the
  cluster's p99 over the ceiling's (what the fan-out itself costs).
"""

import asyncio
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from benchmarks.bench_put import WINDOW, over_grpc
from benchmarks.bench_query import SEGMENT_SIZE, STORE_HOST, _caller, _calls, _measure, build
from benchmarks.procs import ServiceProcess, start
from benchmarks.scale import Scale
from rmqstore.server import CHANNEL_OPTIONS, channel
from rmqstore.v1 import query_pb2, query_pb2_grpc
from tests.procs import free_port

NAMES = ("broker-a", "broker-b", "broker-c")
CLUSTER = "BenchCluster"
PRODUCERS = 3
BODY = 1024
MEMBERS_S = 60.0  # the query services find each other (they read the members every 5 s)


def _start_broker(store: Path, name: str, namesrv: str, slots: int, entries: int
                  ) -> tuple[ServiceProcess, ServiceProcess]:  # fmt: skip
    writer = start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                   "--commitlog-segment-size", str(SEGMENT_SIZE), "--store-host", STORE_HOST,
                   timeout=600)  # fmt: skip
    try:
        query = start("services.query", "--store", str(store), "--commitlog", writer.address,
                      "--listen", f"127.0.0.1:{free_port()}", "--index-slots", str(slots),
                      "--index-entries", str(entries), "--namesrv", namesrv,
                      "--broker-name", name, "--cluster-name", CLUSTER)  # fmt: skip
    except BaseException:
        writer.stop()
        raise
    return writer, query


def _wait_for_members(stub: query_pb2_grpc.QueryStub) -> None:
    deadline = time.monotonic() + MEMBERS_S
    while True:
        answer = stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic="BenchQuery", key="k0", scope=query_pb2.SCOPE_CLUSTER))  # fmt: skip
        ok = {b.broker_name for b in answer.brokers if b.answer == query_pb2.ANSWER_OK}
        if ok == set(NAMES):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the query services did not find each other: {answer.brokers}")
        time.sleep(0.2)


def _puts(addresses: list[str], count: int) -> list[dict]:
    """One broker, three, one, three (fewer at smoke scale): a row each."""
    rounds = 1 if count < 10_000 else 2
    rows: list[dict] = []
    for _ in range(rounds):
        for targets in ([addresses[0]], addresses):
            r = over_grpc(targets, BODY, PRODUCERS, count, True, WINDOW)
            rows.append({
                "scenario": f"put, {len(targets)} broker(s), {PRODUCERS} producers, PutStream "
                            f"({WINDOW} in flight), {BODY} B",
                **{k: r[k] for k in ("msgs/s", "MB/s", "p50 ms", "p99 ms")},
            })  # fmt: skip
    one = [r["msgs/s"] for r in rows[0::2]]
    three = [r["msgs/s"] for r in rows[1::2]]
    rows.append({
        "scenario": "put, 3 brokers over 1 (mean of the rows above; goal >= 0.9)",
        "ratio": (sum(three) / len(three)) / (sum(one) / len(one)),
    })  # fmt: skip
    return rows


class _AllThree:
    """The brokers' query services asked at once from one ``grpc.aio`` event loop of this
    process (cheaper for the client than a sync call or a thread each): every answer awaited
    and checked, nothing merged."""

    def __init__(self, addresses: list[str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.channels = [self.loop.run_until_complete(self._open(a)) for a in addresses]
        self.stubs = [query_pb2_grpc.QueryStub(c) for c in self.channels]

    @staticmethod
    async def _open(address: str) -> grpc.aio.Channel:  # made on the loop that uses it
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)

    def caller(self, method: str, make: Any) -> Callable[[], Any]:
        rpcs = [getattr(s, method) for s in self.stubs]

        async def ask(request: Any) -> list[Any]:
            return await asyncio.gather(*(rpc(request) for rpc in rpcs))

        def call() -> Any:
            request, ok = make()
            answers = self.loop.run_until_complete(ask(request))
            assert all(ok(a) for a in answers), f"{method}({request}) answered wrongly"
            return answers

        return call

    def close(self) -> None:
        for c in self.channels:
            self.loop.run_until_complete(c.close())
        self.loop.close()


def _queries(stub: query_pb2_grpc.QueryStub, all_three: _AllThree, put: dict, calls: int,
             pid: int) -> list[dict]:  # fmt: skip
    rows: list[dict] = []
    kinds = _calls(put, random.Random(11))[:2]  # by unique key, by shared key
    names = ("by unique key", f"by shared key, 10 of {put['n'] // 1000} hits a broker")
    for name, (_name, method, make) in zip(names, kinds, strict=True):
        measured = {}
        for scope, label in ((query_pb2.SCOPE_BROKER, "1 broker"),
                             (query_pb2.SCOPE_CLUSTER, "cluster of 3")):  # fmt: skip
            hits = 3 if method == "QueryByKey" and name == names[0] else 3 * 10

            def scoped(make: Any = make, scope: int = scope, hits: int = hits
                       ) -> tuple[Any, Any]:  # fmt: skip
                request, check = make()
                request.scope = scope
                if scope == query_pb2.SCOPE_BROKER:
                    return request, check
                return request, lambda r: (not r.partial and len(r.messages) == min(
                    request.max_results or 32, hits)
                    and set(r.message_brokers) <= set(NAMES))  # fmt: skip

            fn = _caller(stub, method, scoped)
            for _ in range(min(calls, 300)):  # warm-up: connections, page cache
                fn()
            measured[label] = _measure(fn, calls, {"query": pid})
            if scope == query_pb2.SCOPE_BROKER:  # then the ceiling, before the cluster
                rows.append({"scenario": f"{name}, {label}", **measured[label]})
                label = "ceiling: 3 brokers asked at once by the client, not merged"
                fn = all_three.caller(method, make)
                for _ in range(min(calls, 300)):
                    fn()
                measured[label] = _measure(fn, calls, {"query": pid, "client": os.getpid()})
                del measured[label]["peak RSS client MiB"]
            rows.append({"scenario": f"{name}, {label}", **measured[label]})
        single, ceiling = rows[-3]["p99 ms"], rows[-2]["p99 ms"]
        rows[-2]["p99 ratio"] = ceiling / single
        rows[-1]["p99 ratio"] = rows[-1]["p99 ms"] / single
        rows[-1]["p99 over ceiling"] = rows[-1]["p99 ms"] / ceiling
    rows[-1]["scenario"] += " (p99 ratio: goal <= 2)"
    return rows


def run(scale: Scale = Scale.FULL) -> list[dict]:
    n = scale.pick(200_000, 20_000, 12_000)  # per store; a shared key has n / 1000 hits (> 10)
    slots, entries = max(n // 2, 100), 4 * n
    count = scale.pick(300_000, 30_000, 1_500)  # puts per row
    calls = scale.pick(3000, 300, 30)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        t0 = time.perf_counter()
        put = build(Path(tmp) / NAMES[0], n, slots, entries)
        for name in NAMES[1:]:
            shutil.copytree(Path(tmp) / NAMES[0], Path(tmp) / name)
        build_s = time.perf_counter() - t0
        namesrv = start("services.namesrv", "--listen", "127.0.0.1:0")
        brokers: list[tuple[ServiceProcess, ServiceProcess]] = []
        try:
            with ThreadPoolExecutor(len(NAMES)) as pool:
                started = [pool.submit(_start_broker, Path(tmp) / name, name, namesrv.address,
                                       slots, entries) for name in NAMES]  # fmt: skip
            brokers += [f.result() for f in started if f.exception() is None]
            for f in started:
                f.result()  # the first that failed to start, once the others can be stopped
            stub = query_pb2_grpc.QueryStub(channel(brokers[0][1].address))
            _wait_for_members(stub)
            rows += _puts([w.address for w, _q in brokers], count)
            all_three = _AllThree([q.address for _w, q in brokers])
            try:
                rows += _queries(stub, all_three, put, calls, brokers[0][1].proc.pid)
            finally:
                all_three.close()
        finally:
            for writer, query in brokers:
                query.stop()
                writer.stop()
            namesrv.stop()
    rows.append({"scenario": f"build {n:,} msgs on disk, copied to 3 stores (setup)",
                 "setup s": build_s})  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in run(Scale.SMOKE):
        print(row)
