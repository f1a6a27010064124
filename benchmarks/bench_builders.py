"""Builder throughput in-process: synthetic dispatch batches through each builder.

Messages spread over 4 topics x 8 queues, each with a UNIQ_KEY and one KEYS token (two index
keys per message), in batches the size the writer streams. Timed: ``apply`` of every batch
plus a flush (files + progress record) every 65,536 messages and at the end. Building the batches
is not timed; the last four rows also time decoding the serialized ``DispatchBatch`` protos
the subscriber receives, in batches of 1,024 and of 256 (about what a builder at the head
gets under load). Default file sizes (300,000 CQ units per file; 5,000,000 slots / 20,000,000
entries per index file).
"""

import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.scale import Scale
from rmqstore.layout import StoreLayout
from rmqstore.v1 import commitlog_pb2
from services.indexer.batch import Columns
from services.indexer.consume_queue_builder import ConsumeQueueBuilder
from services.indexer.index_builder import IndexBuilder

TOPICS = 4
QUEUES = 8
BATCH = 1024
HEAD_BATCH = 256  # about what a builder gets at the head under load (dispatch linger 2 ms)
FLUSH_EVERY = 65_536  # records between flushes, whatever the batch size
BASE_TS = 1_700_000_000_000


def batches(messages: int, batch: int = BATCH) -> list[Columns]:
    rng = np.random.default_rng(7)
    sizes = rng.integers(200, 1200, messages)
    phys = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    topic_ids = rng.integers(0, TOPICS, messages)
    queue_ids = rng.integers(0, QUEUES, messages)
    qkey = topic_ids * QUEUES + queue_ids
    queue_offsets = np.empty(messages, dtype=np.int64)
    counters = np.zeros(TOPICS * QUEUES, dtype=np.int64)
    for i, k in enumerate(qkey.tolist()):  # per-queue counters in commitlog order
        queue_offsets[i] = counters[k]
        counters[k] += 1
    times = BASE_TS + np.arange(messages) // 50  # 50 messages per millisecond
    topics = [f"BenchTopic{t}" for t in range(TOPICS)]
    out = []
    for s in range(0, messages, batch):
        e = min(s + batch, messages)
        out.append(
            Columns(
                topic=[topics[t] for t in topic_ids[s:e].tolist()],
                queue_id=queue_ids[s:e].astype(np.int64),
                queue_offset=queue_offsets[s:e],
                phy_offset=phys[s:e].astype(np.int64),
                size=sizes[s:e].astype(np.int64),
                tags_code=np.full(e - s, 2598919, dtype=np.int64),
                store_timestamp=times[s:e].astype(np.int64),
                keys=[f"order-{i}" for i in range(s, e)],
                uniq_key=[f"7F0000010001{i:020X}" for i in range(s, e)],
                sys_flag=np.zeros(e - s, dtype=np.int64),
                next_offset=int(phys[e - 1] + sizes[e - 1]),
            )
        )
    return out


def wire(work: list[Columns]) -> list[bytes]:
    """The batches as the writer sends them (serialized ``DispatchBatch`` protos)."""
    return [
        commitlog_pb2.DispatchBatch(
            topic=c.topic,
            queue_id=c.queue_id.tolist(),
            queue_offset=c.queue_offset.tolist(),
            phy_offset=c.phy_offset.tolist(),
            size=c.size.tolist(),
            tags_code=c.tags_code.tolist(),
            store_timestamp=c.store_timestamp.tolist(),
            keys=c.keys,
            unique_key=c.uniq_key,
            sys_flag=c.sys_flag.tolist(),
            prepared_transaction_offset=[0] * len(c),
            next_offset=c.next_offset,
            max_offset=c.next_offset,
        ).SerializeToString()
        for c in work
    ]


def _drive(builder, work: list) -> float:
    t0 = time.perf_counter()
    unflushed = 0
    for b in work:
        if isinstance(b, bytes):
            b = Columns.from_proto(commitlog_pb2.DispatchBatch.FromString(b))
        builder.apply(b)
        unflushed += len(b)
        if unflushed >= FLUSH_EVERY:
            builder.flush()
            unflushed = 0
    builder.close()
    return time.perf_counter() - t0


def run(scale: Scale = Scale.FULL) -> list[dict]:
    messages = scale.pick(1_000_000, 100_000, 10_000)
    work = batches(messages)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-builders-") as tmp:
        cqb = ConsumeQueueBuilder(StoreLayout.of(Path(tmp) / "cq"))
        secs = _drive(cqb, work)
        rows.append(
            {
                "scenario": f"consume-queue builder, {messages:,} msgs, batch {BATCH}",
                "msgs_per_s": round(messages / secs),
                "entries_per_s": round(cqb.entries / secs),
                "seconds": round(secs, 3),
                "flush_ms_mean": round(1000 * cqb.total_flush_seconds / max(cqb.flushes, 1), 2),
            }
        )
        ixb = IndexBuilder(StoreLayout.of(Path(tmp) / "ix"))
        secs = _drive(ixb, work)
        rows.append(
            {
                "scenario": f"index builder, {messages:,} msgs x 2 keys, batch {BATCH}",
                "msgs_per_s": round(messages / secs),
                "entries_per_s": round(ixb.entries / secs),
                "seconds": round(secs, 3),
                "flush_ms_mean": round(1000 * ixb.total_flush_seconds / max(ixb.flushes, 1), 2),
            }
        )
        for batch in (BATCH, HEAD_BATCH):
            wired = wire(work if batch == BATCH else batches(messages, batch))
            for label, builder in (
                ("consume-queue", ConsumeQueueBuilder(StoreLayout.of(Path(tmp) / f"cq{batch}"))),
                ("index", IndexBuilder(StoreLayout.of(Path(tmp) / f"ix{batch}"))),
            ):
                rows.append(_from_protos(label, builder, wired, messages, batch))
    return rows


def _from_protos(label: str, builder, wired: list[bytes], messages: int, batch: int) -> dict:
    secs = _drive(builder, wired)
    return {
        "scenario": f"{label} builder from serialized protos, {messages:,} msgs, batch {batch}",
        "msgs_per_s": round(messages / secs),
        "entries_per_s": round(builder.entries / secs),
        "seconds": round(secs, 3),
        "flush_ms_mean": round(1000 * builder.total_flush_seconds / max(builder.flushes, 1), 2),
    }


if __name__ == "__main__":
    for row in run():
        print(row)
