"""Index files built from the index keys of the whole commitlog, in commitlog order.

Keys are numbered over the commitlog; a file takes ``entries - 1`` of them (entry 0 is never
used), so key n goes to file ``n // capacity`` and every file can be built on its own with
``IndexFile.put_many`` over a full-size buffer, piece by piece: each range's keys of a file
come with their chains (``index_file.batch_chains``) worked out by the task that cut them.
Names come from each file's first entry's store time (``layout.unique_index_file_name``),
given in file order once every file is built.
"""

import mmap
import os
import uuid
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rmqstore.formats.index_file import Chains, IndexFile, IndexHeader, batch_chains, file_size
from rmqstore.layout import unique_index_file_name


def capacity(entries: int) -> int:
    """Keys one file holds."""
    return entries - 1


def file_slices(first_key: int, count: int, per_file: int) -> list[tuple[int, int, int]]:
    """(file number, start, stop) of the keys [first_key, first_key + count) per file."""
    out = []
    n = first_key
    stop_all = first_key + count
    while n < stop_all:
        f = n // per_file
        stop = min(stop_all, (f + 1) * per_file)
        out.append((f, n - first_key, stop - first_key))
        n = stop
    return out


class Piece(NamedTuple):
    """Consecutive keys of one index file, with how they chain among themselves."""

    hashes: np.ndarray
    phys: np.ndarray
    times: np.ndarray
    chains: Chains


def piece(hashes: np.ndarray, phys: np.ndarray, times: np.ndarray, slots: int) -> Piece:
    """A piece of keys, its chains worked out here (in parallel tasks, not in the file's)."""
    return Piece(hashes, phys, times, batch_chains(hashes.astype(np.int64) % slots))


def build_file(path: Path, pieces: list[Piece], slots: int, entries: int) -> IndexHeader:
    """Write one index file holding the keys of these pieces in order, full size, durably,
    then move it to ``path`` (a retried task simply builds it again)."""
    size = file_size(slots, entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "x+b") as f:
        f.truncate(size)
        with mmap.mmap(f.fileno(), size) as m:
            index = IndexFile(m, slots, entries)
            for p in pieces:
                put = index.put_many(p.hashes, p.phys, p.times, p.chains)
                if put != len(p.hashes):
                    raise ValueError(f"index file {path} is full: it took {put} of "
                                     f"{len(p.hashes)} keys of a piece")
            header = index.header
            del index  # drop its views of the map before the map closes
            m.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return header


def names_in_order(first_times: list[int]) -> list[str]:
    """File names for files whose first entries have these store times, in file order."""
    taken: set[str] = set()
    names = []
    for t in first_times:
        name = unique_index_file_name(t, taken)
        taken.add(name)
        names.append(name)
    return names
