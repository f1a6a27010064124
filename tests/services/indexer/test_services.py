"""Real processes on loopback: the writer serving a store and both builder services."""

import random
import shutil
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rmqstore.formats import consume_queue as cq
from rmqstore.formats.javahash import index_hash
from rmqstore.layout import StoreLayout
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, indexer_pb2, indexer_pb2_grpc
from tests import procs
from tests.services.indexer.helpers import (
    GOLDEN_CQ_ENTRIES,
    GOLDEN_ENTRIES,
    GOLDEN_SLOTS,
    assert_same_index,
    index_files,
    open_index,
    tree_bytes,
)

pytestmark = pytest.mark.integration


def start_builder(kind: str, store: Path, writer: str, *extra: str) -> procs.ServiceProcess:
    return procs.start("services.indexer", kind, "--store", str(store), "--commitlog", writer,
                       "--listen", "127.0.0.1:0", "--flush-interval-ms", "100", *extra)


def progress(proc: procs.ServiceProcess) -> indexer_pb2.Progress:
    with channel(proc.address) as ch:
        return indexer_pb2_grpc.BuilderStub(ch).GetProgress(indexer_pb2.GetProgressRequest(),
                                                            timeout=5)


def wait_until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_durable(proc: procs.ServiceProcess, offset: int, timeout: float = 30) -> None:
    wait_until(lambda: progress(proc).durable_offset >= offset, timeout,
               f"{proc.address} to make {offset} durable: "
               + "\n".join(proc.lines[-20:]))


@pytest.mark.golden
def test_builders_started_before_the_writer_rebuild_the_golden_files(tmp_path, golden_store,
                                                                     golden_expected):
    store = tmp_path / "store"
    shutil.copytree(golden_store, store)
    for p in [store, *store.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index")
    writer_addr = f"127.0.0.1:{procs.free_port()}"
    metrics_port = procs.free_port()
    cqb = start_builder("consume-queue", store, writer_addr,
                        "--cq-entries-per-file", str(GOLDEN_CQ_ENTRIES),
                        "--metrics-port", str(metrics_port))
    ixb = start_builder("index", store, writer_addr, "--index-slots", str(GOLDEN_SLOTS),
                        "--index-entries", str(GOLDEN_ENTRIES))
    writer = None
    try:
        for b in (cqb, ixb):  # up, serving, not connected
            with channel(b.address) as ch:
                health = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service="rmqstore.v1.Builder"), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert not progress(b).connected
        writer = procs.start("services.commitlog", "--store", str(store), "--listen",
                             writer_addr, "--commitlog-segment-size", "65536",
                             "--no-delivery")  # the golden files as RocketMQ left them
        end = golden_expected["commitlogMaxOffset"]
        for b in (cqb, ixb):
            wait_durable(b, end)
            p = progress(b)
            assert p.connected and p.writer_max_offset == end and p.built_offset == end
        units = sum(len(v) for v in golden_expected["consumeQueues"].values())
        assert progress(cqb).entries == units
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert f'rmqstore_builder_durable_offset_bytes{{builder="consume-queue"}} {end}.0' in text
        assert 'rmqstore_builder_files{builder="consume-queue"} 27.0' in text
        assert cqb.stop() == 0 and ixb.stop() == 0
    finally:
        cqb.kill()
        ixb.kill()
        if writer:
            writer.stop()
    assert tree_bytes(store / "consumequeue") == tree_bytes(golden_store / "consumequeue")
    assert_same_index(store / "index", golden_store / "index")


def _message(n: int) -> common_pb2.Message:
    return common_pb2.Message(topic="CrashT", queue_id=n % 4, body=b"m%06d" % n + b"." * 90,
                              tags="TagA", keys=f"key-{n} shared-{n % 5}")


class Producer(threading.Thread):
    """Puts batches until stopped; keeps every acknowledged result."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.results: list[tuple[int, commitlog_pb2.PutResult]] = []
        self.stop_event = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        n = 0
        with channel(self.address) as ch:
            stub = commitlog_pb2_grpc.CommitLogStub(ch)
            try:
                while not self.stop_event.is_set() and n < 200_000:
                    msgs = [_message(n + i) for i in range(25)]
                    resp = stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=10)
                    self.results.extend(zip(range(n, n + 25), resp.results, strict=True))
                    n += 25
            except grpc.RpcError as e:
                self.error = e


def test_builders_killed_under_load_lose_nothing_and_duplicate_nothing(tmp_path):
    rng = random.Random(20261121)
    store = tmp_path / "store"
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", str(1 << 20))
    cq_args = ("--cq-entries-per-file", "64")
    ix_args = ("--index-slots", "61", "--index-entries", "300")
    cqb = start_builder("consume-queue", store, writer.address, *cq_args)
    ixb = start_builder("index", store, writer.address, *ix_args)
    producer = Producer(writer.address)
    index_names_seen: set[str] = set()
    try:
        producer.start()
        for _round in range(3):
            for kind, args in (("consume-queue", cq_args), ("index", ix_args)):
                proc = cqb if kind == "consume-queue" else ixb
                target = progress(proc).built_offset + rng.randrange(2_000, 60_000)

                def built_past(p=proc, t=target) -> bool:
                    assert producer.is_alive() or producer.error is None, producer.error
                    return progress(p).built_offset >= t

                wait_until(built_past, 90, f"{kind} to build past {target}: {progress(proc)}"
                           + "\n".join(proc.lines[-20:]))
                index_names_seen |= {p.name for p in index_files(store / "index")}
                proc.kill()
                fresh = start_builder(kind, store, writer.address, *args)
                if kind == "consume-queue":
                    cqb = fresh
                else:
                    ixb = fresh
        producer.stop_event.set()
        producer.join(30)
        assert producer.error is None and producer.results
        with channel(writer.address) as ch:
            end = commitlog_pb2_grpc.CommitLogStub(ch).GetOffsets(
                commitlog_pb2.GetOffsetsRequest(), timeout=5).max_offset
        wait_durable(cqb, end, 90)
        wait_durable(ixb, end, 90)
        assert cqb.stop() == 0 and ixb.stop() == 0
    finally:
        producer.stop_event.set()
        for p in (cqb, ixb, writer):
            p.stop()
    results = producer.results
    layout = StoreLayout.of(store)

    # every acknowledged message is in its queue exactly once, at its queue offset
    by_queue: dict[int, list[commitlog_pb2.PutResult]] = {}
    for _n, r in results:
        assert r.topic == "CrashT"
        by_queue.setdefault(r.queue_id, []).append(r)
    for qid, rs in by_queue.items():
        qdir = layout.queue_dir("CrashT", qid)
        data = b"".join(p.read_bytes() for p in sorted(qdir.iterdir()))
        count = cq.valid_count(data)
        units = cq.units(data)[:count]
        assert count == len(rs)
        assert len(set(units["offset"].tolist())) == count
        for r in rs:
            u = units[r.queue_offset]
            assert (int(u["offset"]), int(u["size"])) == (r.phy_offset, r.size)

    # every key is found, and no entry was added twice; no index file was deleted
    names = {p.name for p in index_files(store / "index")}
    assert index_names_seen <= names
    files = [open_index(p, 61, 300) for p in index_files(store / "index")]
    entries = [f.entry(n) for f in files for n in range(1, max(f.header.index_count, 1))]
    assert len(entries) == 3 * len(results)  # UNIQ_KEY + 2 KEYS tokens per message
    on_chains = [pair for f in files for pair in chained(f)]  # (hash, phy) reachable by a walk
    assert len(on_chains) == len(entries)
    counts = Counter(on_chains)
    for n, r in results:
        for key in (f"CrashT#{r.unique_key}", f"CrashT#key-{n}", f"CrashT#shared-{n % 5}"):
            assert counts[(index_hash(key), r.phy_offset)] == 1, key


def chained(f) -> list[tuple[int, int]]:
    """Every (key hash, phy offset) reachable from the slots, walking each chain to its end."""
    out = []
    count = f.header.index_count
    for s in range(f.slots):
        n = f.slot(s)
        while 0 < n < count:
            h, phy, _diff, prev = f.entry(n)
            out.append((h, phy))
            n = prev
    return out


def test_a_builder_refuses_to_start_on_an_unreadable_progress_record(tmp_path):
    layout = StoreLayout.of(tmp_path)
    layout.progress("index").parent.mkdir(parents=True)
    layout.progress("index").write_text('{"offset": "twelve"}')
    with pytest.raises(RuntimeError, match=r"exited \(2\)(.|\n)*progress file .* is unreadable"):
        start_builder("index", tmp_path, "127.0.0.1:1")
    assert layout.progress("index").read_text() == '{"offset": "twelve"}'


@pytest.mark.golden
def test_outputs_are_cut_when_the_writer_ends_below_them(tmp_path, golden_store, golden_records):
    """Builders that got further than the writer's (recovered) commitlog cut back to it."""
    from services.indexer.consume_queue_builder import ConsumeQueueBuilder
    from services.indexer.index_builder import IndexBuilder
    from tests.services.indexer.helpers import feed

    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    segments = sorted((golden_store / "commitlog").iterdir())
    for p in segments[:-1]:  # the writer's copy lacks the last segment
        (store / "commitlog" / p.name).write_bytes(p.read_bytes())
    cut = int(segments[-1].name)
    layout = StoreLayout.of(store)
    cqb_local = ConsumeQueueBuilder(layout, GOLDEN_CQ_ENTRIES)
    ixb_local = IndexBuilder(layout, GOLDEN_SLOTS, GOLDEN_ENTRIES)
    for b in (cqb_local, ixb_local):
        feed(b, golden_records, 50)
        b.close()
        assert b.durable_offset > cut
    expected = tmp_path / "expected"
    for b in (ConsumeQueueBuilder(StoreLayout.of(expected), GOLDEN_CQ_ENTRIES),
              IndexBuilder(StoreLayout.of(expected), GOLDEN_SLOTS, GOLDEN_ENTRIES)):
        feed(b, [r for r in golden_records if r.phy_offset < cut], 50)
        b.close()
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", "65536", "--no-delivery")
    cqb = start_builder("consume-queue", store, writer.address,
                        "--cq-entries-per-file", str(GOLDEN_CQ_ENTRIES))
    ixb = start_builder("index", store, writer.address, "--index-slots", str(GOLDEN_SLOTS),
                        "--index-entries", str(GOLDEN_ENTRIES))
    try:
        for b in (cqb, ixb):
            wait_until(lambda b=b: (p := progress(b)).connected and p.durable_offset == cut, 60,
                       f"{b.address} to cut back to {cut}")
        assert cqb.stop() == 0 and ixb.stop() == 0
    finally:
        for p in (cqb, ixb, writer):
            p.stop()
    assert tree_bytes(store / "consumequeue") == tree_bytes(expected / "consumequeue")
    ours, theirs = index_files(store / "index"), index_files(expected / "index")
    kept = [p for p in ours if open_index(p).header.index_count > 1]
    assert len(kept) == len(theirs) and len(ours) >= len(theirs)  # emptied, never deleted
    for o, t in zip(kept, theirs, strict=True):
        fo, ft = open_index(o), open_index(t)
        assert [fo.entry(n) for n in range(GOLDEN_ENTRIES)] == [
            ft.entry(n) for n in range(GOLDEN_ENTRIES)]
        # after a cut the end time is known to the second only
        assert fo.header._replace(end_timestamp=0) == ft.header._replace(end_timestamp=0)
        assert 0 <= fo.header.end_timestamp - ft.header.end_timestamp < 1000
