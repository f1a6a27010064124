"""What the decoding tasks of a rebuild hand to the tasks that write its files, as files.

Each decoded range leaves its consume-queue units (one file per queue) and its index keys with
their chains in a work directory of the staging root, which every executor sees as it sees
the output. A file-writing task reads only the pieces its files need, so no decoded data goes
through Spark's block store and shuffle (which moved each range's arrays through the JVM and
back twice).

    <work>/<range>.q<i>.npy   the units (``CQ_DTYPE``) of the range's i-th queue, in the order
                              of ``RangeData.queues``
    <work>/<range>.keys.npy   its index keys (``KEY_DTYPE``): hash, phy, time, and their
                              chains (prev, last: ``index_file.batch_chains`` of the keys'
                              slots)

Files appear under their final names only once complete, so a retried task rewrites them.
"""

import os
import uuid
from pathlib import Path

import numpy as np

from pipelines.rebuild import index_sink
from pipelines.rebuild.range_data import RangeData
from rmqstore.formats.index_file import Chains

# one index key of a range: what ``IndexFile.put_many`` takes, and its place in its chain
KEY_DTYPE = np.dtype([("hash", "<i4"), ("phy", "<i8"), ("time", "<i8"), ("prev", "<i4"),
                      ("last", "?")])


def _save(path: Path, array: np.ndarray) -> None:
    """``array`` as ``path``, which appears under that name only once complete."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def save(work: Path, data: RangeData, slots: int) -> None:
    """Leave a decoded range's units and keys (with their chains in ``slots`` slots)."""
    for i, units in enumerate(data.queues.values()):
        _save(work / f"{data.number}.q{i}.npy", units)
    if data.key_count:
        piece = index_sink.piece(data.key_hashes, data.key_phys, data.key_times, slots)
        keys = np.empty(data.key_count, dtype=KEY_DTYPE)
        keys["hash"], keys["phy"], keys["time"] = piece.hashes, piece.phys, piece.times
        keys["prev"], keys["last"] = piece.chains.prev, piece.chains.last
        _save(work / f"{data.number}.keys.npy", keys)


def units(work: Path, number: int, queue_index: int) -> np.ndarray:
    """The units of range ``number``'s ``queue_index``-th queue."""
    return np.load(work / f"{number}.q{queue_index}.npy")


def keys(work: Path, number: int, start: int, stop: int, slots: int) -> index_sink.Piece:
    """Keys [start, stop) of range ``number`` as a piece of one index file (a part of a
    range's keys, cut at a file boundary, is chained anew)."""
    k = np.load(work / f"{number}.keys.npy")
    if start == 0 and stop == len(k):
        return index_sink.Piece(k["hash"], k["phy"], k["time"], Chains(k["prev"], k["last"]))
    k = k[start:stop]
    return index_sink.piece(k["hash"], k["phy"], k["time"], slots)
