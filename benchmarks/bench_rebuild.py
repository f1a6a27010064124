"""Spark rebuild throughput (MiB/s of commitlog) on local[1] and local[2], beside the online
builders (``services/indexer``, in process) replaying the same commitlog; and the export of
that commitlog to Parquet.

The commitlog is synthetic (1 KiB bodies, a UNIQ_KEY and two KEYS per message, 4 topics of 8
queues): >= 1 GiB in 1 GiB segments (about 64 MiB in 16 MiB segments at ``Scale.QUICK``).
Default index and consume-queue settings (5,000,000 slots, 20,000,000 entries, 300,000 units).
Each Spark figure is the time of ``rebuild`` alone, the median of three rebuilds (one at
``Scale.SMOKE``) in a session started and warmed up by a 1 MiB rebuild; the online figure is
both builders in one process fed the writer's dispatch batches of 4,096 records decoded from
the files (serialized and parsed as on the wire), until they have flushed.
"""

import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.scale import Scale
from pipelines.rebuild.job import rebuild
from pipelines.synthetic import CommitlogWriter, Message

MIB = 1024 * 1024
BATCH = 4096
RUNS = 3  # rebuilds per master; the row is the median one (this VM's speed varies by run)


def _messages(body_size: int = 1024):
    body = bytes(i % 251 for i in range(body_size))
    i = 0
    while True:
        props = {
            "UNIQ_KEY": f"7F00000100002A9F{i:016X}",
            "KEYS": f"order-{i} user-{i % 9973}",
            "TAGS": f"tag{i % 7}",
            "CLUSTER": "DefaultCluster",
        }
        yield Message(f"BenchTopic{i % 4}", i % 8, body, props, 0, 1_700_000_000_000 + i // 50)
        i += 1


def write_synthetic(root: Path, total_bytes: int, segment_size: int) -> tuple[int, int]:
    """A commitlog of at least ``total_bytes``: (its bytes, its records)."""
    w = CommitlogWriter(root, segment_size)
    records = 0
    try:
        for m in _messages():
            if w.offset >= total_bytes:
                break
            w.append(m)
            records += 1
    finally:
        w.close()
    return w.offset, records


def _online_replay(store: Path, work: Path, segment: int) -> tuple[float, int]:
    """Both online builders, in this process, fed the writer's dispatch batches decoded from
    the commitlog files (as when they catch up), serialized and parsed as on the wire."""
    from rmqstore.layout import StoreLayout
    from services.commitlog.config import WriterConfig
    from services.commitlog.engine import CommitLogEngine
    from services.indexer.batch import Columns
    from services.indexer.consume_queue_builder import ConsumeQueueBuilder
    from services.indexer.index_builder import IndexBuilder

    engine = CommitLogEngine(  # recovers first: not timed
        WriterConfig(store=store, segment_size=segment, preallocate=False)
    )
    try:
        t0 = time.perf_counter()
        layout = StoreLayout.of(work)
        cqb, ixb = ConsumeQueueBuilder(layout), IndexBuilder(layout)
        records = 0
        for batch in engine.subscribe("bench", 0, BATCH, lambda: True):
            cols = Columns.from_proto(batch.parse())  # as a builder gets it
            cqb.apply(cols)
            ixb.apply(cols)
            records += len(cols)
            if batch.next_offset >= engine.max_offset:
                break
        cqb.close()
        ixb.close()
        return time.perf_counter() - t0, records
    finally:
        engine.close()


def _export(store: Path, tmp: Path) -> dict:
    """``export`` to Parquet on local[2], in a session of its own: the first run (the
    workers' start and imports included, as a user's one ``rmqstore export`` pays them) and a
    second run."""
    from pipelines.export import export
    from pipelines.spark import create_session

    spark = create_session("local[2]", app_name="bench-export")
    try:
        runs = []
        for k in range(2):
            out = tmp / f"parquet-{k}"
            runs.append(export(spark, store, out))
            shutil.rmtree(out)
    finally:
        spark.stop()
    first, second = runs
    return {
        "scenario": "spark export to Parquet local[2], first run / second run",
        "commitlog_mib": round(second.bytes / MIB, 1),
        "records": second.records,
        "seconds": f"{first.seconds:.2f} / {second.seconds:.2f}",
        "mib_per_s": f"{first.bytes / MIB / first.seconds:.1f} / {second.mib_per_s:.1f}",
    }


def run(scale: Scale = Scale.FULL) -> list[dict]:
    from pipelines.spark import create_session

    total = scale.pick(1028, 64, 4) * MIB
    segment = scale.pick(1024, 16, 1) * MIB
    tmp = Path(tempfile.mkdtemp(prefix="bench-rebuild-"))
    rows: list[dict] = []
    try:
        store = tmp / "store"
        t0 = time.perf_counter()
        size, _ = write_synthetic(store, total, segment)
        gen_s = time.perf_counter() - t0
        warm = tmp / "warm"
        write_synthetic(warm, MIB, MIB)
        online = None
        try:
            secs, records = _online_replay(store, tmp / "online", segment)
            online = size / MIB / secs
            rows.append(
                {
                    "scenario": "online builders catching up (in process, 1 core)",
                    "commitlog_mib": round(size / MIB, 1),
                    "records": records,
                    "seconds": round(secs, 2),
                    "mib_per_s": round(online, 1),
                    "vs_online": 1.0,
                }
            )
            shutil.rmtree(tmp / "online")
        except ImportError:
            pass
        for master in ("local[1]", "local[2]"):
            spark = create_session(master, app_name=f"bench-rebuild-{master}")
            reports = []
            try:
                rebuild(spark, warm, tmp / "warm-out")  # start the workers, import the code
                shutil.rmtree(tmp / "warm-out")
                for _ in range(scale.pick(RUNS, RUNS, 1)):
                    out = tmp / f"out-{master[6]}"
                    reports.append(rebuild(spark, store, out))
                    shutil.rmtree(out)
            finally:
                spark.stop()
            report = sorted(reports, key=lambda r: r.seconds)[len(reports) // 2]  # the median
            rows.append(
                {
                    "scenario": f"spark rebuild {master}"
                    + (f", the median of {len(reports)} runs" if len(reports) > 1 else ""),
                    "commitlog_mib": round(report.bytes / MIB, 1),
                    "records": report.records,
                    "seconds": round(report.seconds, 2),
                    "mib_per_s": round(report.mib_per_s, 1),
                    "every run's mib_per_s": " / ".join(f"{r.mib_per_s:.0f}" for r in reports),
                    "vs_online": round(report.mib_per_s / online, 2) if online else "",
                }
            )
        rows.append(_export(store, tmp))
        rows.append(
            {
                "scenario": "(writing the synthetic commitlog)",
                "commitlog_mib": round(size / MIB, 1),
                "seconds": round(gen_s, 2),
                "mib_per_s": round(size / MIB / gen_s, 1),
            }
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows
