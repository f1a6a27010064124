"""What the decoding tasks of a rebuild hand to the tasks that write its files, as files.

Each decoded range leaves its consume-queue units (one file per queue) and its index keys with
their chains in a work directory of the staging root, which every executor sees as it sees
the output. A file-writing task reads only the pieces its files need, so no decoded data goes
through Spark's block store and shuffle (which moved each range's arrays through the JVM and
back twice).

    <work>/<range>.q<i>.npy   the units (``CQ_DTYPE``) of the range's i-th queue, in the order
                              of ``RangeData.queues``
    <work>/<range>.keys.npz   its index keys: hashes, phys, times, and their chains (prev,
                              last: ``index_file.batch_chains`` of the keys' slots)

Files appear under their final names only once complete, so a retried task rewrites them.
"""

import os
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO

import numpy as np

from pipelines.rebuild import index_sink
from pipelines.rebuild.range_data import RangeData
from rmqstore.formats.index_file import Chains, batch_chains


def _put(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


def save(work: Path, data: RangeData, slots: int) -> None:
    """Leave a decoded range's units and keys (with their chains in ``slots`` slots)."""
    for i, units in enumerate(data.queues.values()):
        _put(work / f"{data.number}.q{i}.npy", partial(_save, units))
    if data.key_count:
        chains = batch_chains(data.key_hashes.astype(np.int64) % slots)
        _put(work / f"{data.number}.keys.npz", partial(_save_keys, data, chains))


def _save(array: np.ndarray, f: IO[bytes]) -> None:
    np.save(f, array)


def _save_keys(data: RangeData, chains: Chains, f: IO[bytes]) -> None:
    np.savez(f, hashes=data.key_hashes, phys=data.key_phys, times=data.key_times,
             prev=chains.prev, last=chains.last)


def units(work: Path, number: int, queue_index: int) -> np.ndarray:
    """The units of range ``number``'s ``queue_index``-th queue."""
    return np.load(work / f"{number}.q{queue_index}.npy")


def keys(work: Path, number: int, start: int, stop: int, slots: int) -> index_sink.Piece:
    """Keys [start, stop) of range ``number`` as a piece of one index file (a part of a
    range's keys, cut at a file boundary, is chained anew)."""
    with np.load(work / f"{number}.keys.npz") as z:
        hashes, phys, times = z["hashes"], z["phys"], z["times"]
        if start == 0 and stop == len(hashes):
            return index_sink.Piece(hashes, phys, times, Chains(z["prev"], z["last"]))
    return index_sink.piece(hashes[start:stop], phys[start:stop], times[start:stop], slots)
