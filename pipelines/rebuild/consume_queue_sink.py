"""Consume-queue files of one queue, built from the units the decoded ranges found.

File ``consumequeue/<topic>/<queue>/<20-digit byte offset>`` holds ``entries_per_file`` units
and is written full size (the unused tail is zeros, as in a preallocated file). Unit n sits at
byte ``n * 20`` of the queue. As RocketMQ's ``fillPreBlank`` does, a queue whose first unit is
not at the start of its first file gets ``(0, 0x7FFFFFFF, 0)`` units before it.
"""

import os
import uuid
from pathlib import Path

import numpy as np

from pipelines.rebuild.range_data import CQ_DTYPE
from rmqstore.formats import consume_queue
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name

PRE_BLANK = consume_queue.CqUnit(0, 0x7FFFFFFF, 0)


def file_numbers(first_offset: int, last_offset: int, entries_per_file: int) -> range:
    """Numbers of the files holding queue offsets first..last."""
    return range(first_offset // entries_per_file, last_offset // entries_per_file + 1)


def split_by_file(units: np.ndarray, entries_per_file: int) -> dict[int, np.ndarray]:
    """Units (CQ_DTYPE, ordered by queue offset) grouped by the file they belong in."""
    files = units["queue_offset"] // entries_per_file
    cuts = np.flatnonzero(np.diff(files)) + 1
    return {int(part["queue_offset"][0] // entries_per_file): part
            for part in np.split(units, cuts) if len(part)}


def file_bytes(units: np.ndarray, file_number: int, entries_per_file: int,
               queue_first_offset: int) -> bytes:
    """The written part of one file (up to its last unit); the caller pads it to full size."""
    units = np.sort(units, order="queue_offset", kind="stable")
    offsets = units["queue_offset"]
    if len(offsets) > 1:
        keep = np.ones(len(offsets), dtype=bool)
        keep[1:] = offsets[1:] != offsets[:-1]  # a repeated unit is ignored, as on replay
        units, offsets = units[keep], offsets[keep]
    base = file_number * entries_per_file
    slots = (offsets - base).astype(np.int64)
    if len(slots) and (slots[0] < 0 or slots[-1] >= entries_per_file):
        raise ValueError(f"units outside file {file_number} ({entries_per_file} entries)")
    out = np.zeros(int(slots[-1]) + 1 if len(slots) else 0, dtype=consume_queue.UNIT_DTYPE)
    first_slot = queue_first_offset - base
    if 0 < first_slot <= len(out):
        out[:first_slot] = PRE_BLANK
    out["offset"][slots] = units["phy"]
    out["size"][slots] = units["size"]
    out["tags_code"][slots] = units["tags"]
    return out.tobytes()


def file_path(store_root: Path, topic: str, queue_id: int, file_number: int,
              entries_per_file: int) -> Path:
    qdir = StoreLayout.of(store_root).queue_dir(topic, queue_id)
    return qdir / segment_name(file_number * consume_queue.file_size(entries_per_file))


def write_file(path: Path, data: bytes, size: int) -> None:
    """Write ``data`` at the start of a file of ``size`` bytes, durably, then move it to
    ``path`` (a retried task simply writes it again)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "xb") as f:
        f.write(data)
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def empty_units() -> np.ndarray:
    return np.zeros(0, dtype=CQ_DTYPE)
