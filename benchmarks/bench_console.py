"""Console: the key search page and the message page through the console (HTTP, on
loopback), beside the same query through the CLI, in the same run on the same store.

The store is bench_query's (N messages written straight to disk: 1,000,000 at full scale),
served by the real writer, query service and console. Rows, each p50/p99 over sequential
calls with a kept-alive connection:

- key search page (HTML) and its ``/api/v1/`` document; message page and its document;
- the CLI's own path: the QueryByKey / QueryById call and the ``--json`` document, in
  process (what ``rmqstore query-key`` does after Python has started);
- the CLI as users run it: ``rmqstore query-key --json``, one process per call (interpreter
  start included), fewer calls.

``ratio`` is a console row's p50 over the p50 of the CLI path in process for the same query.
"""

import http.client
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from benchmarks.bench_query import SEGMENT_SIZE, STORE_HOST, TOPIC, build
from benchmarks.procs import ServiceProcess, cpu_seconds, start
from benchmarks.scale import Scale
from rmqstore.message_json import id_fields, key_fields, with_messages
from rmqstore.server import channel
from rmqstore.v1 import query_pb2, query_pb2_grpc
from tests.procs import ROOT


def _measure(fn: Callable[[], None], calls: int, procs: dict[str, int]) -> dict:
    for _ in range(min(calls, 50)):  # warm-up: connections, page cache
        fn()
    cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
    lat = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return {
        "calls": calls,
        "p50 ms": statistics.median(lat) * 1000,
        "p99 ms": lat[min(len(lat) - 1, math.ceil(len(lat) * 0.99) - 1)] * 1000,
        **{f"{name} CPU µs/call": (cpu_seconds(pid) - cpu0[name]) / calls * 1e6
           for name, pid in procs.items()},
    }


class Http:
    """GETs over one kept-alive connection; each answer is checked."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        assert r.status == 200, (path, r.status, body[:300])
        return body


def _rows(n: int, put: dict, console: ServiceProcess, query: ServiceProcess, calls: int,
          cli_calls: int, pids: dict[str, int]) -> list[dict]:
    rng = random.Random(11)
    web = Http(console.address)
    stub = query_pb2_grpc.QueryStub(channel(query.address))

    def pick() -> int:
        return rng.randrange(n)

    def key_page() -> None:
        i = pick()
        assert put["uniq"][i] and b"a class=\"msgid\"" in web.get(
            "/messages?" + urlencode({"topic": TOPIC, "key": f"k{i}"}))

    def key_api() -> None:
        i = pick()
        doc = json.loads(web.get("/api/v1/messages?" + urlencode({"topic": TOPIC,
                                                                  "key": f"k{i}"})))
        assert doc["messages"][0]["phyOffset"] == put["phys"][i]

    def key_cli_path() -> None:
        i = pick()
        resp = stub.QueryByKey(query_pb2.QueryByKeyRequest(topic=TOPIC, key=f"k{i}"),
                               timeout=30)
        doc = json.dumps(with_messages(key_fields(resp), resp.messages))
        assert resp.messages[0].phy_offset == put["phys"][i] and doc

    def msg_id(i: int) -> str:
        from rmqstore.formats.hosts import parse_host
        from rmqstore.formats.msgid import offset_msg_id

        host = parse_host(STORE_HOST)
        return offset_msg_id(host.ip, host.port, int(put["phys"][i]))

    def message_page() -> None:
        i = pick()
        assert b"pre class=\"body" in web.get(f"/messages/{msg_id(i)}")

    def message_api() -> None:
        i = pick()
        doc = json.loads(web.get(f"/api/v1/messages/{msg_id(i)}"))
        assert doc["messages"][0]["phyOffset"] == put["phys"][i]

    def id_cli_path() -> None:
        i = pick()
        resp = stub.QueryById(query_pb2.QueryByIdRequest(id=msg_id(i)), timeout=30)
        doc = json.dumps(with_messages(id_fields(resp), resp.messages))
        assert resp.messages[0].phy_offset == put["phys"][i] and doc

    def key_cli_process() -> None:
        i = pick()
        out = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "query-key", "--query", query.address,
             "--topic", TOPIC, "--key", f"k{i}", "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and json.loads(out.stdout)["count"] == 1, out.stderr

    rows: list[dict] = []
    for name, fn, base in (("key search: CLI path in process", key_cli_path, None),
                           ("key search page (console)", key_page, 0),
                           ("key search /api/v1 (console)", key_api, 0),
                           ("message by id: CLI path in process", id_cli_path, None),
                           ("message page (console)", message_page, 3),
                           ("message /api/v1 (console)", message_api, 3)):
        row = {"scenario": f"{name}, {n:,} msgs", **_measure(fn, calls, pids)}
        if base is not None:
            row["ratio"] = row["p50 ms"] / rows[base]["p50 ms"]
        rows.append(row)
    rows.append({"scenario": f"key search: rmqstore query-key --json (a process each), "
                 f"{n:,} msgs", **_measure(key_cli_process, cli_calls, pids)})
    return rows


def run(scale: Scale = Scale.FULL) -> list[dict]:
    n = scale.pick(1_000_000, 50_000, 5_000)
    slots, entries = max(n // 2, 100), 4 * n
    calls = scale.pick(2000, 300, 20)
    cli_calls = scale.pick(30, 10, 2)
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        store = Path(tmp) / "store"
        t0 = time.perf_counter()
        put = build(store, n, slots, entries)
        build_s = time.perf_counter() - t0
        started: list[ServiceProcess] = []
        try:
            writer = start("services.commitlog", "--store", str(store), "--listen",
                           "127.0.0.1:0", "--commitlog-segment-size", str(SEGMENT_SIZE),
                           "--store-host", STORE_HOST, timeout=600)
            started.append(writer)
            query = start("services.query", "--store", str(store), "--commitlog",
                          writer.address, "--listen", "127.0.0.1:0", "--index-slots",
                          str(slots), "--index-entries", str(entries))
            started.append(query)
            console = start("services.console", "--store", str(store), "--query",
                            query.address, "--commitlog", writer.address, "--listen",
                            "127.0.0.1:0", "--index-entries", str(entries))
            started.append(console)
            pids = {"console": console.proc.pid, "query": query.proc.pid}
            rows = _rows(n, put, console, query, calls, cli_calls, pids)
        finally:
            for p in reversed(started):
                p.stop()
    rows.append({"scenario": f"build {n:,} msgs on disk (setup)", "setup s": build_s})
    return rows


if __name__ == "__main__":
    for r in run(Scale.QUICK):
        print(r)
