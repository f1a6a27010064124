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

import functools
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rmqstore.formats.index_file import ENTRY, ENTRY_SIZE, IndexFile, file_size
from rmqstore.layout import is_index_file_name
from rmqstore.listing import Listing
from rmqstore.mapped_files import FilePath, MappedFiles
from services.query.budget import Budget
from services.query.errors import IndexConfigError

SLACK_MS = 999  # an entry's time is its store time truncated to the second
NEG_INF = -(2**63)
POS_INF = 2**63 - 1
PAUSE_EVERY = 4096  # hops between pauses of a walk
CHECK_NS = 1_000_000  # the index directory is looked at at least this often while queried


class IndexEntry(NamedTuple):
    file: str  # index file name
    number: int  # entry number inside the file
    key_hash: int
    phy_offset: int
    earliest: int  # bounds of the real store time
    latest: int


PAUSE = IndexEntry("", 0, 0, 0, NEG_INF, POS_INF)  # not an entry: a point to let others run
_entry = functools.partial(tuple.__new__, IndexEntry)  # an IndexEntry of a tuple, made in C


class KeyWalk:
    """Entries of one key hash over index files (names newest first), newest first, whose
    store time may lie in [begin, end].

    ``start`` is (file, entry) to resume at: in that file the walk begins at that entry (0:
    at the key's slot); callers resuming pass that file and older ones only. Every hop counts
    against the budget; when the budget runs out the walk ends with ``cut_at`` set to where
    a next page would resume. Every ``PAUSE_EVERY`` hops of the budget it yields ``PAUSE``
    (by identity) instead of an entry, so that a long walk on an event loop can let other
    queries run.
    """

    def __init__(self, catalog: "IndexCatalog", names: list[str], key_hash: int, begin: int,
                 end: int, budget: Budget, start: tuple[str, int] | None = None) -> None:
        self.catalog, self.names, self.key_hash = catalog, names, key_hash
        self.begin, self.end, self.budget, self.start = begin, end, budget, start
        self.cut_at: tuple[str, int] | None = None  # where the budget stopped the walk

    def __iter__(self) -> Iterator[IndexEntry]:
        key_hash, begin, end, budget = self.key_hash, self.begin, self.end, self.budget
        max_hops, names, start = budget.limits.hops, self.names, self.start
        unpack = ENTRY.unpack_from
        for i, name in enumerate(names):
            index = self.catalog.open(name)
            if index is None:
                continue
            begin_ts, end_ts, count = index.read_span()
            if count <= 1 or begin_ts > end:
                continue  # empty, or every entry is newer than the range
            if end_ts + SLACK_MS < begin:
                return  # this file and all older ones end before the range
            if start is not None and name == start[0] and start[1] > 0:
                n = start[1]
            else:
                n = index.slot(key_hash % index.slots)
            if not 0 < n < index.entries:
                n = 0
            buf, base = index.buf, index.entry_base
            spent = budget.hops  # counted here, written back wherever the walk stops
            while n > 0:
                if spent & 255 == 255 or spent >= max_hops:  # now and then: budget, pause
                    budget.hops = spent
                    if spent >= max_hops or budget.exhausted:
                        self.cut_at = (name, n)
                        return
                    if spent % PAUSE_EVERY == PAUSE_EVERY - 1:
                        yield PAUSE
                spent += 1
                kh, phy, diff, prev = unpack(buf, base + ENTRY_SIZE * n)
                if diff < 0:
                    break
                number, n = n, (prev if 0 < prev < n else 0)
                if number >= count:  # written after the header we read: not trusted yet
                    continue
                t = begin_ts + diff * 1000
                latest = POS_INF if number == 1 else t + SLACK_MS
                if latest < begin:  # chains run back in time: nothing older can match
                    break
                if kh == key_hash:
                    earliest = NEG_INF if diff == 0 or number == 1 else t
                    if earliest <= end:
                        budget.hops = spent
                        yield _entry((name, number, kh, phy, earliest, latest))
            budget.hops = spent
            if i + 1 < len(names) and budget.exhausted:
                self.cut_at = (names[i + 1], 0)
                return


class IndexCatalog:
    """The index files of a store, mapped read-only and cached by name.

    The directory is looked at when a new file may have come (``names``) and listed again
    only when it has changed (``listing.Listing``). A file replaced or removed changes the
    directory, so between listings a mapped file is used without asking the filesystem
    again.
    """

    def __init__(self, index_dir: Path, slots: int, entries: int) -> None:
        self.dir = Path(index_dir)
        self._listing = Listing(str(self.dir))  # a str costs less than a Path
        self._prefix = os.path.join(self.dir, "")  # names are joined to it as strings: per query
        self.slots = slots
        self.entries = entries
        self.expected_size = file_size(slots, entries)
        self._files = MappedFiles(self._index)
        self._names: list[str] = []
        self._opened: dict[str, IndexFile] = {}  # mapped since the last listing
        self._checked_ns = 0  # monotonic time of the last look at the directory
        self._tail: IndexFile | None = None  # the newest file with entries, at that look

    def names(self) -> list[str]:
        """Index file names, newest first (names sort by time).

        The directory is looked at only when a new file may have come, and in any case once
        every ``CHECK_NS``: writers (ours, and RocketMQ's) add a file only once the newest
        file with entries is full, or when there is none (a file emptied in place counts as
        a change too). Other changes (a rebuild's output swapped in, files removed by hand)
        are seen within ``CHECK_NS``. When the directory has changed, the mappings of files
        no longer there are dropped.
        """
        now, tail = time.monotonic_ns(), self._tail
        if tail is not None and now < self._checked_ns + CHECK_NS \
                and 1 < tail.read_span()[2] < tail.entries:
            return self._names  # the newest file with entries still has room
        self._checked_ns = now
        if self._listing.refresh():
            listing = self._listing.names or []
            self._names = sorted((n for n in listing if is_index_file_name(n)), reverse=True)
            self._opened = {}
            self._files.forget_except(self._prefix + n for n in self._names)
        self._tail = self._newest_with_entries()
        return self._names

    def _newest_with_entries(self) -> IndexFile | None:
        """The newest file with entries: the one writers fill (files newer than it are
        empty); None if there is none, or a file listed could not be mapped."""
        for name in self._names:
            index = self.open(name)
            if index is None:
                return None  # gone, or still being made: look again on the next query
            if index.read_span()[2] > 1:
                return index
        return None

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
        self._opened, self._tail = {}, None
        self._files.close()
