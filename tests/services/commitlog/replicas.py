"""Helpers of the replication tests: a source store written by our writer, file comparisons."""

import time
from pathlib import Path

from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine

SEGMENT = 64 * 1024


def source_store(root: Path, count: int, tag: str = "m", body: int = 300) -> int:
    """A store written by our writer: ``count`` messages over several 64 KiB files."""
    e = CommitLogEngine(WriterConfig(store=root, segment_size=SEGMENT, preallocate=False))
    try:
        for i in range(0, count, 10):
            e.put([common_pb2.Message(topic=f"T{j % 3}", body=(f"{tag}{i + j}-" * 50)[:body]
                                      .encode(), keys=f"{tag}-{i + j}", tags=f"tag{j % 2}")
                   for j in range(min(10, count - i))])  # fmt: skip
        return e.max_offset
    finally:
        e.close()



def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def files(d: Path) -> dict[str, bytes]:
    """The commit-log files that hold data (not the next one, pre-created empty)."""
    out = {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name.isdigit()}
    return {name: data for name, data in out.items() if data.count(0) != len(data)}
