"""The 200 golden messages put anew through the writer: every queue gets RocketMQ's entry
count and tags codes in order, the index gets every key, and ``rmqstore inspect`` shows it."""

import json
import subprocess
import sys

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.layout import SCHEDULE_TOPIC, StoreLayout
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from tests import procs
from tests.services.indexer.helpers import (
    GOLDEN_CQ_ENTRIES,
    GOLDEN_ENTRIES,
    GOLDEN_SLOTS,
    index_files,
    open_index,
)
from tests.services.indexer.test_services import start_builder, wait_durable

pytestmark = [pytest.mark.integration, pytest.mark.golden]


def _queues(layout: StoreLayout) -> dict[str, list[tuple[int, int]]]:
    """(commitlog offset, tags code) of every unit, per "topic/queue", across the queue's files."""
    out = {}
    for topic, qid, qdir in layout.queues():
        units = []
        for f in sorted(qdir.iterdir()):
            arr = cq.units(f.read_bytes())
            n = cq.valid_count(f.read_bytes())
            units += [(int(u["offset"]), int(u["tags_code"])) for u in arr[:n]]
        out[f"{topic}/{qid}"] = units
    return out


def test_golden_messages_put_anew_build_rocketmq_queues(tmp_path, golden_dir, golden_expected):
    store = tmp_path / "store"
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", "65536", "--store-host", "198.51.100.7:10911",
                         "--no-delivery")  # the delayed ones stay as RocketMQ stored them
    cq_b = start_builder("consume-queue", store, writer.address, "--cq-entries-per-file",
                         str(GOLDEN_CQ_ENTRIES))
    ix_b = start_builder("index", store, writer.address, "--index-slots", str(GOLDEN_SLOTS),
                         "--index-entries", str(GOLDEN_ENTRIES))
    try:
        put = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "put", "--commitlog", writer.address,
             "--file", str(golden_dir / "messages.jsonl"), "--batch", "20", "--json"],
            cwd=procs.ROOT, capture_output=True, text=True, timeout=120)
        assert put.returncode == 0, put.stderr
        assert len(put.stdout.splitlines()) == 200
        end = commitlog_pb2_grpc.CommitLogStub(channel(writer.address)).GetOffsets(
            commitlog_pb2.GetOffsetsRequest()).max_offset
        wait_durable(cq_b, end)
        wait_durable(ix_b, end)
        layout = StoreLayout.of(store)
        stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
        store_time = {m["stored"]["phyOffset"]: m["stored"]["storeTimestamp"]
                      for m in golden_expected["messages"]}

        def tags(queue: str, units: list[tuple[int, int]], ours: bool) -> list[int]:
            if not queue.startswith(SCHEDULE_TOPIC):
                return [t for _, t in units]
            # the delivery time: compare the delay it adds to the record's own store time
            if ours:
                raws = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
                    offsets=[o for o, _ in units])).records
                return [t - commitlog.decode(r).store_timestamp
                        for (_, t), r in zip(units, raws, strict=True)]
            return [t - store_time[o] for o, t in units]

        ours = {q: tags(q, us, True) for q, us in _queues(layout).items()}
        golden = {q: tags(q, [(u["phyOffset"], u["tagsCode"]) for u in us], False)
                  for q, us in golden_expected["consumeQueues"].items()}
        assert ours == golden
        golden_entries = sum(f["indexCount"] - 1 for f in golden_expected["files"]["index"])
        ours_entries = sum(open_index(p).header.entries for p in index_files(store / "index"))
        assert ours_entries == golden_entries
        first = sorted((store / "consumequeue" / "TopicA" / "0").iterdir())[0]
        shown = subprocess.run([sys.executable, "-m", "services.cli.main", "inspect", str(first),
                                "--json"], cwd=procs.ROOT, capture_output=True, text=True,
                               timeout=60)
        assert shown.returncode == 0, shown.stderr
        rows = [json.loads(line) for line in shown.stdout.splitlines()]
        assert any(r.get("queueOffset") == 0 for r in rows), rows[:3]
    finally:
        for p in (ix_b, cq_b, writer):
            p.stop()
