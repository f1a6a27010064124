"""Recovery after an unclean stop (MiB/s of commitlog checked) and the in-process index walk
(lookups/s) — the two store operations that do not cross gRPC."""

import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_rebuild import write_synthetic
from rmqstore.formats import index_file as ixf
from rmqstore.formats.javahash import index_hash, index_hashes
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine

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


def index_walk(keys: int) -> dict:
    slots, entries = keys // 2, keys + 1
    buf = bytearray(ixf.file_size(slots, entries))
    f = ixf.IndexFile(buf, slots, entries)
    names = [f"Topic#order-{i}" for i in range(keys)]
    f.put_many(
        index_hashes(names),
        np.arange(keys, dtype=np.int64) * 1000,
        1_700_000_000_000 + np.arange(keys, dtype=np.int64),
    )
    rng = random.Random(3)
    probes = [index_hash(names[rng.randrange(keys)]) for _ in range(200_000)]
    t0 = time.perf_counter()
    for h in probes:
        f.walk(h, 0, 2**62, 64, 999)
    seconds = time.perf_counter() - t0
    return {
        "scenario": f"index walk in process, {keys:,} keys, {slots:,} slots",
        "lookups/s": len(probes) / seconds,
    }


def run(quick: bool = False) -> list[dict]:
    total = 128 * MIB if quick else 1024 * MIB
    rows = recovery(total, 64 * MIB if quick else 256 * MIB)
    rows.append(fresh_segment(8 * MIB, 256 * MIB if quick else 1024 * MIB))
    rows.append(index_walk(100_000 if quick else 1_000_000))
    return rows
