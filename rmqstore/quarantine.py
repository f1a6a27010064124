"""Bytes recovery cut from the commitlog, kept aside instead of deleted.

When start-up recovery ends the commitlog before bytes that are not zero (a torn or corrupt
record and everything after it, later segments), it first copies each cut range here, then
cuts. Nothing is ever deleted from this directory by rmqstore::

    rmqstore/quarantine/<20-digit commitlog offset>-<epoch ms>.bin    the bytes of one range
    rmqstore/quarantine/ranges.jsonl                                one JSON object a line:

    {"offset": 3145728, "size": 1048568, "file": "000…3145728-1764130000000.bin",
     "segment": "00000000000003145728", "reason": "…", "at": 1764130000000}

``offset`` is the commitlog offset of the range's first byte (``size`` bytes). A range runs
from the cut (or a later segment's start) to its segment's last byte that is not zero. The
``.bin`` file is made durable before its line is appended, and the line before the
commitlog is cut.
"""

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rmqstore.durable import fsync_dir, write_all
from rmqstore.layout import StoreLayout

INDEX = "ranges.jsonl"
_CHUNK = 8 << 20


@dataclass(frozen=True)
class Range:
    offset: int
    size: int
    file: str
    segment: str
    reason: str
    at: int  # when it was cut, epoch ms

    @property
    def end(self) -> int:
        return self.offset + self.size


def keep(layout: StoreLayout, offset: int, data: memoryview, segment: str, reason: str) -> Range:
    """Copy ``data`` (the bytes at commitlog ``offset``) into the quarantine, durably."""
    d = layout.quarantine_dir
    d.mkdir(parents=True, exist_ok=True)
    at = time.time_ns() // 1_000_000
    name = f"{offset:020d}-{at}.bin"
    fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for pos in range(0, len(data), _CHUNK):
            write_all(fd, data[pos : pos + _CHUNK])  # every byte, or OSError: no cut
        os.fsync(fd)
    finally:
        os.close(fd)
    kept = Range(offset, len(data), name, segment, reason, at)
    with open(d / INDEX, "a") as f:
        f.write(json.dumps(asdict(kept)) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(d)
    return kept


def ranges(layout: StoreLayout) -> list[Range]:
    """Every range kept so far, in the order they were cut (lines that do not parse are
    skipped: a crash may leave a partial last line)."""
    try:
        lines = (layout.quarantine_dir / INDEX).read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(Range(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def total_bytes(layout: StoreLayout) -> int:
    return sum(r.size for r in ranges(layout))


def path_of(layout: StoreLayout, r: Range) -> Path:
    return layout.quarantine_dir / r.file
