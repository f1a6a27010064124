"""Query service: queries/s and p50/p99 latency by key (warm), by id and pull.

A store of N messages (1,000,000; fewer at a smaller ``Scale``) is written straight to disk
with the shared format library (commitlog segments, consume queues, index files, the same bytes
the services write), then served by the real writer and the real query service; the client
calls the query service over gRPC on loopback, one call at a time (one row calls the lookup in
process, to show what the query service's own gRPC hop costs; the last row has 4 clients
calling at once, each on its own channel and thread). Each message has a unique key ``k<i>``, a
shared key ``g<i % 1000>`` and a UNIQ_KEY. Each row also gives the CPU time (user + system, all
threads) the query service and the writer spent per call, and their peak RSS so far.

Each row over gRPC is followed by its ceiling: the same calls against ``noop_query``, which
answers every call with one of the real answers after reading that answer's records from the
same writer; ``ratio`` is the row's queries/s over the ceiling's. One more ceiling reads
nothing: one unary call on such a server, gRPC alone.
"""

import asyncio
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_put import peak_rss_mib
from benchmarks.procs import ServiceProcess, cpu_seconds, start
from benchmarks.scale import Scale
from rmqstore import dispatch
from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.index_file import IndexFile, file_size
from rmqstore.formats.javahash import index_hashes
from rmqstore.formats.msgid import UniqKeyGenerator, offset_msg_id
from rmqstore.layout import StoreLayout, unique_index_file_name
from rmqstore.segments import segment_name
from rmqstore.server import channel
from rmqstore.v1 import query_pb2, query_pb2_grpc
from services.query.app import QueryApp
from services.query.record_source import GrpcRecordSource

SEGMENT_SIZE = 64 * 1024 * 1024
QUEUES = 8
TOPIC = "BenchQuery"
STORE_HOST = "127.0.0.1:10911"
CLIENTS = 4  # the concurrent row's


def build(root: Path, n: int, slots: int, entries: int) -> dict:
    """Write commitlog, consume queues and index files for n messages; return what was put."""
    layout = StoreLayout.of(root)
    layout.commitlog_dir.mkdir(parents=True)
    layout.index_dir.mkdir()
    host = parse_host(STORE_HOST)
    gen = UniqKeyGenerator()
    t0 = int(time.time() * 1000) - n  # one message per ms, ending now
    seg, seg_start, pos = bytearray(SEGMENT_SIZE), 0, 0
    phys = np.empty(n, dtype=np.int64)
    sizes = np.empty(n, dtype=np.int32)
    times = np.empty(n, dtype=np.int64)
    codes = np.empty(n, dtype=np.int64)
    uniq = []
    keys, key_rows = [], []
    body = b"q" * 100
    for i in range(n):
        ts = t0 + i
        uk = gen.next(ts)
        props = props_fmt.encode(
            {
                props_fmt.KEYS: f"k{i} g{i % 1000}",
                props_fmt.UNIQ_KEY: uk,
                props_fmt.TAGS: f"T{i % 4}",
            }
        )
        rec = commitlog.Record(
            topic=TOPIC,
            queue_id=i % QUEUES,
            body=body,
            properties=props,
            queue_offset=i // QUEUES,
            store_timestamp=ts,
            born_timestamp=ts,
            store_host=host,
        )
        size = commitlog.record_size(len(body), len(TOPIC), len(props.encode()))
        if pos + size + commitlog.BLANK_SIZE > SEGMENT_SIZE:
            seg[pos : pos + commitlog.BLANK_SIZE] = commitlog.blank(SEGMENT_SIZE - pos)
            (layout.commitlog_dir / segment_name(seg_start)).write_bytes(seg)
            seg, seg_start, pos = bytearray(SEGMENT_SIZE), seg_start + SEGMENT_SIZE, 0
        rec.physical_offset = seg_start + pos
        raw = commitlog.encode(rec)
        seg[pos : pos + len(raw)] = raw
        phys[i], sizes[i], times[i] = rec.physical_offset, len(raw), ts
        codes[i] = dispatch.tags_code(TOPIC, {"TAGS": f"T{i % 4}"}, ts)
        uniq.append(uk)
        for k in (uk, f"k{i}", f"g{i % 1000}"):
            keys.append(f"{TOPIC}#{k}")
            key_rows.append(i)
        pos += len(raw)
    (layout.commitlog_dir / segment_name(seg_start)).write_bytes(seg)
    for q in range(QUEUES):
        sel = np.arange(q, n, QUEUES)
        qdir = layout.queue_dir(TOPIC, q)
        qdir.mkdir(parents=True)
        per_file = cq.DEFAULT_ENTRIES_PER_FILE
        for f in range(0, len(sel), per_file):
            part = sel[f : f + per_file]
            data = cq.encode_many(phys[part], sizes[part], codes[part])
            buf = data + bytes(cq.file_size(per_file) - len(data))
            (qdir / segment_name(f * cq.UNIT_SIZE)).write_bytes(buf)
    rows = np.array(key_rows, dtype=np.int64)
    hashes = index_hashes(keys)
    taken: set[str] = set()
    i = 0
    while i < len(keys):
        name = unique_index_file_name(int(times[rows[i]]), taken)
        taken.add(name)
        ibuf = bytearray(file_size(slots, entries))
        index = IndexFile(ibuf, slots, entries)
        i += index.put_many(hashes[i:], phys[rows[i:]], times[rows[i:]])
        (layout.index_dir / name).write_bytes(ibuf)
    return {"phys": phys, "uniq": uniq, "n": n}


def _measure(fn, calls: int, procs: dict[str, int]) -> dict:
    """Rate and latency of ``calls`` calls one after another, with the CPU each of ``procs``
    (name: pid) spent per call and its peak RSS so far."""
    return _measure_concurrent([fn], calls, procs)


def _measure_concurrent(fns: list, calls: int, procs: dict[str, int]) -> dict:
    """``calls`` calls shared by one thread per function (each with its own channel)."""
    cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
    lats: list[list[float]] = [[] for _ in fns]

    def client(k: int) -> None:
        for _ in range(calls // len(fns)):
            t0 = time.perf_counter()
            fns[k]()
            lats[k].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(fns))]
    t_start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    lat = sorted(x for per in lats for x in per)
    return {
        "queries/s": len(lat) / wall,
        "p50 ms": statistics.median(lat) * 1000,
        "p99 ms": lat[int(len(lat) * 0.99) - 1] * 1000,
        **{f"{name} CPU µs/call": (cpu_seconds(pid) - cpu0[name]) / len(lat) * 1e6
           for name, pid in procs.items()},
        **{f"peak RSS {name} MiB": peak_rss_mib(pid) for name, pid in procs.items()},
    }


Check = Callable[[Any], bool]
Make = Callable[[], tuple[Any, Check]]  # draws a request, with the check of its answer


def _calls(put: dict, rng: random.Random) -> list[tuple[str, str, Make]]:
    """The kinds of call measured: (name, Query method, make)."""
    n, phys, host = put["n"], put["phys"], parse_host(STORE_HOST)

    def by_key() -> tuple[Any, Check]:
        i = rng.randrange(n)
        return query_pb2.QueryByKeyRequest(topic=TOPIC, key=f"k{i}"), lambda r: (
            len(r.messages) == 1 and r.messages[0].phy_offset == phys[i]
        )

    def by_shared_key() -> tuple[Any, Check]:
        g = rng.randrange(1000)
        request = query_pb2.QueryByKeyRequest(topic=TOPIC, key=f"g{g}", max_results=10)
        return request, lambda r: len(r.messages) == 10

    def by_offset_id() -> tuple[Any, Check]:
        i = rng.randrange(n)
        mid = offset_msg_id(host.ip, host.port, int(phys[i]))
        return query_pb2.QueryByIdRequest(id=mid), lambda r: (
            [m.phy_offset for m in r.messages] == [phys[i]]
        )

    def by_uniq_key() -> tuple[Any, Check]:
        i = rng.randrange(n)
        return query_pb2.QueryByIdRequest(id=put["uniq"][i], topic=TOPIC), lambda r: (
            r.messages[0].phy_offset == phys[i]
        )

    per_queue = n // QUEUES

    def pull() -> tuple[Any, Check]:
        request = query_pb2.PullRequest(
            topic=TOPIC,
            queue_id=rng.randrange(QUEUES),
            offset=rng.randrange(per_queue - 32),
            max_messages=32,
        )
        return request, lambda r: len(r.messages) == 32

    return [
        ("by key, unique key (warm)", "QueryByKey", by_key),
        ("by key, shared key, 10 of 1000 hits", "QueryByKey", by_shared_key),
        ("by id, offset msgId", "QueryById", by_offset_id),
        ("by id, UNIQ_KEY", "QueryById", by_uniq_key),
        ("pull 32 messages", "Pull", pull),
    ]


def _caller(stub: query_pb2_grpc.QueryStub, method: str, make: Make,
            check: bool = True) -> Callable[[], Any]:
    """One call of ``method`` with a request ``make`` draws; returns the answer."""
    rpc = getattr(stub, method)

    def call() -> Any:
        request, ok = make()
        answer = rpc(request)
        assert not check or ok(answer), f"{method}({request}) answered wrongly"
        return answer

    return call


def _ceiling(tmp: Path, writer: ServiceProcess | None, method: str, answer: Any,
             makes: list[Make], calls: int) -> dict:
    """The same calls (one client per ``makes``) against ``noop_query`` answering ``answer``,
    after reading its records from ``writer`` if given."""
    path = tmp / "noop-answer.bin"
    path.write_bytes(answer.SerializeToString())
    args = ["--method", method, "--response", str(path)]
    procs = {}
    if writer is not None:
        args += ["--commitlog", writer.address]
        procs["writer"] = writer.proc.pid
    noop = start("benchmarks.noop_query", *args)
    channels = [channel(noop.address) for _ in makes]
    try:
        procs = {"query": noop.proc.pid, **procs}
        fns = [
            _caller(query_pb2_grpc.QueryStub(ch), method, make, check=False)
            for ch, make in zip(channels, makes, strict=True)
        ]
        for fn in fns:
            for _ in range(min(calls, 300) // len(fns)):
                fn()
        what = "records read from the writer" if writer else "nothing read (gRPC alone)"
        return {
            "scenario": f"no-op ceiling of the row above: the same calls, {what}",
            **_measure_concurrent(fns, calls, procs),
        }
    finally:
        for ch in channels:
            ch.close()
        noop.stop()


def run(scale: Scale = Scale.FULL) -> list[dict]:
    n = scale.pick(1_000_000, 50_000, 12_000)  # a shared key has n / 1000 hits: more than 10
    slots, entries = (max(n // 2, 100), 4 * n)
    calls = scale.pick(5000, 500, 40)
    rng = random.Random(7)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-query-") as tmp:
        store = Path(tmp) / "store"
        t0 = time.perf_counter()
        put = build(store, n, slots, entries)
        build_s = time.perf_counter() - t0
        writer = start(
            "services.commitlog",
            "--store",
            str(store),
            "--listen",
            "127.0.0.1:0",
            "--commitlog-segment-size",
            str(SEGMENT_SIZE),
            "--store-host",
            STORE_HOST,
            timeout=600,
        )
        query = None
        try:
            query = start(
                "services.query",
                "--store",
                str(store),
                "--commitlog",
                writer.address,
                "--listen",
                "127.0.0.1:0",
                "--index-slots",
                str(slots),
                "--index-entries",
                str(entries),
            )
            stub = query_pb2_grpc.QueryStub(channel(query.address))
            kinds = _calls(put, rng)
            # the lookups await the writer's reads; the runner's close cancels whatever the
            # channel leaves pending, as asyncio.run does
            runner = asyncio.Runner()
            loop = runner.get_loop()

            async def open_source() -> GrpcRecordSource:  # its channel belongs to this loop
                return GrpcRecordSource(writer.address)

            source = loop.run_until_complete(open_source())
            app = QueryApp.build(store, source, slots, entries)

            def by_key_in_process() -> None:
                i = rng.randrange(n)
                r = loop.run_until_complete(app.keys.by_key(TOPIC, f"k{i}"))
                assert r.records[0].physical_offset == put["phys"][i]

            both = {"query": query.proc.pid, "writer": writer.proc.pid}
            tmp_dir = Path(tmp)
            for k, (name, method, make) in enumerate(kinds):
                fn = _caller(stub, method, make)
                for _ in range(min(calls, 300)):  # warm-up: connections, page cache
                    fn()
                row = {"scenario": f"{name}, {n:,} msgs", **_measure(fn, calls, both)}
                ceiling = _ceiling(tmp_dir, writer, method, fn(), [make], calls)
                rows += [{**row, "ratio": row["queries/s"] / ceiling["queries/s"]}, ceiling]
                if k == 0:  # by unique key: what the query hop, and gRPC alone, cost
                    rows.append({
                        "scenario": "by key in process (no query hop; writer over gRPC)",
                        **_measure(by_key_in_process, calls, {"writer": writer.proc.pid}),
                    })
                    rows.append(_ceiling(tmp_dir, None, method, fn(), [make], calls))
            name, method, _ = kinds[0]
            makes = [_calls(put, random.Random(c))[0][2] for c in range(CLIENTS)]
            clients = [
                _caller(query_pb2_grpc.QueryStub(channel(query.address)), method, make)
                for make in makes
            ]
            for fn in clients:
                for _ in range(min(calls, 300) // CLIENTS):
                    fn()
            row = {
                "scenario": f"{name.split(' (')[0]}, {CLIENTS} clients at once, {n:,} msgs",
                **_measure_concurrent(clients, calls, both),
            }
            ceiling = _ceiling(tmp_dir, writer, method, clients[0](), makes, calls)
            rows += [{**row, "ratio": row["queries/s"] / ceiling["queries/s"]}, ceiling]
            loop.run_until_complete(source.close())
            runner.close()
        finally:
            if query is not None:
                query.stop()
            writer.stop()
        rows.append({"scenario": f"build {n:,} msgs on disk (setup)", "setup s": build_s})
    return rows


if __name__ == "__main__":
    for row in run(Scale.QUICK):
        print(row)
