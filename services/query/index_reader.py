"""Read-only view of the ``index/`` directory while the index builder appends to it.

Files are mapped with ``ACCESS_READ`` and their headers re-read for every query. An entry is
trusted only when its number is below the header's ``index_count`` (the builder writes the
entry, then the slot, then the header), so a half-written entry is never returned. Chains are
followed only towards strictly smaller entry numbers, so a walk always ends.

Per entry the real store time is bounded from the stored whole-second difference:
``[begin + diff*1000, begin + diff*1000 + 999]``. Two cases widen it: ``diff == 0`` (a store
time before the file's begin is clamped to 0) and entry #1 (RocketMQ measures it against the
previous file's end, then overwrites the begin with it; spec §6.3 Q2).
"""

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rmqstore.formats.index_file import (
    ENTRY,
    ENTRY_SIZE,
    HEADER_SIZE,
    SLOT,
    IndexFile,
    IndexHeader,
    file_size,
)
from rmqstore.layout import is_index_file_name
from services.query.budget import Budget
from services.query.errors import IndexConfigError
from services.query.listing import Listing
from services.query.mapped_files import FilePath, MappedFiles

SLACK_MS = 999  # an entry's time is its store time truncated to the second
NEG_INF = -(2**63)
POS_INF = 2**63 - 1
PAUSE_EVERY = 4096  # hops between pauses of a walk


class IndexEntry(NamedTuple):
    file: str  # index file name
    number: int  # entry number inside the file
    key_hash: int
    phy_offset: int
    earliest: int  # bounds of the real store time
    latest: int


PAUSE = IndexEntry("", 0, 0, 0, NEG_INF, POS_INF)  # not an entry: a point to let others run


class ChainWalk:
    """Entries of one slot chain of one file, newest first, from ``start`` (or the slot head).

    ``hops`` counts entries read; ``next_number`` is where a walk stopped early would resume
    (0 when the chain is done); both are up to date whenever the walk yields and once it
    ends. Every ``PAUSE_EVERY`` hops it yields ``PAUSE`` (by identity) instead of an entry,
    so that a long walk on an event loop can let other queries run.
    """

    def __init__(self, index: IndexFile, name: str, key_hash: int, begin: int,
                 start: int | None = None, budget: Budget | None = None,
                 header: IndexHeader | None = None) -> None:
        """``header``: the file's header, if the caller has just read it."""
        self.index = index
        self.budget = budget
        self.cut = False  # True when the budget, not the chain, ended the walk
        self.name = name
        self.key_hash = key_hash
        self.begin = begin
        hdr = header or index.read_header()
        self.count = hdr.index_count
        self.begin_ts = hdr.begin_timestamp
        if start is None:
            start = index.slot(key_hash % index.slots) if self.count > 1 else 0
        self.next_number = start if 0 < start < index.entries else 0
        self.hops = 0

    def __iter__(self) -> Iterator[IndexEntry]:
        idx, budget = self.index, self.budget
        buf, base, unpack = idx.buf, HEADER_SIZE + SLOT.size * idx.slots, ENTRY.unpack_from
        name, key_hash, begin, count, begin_ts = (
            self.name, self.key_hash, self.begin, self.count, self.begin_ts
        )
        max_hops = budget.limits.hops if budget is not None else POS_INF
        n, hops = self.next_number, self.hops
        while n > 0:
            if hops % PAUSE_EVERY == 0 and hops:
                self.next_number, self.hops = n, hops
                yield PAUSE
            if budget is not None:
                spent = budget.hops
                if spent >= max_hops or (spent % 256 == 255 and budget.exhausted):
                    self.cut = True
                    break
                budget.hops = spent + 1
            kh, phy, diff, prev = unpack(buf, base + ENTRY_SIZE * n)
            hops += 1
            if diff < 0:
                n = 0
                break
            number, n = n, (prev if 0 < prev < n else 0)
            if number >= count:  # written after the header we read: not trusted yet
                continue
            t = begin_ts + diff * 1000
            latest = POS_INF if number == 1 else t + SLACK_MS
            if latest < begin:  # chains run back in time: nothing older can match
                n = 0
                break
            if kh == key_hash:
                self.next_number, self.hops = n, hops
                yield IndexEntry(name, number, kh, phy,
                                 NEG_INF if diff == 0 or number == 1 else t, latest)
        self.next_number, self.hops = n, hops


class IndexCatalog:
    """The index files of a store, mapped read-only and cached by name.

    The directory is listed again only when it has changed (``listing.Listing``). A file
    replaced or removed changes the directory, so between listings a mapped file is used
    without asking the filesystem again.
    """

    def __init__(self, index_dir: Path, slots: int, entries: int) -> None:
        self.dir = Path(index_dir)
        self._listing = Listing(str(self.dir))  # a stat per query: a str costs less than a Path
        self._prefix = os.path.join(self.dir, "")  # names are joined to it as strings: per query
        self.slots = slots
        self.entries = entries
        self.expected_size = file_size(slots, entries)
        self._files = MappedFiles(self._index)
        self._names: list[str] = []
        self._opened: dict[str, IndexFile] = {}  # mapped since the last listing

    def names(self) -> list[str]:
        """Index file names, newest first (names sort by time). When the directory has
        changed, the mappings of files no longer there are dropped."""
        if self._listing.refresh():
            listing = self._listing.names or []
            self._names = sorted((n for n in listing if is_index_file_name(n)), reverse=True)
            self._opened = {}
            self._files.forget_except(self._prefix + n for n in self._names)
        return self._names

    def check_all(self) -> int:
        """Open every index file now (fails loudly on a size mismatch); returns the count."""
        names = self.names()
        for n in names:
            self.open(n)
        return len(names)

    def open(self, name: str) -> IndexFile | None:
        """The file mapped read-only; None if it vanished or is still empty (being created).
        A file replaced under the same name (a rebuilt tail) is mapped again."""
        index = self._opened.get(name)
        if index is None:
            index = self._files.get(self._prefix + name)
            if index is not None:
                self._opened[name] = index
        return index

    def _index(self, path: FilePath, mm: mmap.mmap) -> IndexFile:
        if len(mm) != self.expected_size:
            raise IndexConfigError(
                f"index file {path} is {len(mm)} bytes, but --index-slots {self.slots} "
                f"and --index-entries {self.entries} make {self.expected_size}"
            )
        return IndexFile(mm, self.slots, self.entries)

    def close(self) -> None:
        self._opened = {}
        self._files.close()
