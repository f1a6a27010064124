"""Recovery after an unclean stop (MiB/s of commitlog checked) and in-process key lookups
(lookups/s) — the two store operations that do not cross gRPC.

The recovery rows time the writer's engine starting on a commitlog left as kill -9 leaves
it; two more rows start the real writer process, put a batch, stop it (SIGKILL, or SIGTERM
for comparison) and time its restart until it serves, with the recovery's own seconds from
its log.
"""

import os
import random
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_put import _batch
from benchmarks.bench_rebuild import write_synthetic
from benchmarks.procs import start
from benchmarks.scale import Scale
from rmqstore.formats import index_file as ixf
from rmqstore.formats.index_file import build_key
from rmqstore.formats.javahash import index_hash, index_hashes
from rmqstore.layout import index_file_name
from rmqstore.listing import SETTLE_NS
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.query.budget import Budget, BudgetLimits
from services.query.index_reader import PAUSE, POS_INF, IndexCatalog, KeyWalk

MIB = 1024 * 1024


def _recover(store: Path, segment: int) -> tuple[float, int, int]:
    (store / "abort").write_bytes(b"")  # as a kill -9 leaves it
    t0 = time.perf_counter()
    e = CommitLogEngine(WriterConfig(store=store, segment_size=segment))
    seconds = time.perf_counter() - t0
    end, scanned = e.max_offset, e.recovered.scanned_bytes
    e.close()
    return seconds, end, scanned


def recovery(total: int, segment: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:
        store = Path(d)
        size, _ = write_synthetic(store, total, segment)
        for label in ("no queue snapshot", "with the queue snapshot"):
            seconds, end, scanned = _recover(store, segment)
            assert end == size
            rows.append(
                {
                    "scenario": f"recovery after kill -9, {size / MIB:,.0f} MiB, {label}",
                    "seconds": seconds,
                    "MiB/s of commitlog": size / MIB / seconds,
                    "MiB checked": scanned / MIB,
                }
            )
    return rows


_RECOVERED = re.compile(
    r"recovered commitlog to offset (\d+) in ([0-9.]+)s, (\d+) bytes read \((\w+) exit"
)


def restarts(total: int, segment: int) -> list[dict]:
    """The writer process on a commitlog of ``total`` bytes, a batch put, then stopped with
    SIGKILL (and, for comparison, SIGTERM) and started again: seconds from the new process's
    start until it serves, and the recovery's seconds as it logs them."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:
        store = Path(d)
        size, _ = write_synthetic(store, total, segment)
        args = ("--store", str(store), "--listen", "127.0.0.1:0",
                "--commitlog-segment-size", str(segment))  # fmt: skip
        writer = start("services.commitlog", *args, timeout=600)
        try:
            for how in ("SIGKILL", "SIGTERM"):
                with channel(writer.address) as ch:
                    stub = commitlog_pb2_grpc.CommitLogStub(ch)
                    stub.PutBatch(_batch(100, 1024, 0, False))
                    acked = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
                if how == "SIGKILL":
                    writer.kill()
                else:
                    writer.stop()
                t0 = time.perf_counter()
                writer = start("services.commitlog", *args, timeout=600)
                serving = time.perf_counter() - t0
                found = [m for m in map(_RECOVERED.search, writer.lines) if m]
                assert found, "the writer logged no recovery line"
                end, seconds, read = int(found[-1][1]), float(found[-1][2]), int(found[-1][3])
                exit_kind = found[-1][4]
                assert end == acked, f"recovered to {end}, but {acked} was acknowledged"
                assert exit_kind == ("unclean" if how == "SIGKILL" else "clean")
                what = "kill -9" if how == "SIGKILL" else "a clean stop (SIGTERM)"
                rows.append({
                    "scenario": f"writer process restarted after {what}, {size / MIB:,.0f} MiB: "
                    "until it serves / its recovery",
                    "seconds": f"{serving:.2f} / {seconds:.3f}",
                    "MiB/s of commitlog": size / MIB / seconds,
                    "MiB checked": read / MIB,
                })
        finally:
            writer.stop()
    return rows


def fresh_segment(data: int, segment: int) -> dict:
    """Little data in a large head segment, page cache dropped (as after a reboot): what the
    recovery costs beyond the records is the check that the segment's tail is zero."""
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:
        store = Path(d)
        size, _ = write_synthetic(store, data, segment)
        for f in (store / "commitlog").iterdir():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        seconds, end, scanned = _recover(store, segment)
        assert end == size
        return {
            "scenario": f"recovery after kill -9, {size / MIB:,.0f} MiB in a "
            f"{segment / MIB:,.0f} MiB segment, cold page cache",
            "seconds": seconds,
            "MiB checked": scanned / MIB,
        }


def index_walk(keys: int) -> list[dict]:
    """Lookups of random keys among ``keys`` in one index file (two keys a slot, room for as
    many again, as the file a writer is filling has): the format module's chain walk over the
    file in memory, and the query service's own lookup (the index half of a query by key,
    before any record is fetched) over the file on disk."""
    slots, entries = keys // 2, 2 * keys
    buf = bytearray(ixf.file_size(slots, entries))
    f = ixf.IndexFile(buf, slots, entries)
    names = [f"Topic#order-{i}" for i in range(keys)]
    f.put_many(
        index_hashes(names),
        np.arange(keys, dtype=np.int64) * 1000,
        1_700_000_000_000 + np.arange(keys, dtype=np.int64),
    )
    rng = random.Random(3)
    picked = [rng.randrange(keys) for _ in range(200_000)]
    probes = [index_hash(names[i]) for i in picked]
    t0 = time.perf_counter()
    for h in probes:
        f.walk(h, 0, 2**62, 64, 999)
    walk_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        Path(d, index_file_name(f.header.begin_timestamp)).write_bytes(buf)
        catalog = IndexCatalog(Path(d), slots, entries)
        catalog.names()
        time.sleep(SETTLE_NS / 1e9)  # a directory just written is listed on every query
        limits = BudgetLimits()
        queries = [f"order-{i}" for i in picked[:50_000]]
        t0 = time.perf_counter()
        for key in queries:
            walk = KeyWalk(catalog, catalog.names(), index_hash(build_key("Topic", key)), 0,
                           POS_INF, Budget(limits), None)
            found = [e for e in walk if e is not PAUSE]
        service_s = time.perf_counter() - t0
        assert found, "the last key was not found"
        catalog.close()
    return [
        {
            "scenario": f"index walk in process (format module), {keys:,} keys, {slots:,} slots",
            "lookups/s": len(probes) / walk_s,
        },
        {
            "scenario": f"key lookup in process (query service's index half), {keys:,} keys",
            "lookups/s": len(queries) / service_s,
        },
    ]


def run(scale: Scale = Scale.FULL) -> list[dict]:
    total, segment = scale.pick(1024, 128, 16) * MIB, scale.pick(256, 64, 4) * MIB
    rows = recovery(total, segment)
    rows += restarts(total, segment)
    rows.append(fresh_segment(scale.pick(8, 8, 1) * MIB, scale.pick(1024, 256, 4) * MIB))
    rows += index_walk(scale.pick(1_000_000, 100_000, 10_000))
    return rows
