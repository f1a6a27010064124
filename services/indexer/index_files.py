"""Index files on disk: create, map, and cut back to a known state after a crash.

The bytes are ``rmqstore.formats.index_file``'s; this module only adds the file handling and
the repairs the builder needs:

* ``reset``: make a file empty again (header, slots and used entries zeroed), kept on disk;
* ``restore``: put back a header recorded at a durable point, zero the entries after it and
  rebuild the slot table from the entries that remain (entries only ever point backwards, so
  the chains of the kept entries are intact);
* ``cut_header``: the header left once entries at or past a commitlog offset are dropped.
"""

from pathlib import Path

import numpy as np

from rmqstore.formats import index_file as ixf
from services.indexer.mapped import MappedFile


class IndexHandle:
    """One mapped index file and its ``IndexFile`` view."""

    def __init__(self, path: Path, file: MappedFile, slots: int, entries: int) -> None:
        self.path = path
        self.name = path.name
        self.file = file
        self.slots = slots
        self.entries = entries
        self.index = ixf.IndexFile(file.mm, slots, entries)
        self._entry_base = ixf.HEADER_SIZE + ixf.SLOT_SIZE * slots

    @classmethod
    def open(cls, path: Path, slots: int, entries: int) -> "IndexHandle":
        return cls(path, MappedFile.open(path, ixf.file_size(slots, entries)), slots, entries)

    @classmethod
    def create(cls, path: Path, slots: int, entries: int) -> "IndexHandle":
        return cls(path, MappedFile.create(path, ixf.file_size(slots, entries)), slots, entries)

    @property
    def header(self) -> ixf.IndexHeader:
        return self.index.header

    @property
    def is_empty(self) -> bool:
        return self.index.header.index_count <= 1

    def slot_view(self) -> np.ndarray:
        return np.frombuffer(self.file.mm, dtype=">i4", count=self.slots, offset=ixf.HEADER_SIZE)

    def entry_view(self, count: int) -> np.ndarray:
        return np.frombuffer(
            self.file.mm, dtype=ixf.ENTRY_DTYPE, count=count, offset=self._entry_base
        )

    def flush(self) -> None:
        self.file.dirty = True
        self.file.flush()

    def close(self) -> None:
        self.file.flush()
        del self.index
        self.file.close()

    # -- repairs -------------------------------------------------------------------------
    def _zero_entries(self, start: int, stop: int) -> None:
        stop = min(stop, self.entries)
        if stop > start:
            a = self._entry_base + ixf.ENTRY_SIZE * start
            b = self._entry_base + ixf.ENTRY_SIZE * stop
            self.file.mm[a:b] = bytes(b - a)

    def _rebuild_slots(self, count: int) -> int:
        """Point every slot at its newest entry below ``count``; return occupied slots."""
        view = self.slot_view()
        view[:] = 0
        if count <= 1:
            return 0
        hashes = self.entry_view(count)["hash"][1:].astype(np.int64)
        slot_ids = (hashes % self.slots)[::-1]
        numbers = np.arange(count - 1, 0, -1, dtype=np.int64)
        occupied, first = np.unique(slot_ids, return_index=True)
        view[occupied] = numbers[first]
        return len(occupied)

    def _write_header(self, h: ixf.IndexHeader) -> None:
        ixf.HEADER.pack_into(self.file.mm, 0, *h)
        self.index.read_header()
        self.file.dirty = True

    def reset(self) -> None:
        """Empty the file in place (it stays on disk, ready to be filled again)."""
        used = max(self.header.index_count, 1)
        self._zero_entries(1, used)
        self.slot_view()[:] = 0
        self._write_header(ixf.IndexHeader(0, 0, 0, 0, 0, 0))

    def restore(self, h: ixf.IndexHeader) -> int:
        """Return the file to a recorded durable header; the number of entries dropped."""
        count = max(h.index_count, 1)
        on_disk = max(self.header.index_count, 1)
        slots = self.slot_view()
        if self.header == h and not bool(np.any(slots >= count)):
            return 0
        self._zero_entries(count, max(on_disk, count))
        self._rebuild_slots(count)
        self._write_header(h)
        return max(on_disk - count, 0)

    def cut_header(self, phy_end: int) -> ixf.IndexHeader:
        """The header this file has once entries at or past ``phy_end`` are dropped.

        Pass it to ``restore`` to make the cut. The end time is only known to the second
        once entries are dropped: it becomes the last kept entry's second + 999 ms, so
        time-range checks still cover that entry.
        """
        h = self.header
        count = max(h.index_count, 1)
        phys = self.entry_view(count)["phy"][1:]
        keep = int(np.searchsorted(phys, phy_end, side="left"))
        if keep + 1 >= count:
            return h
        if keep == 0:
            return ixf.IndexHeader(0, 0, 0, 0, 0, 0)
        kept = self.entry_view(keep + 1)
        last = kept[keep]
        occupied = len(np.unique(kept["hash"][1:].astype(np.int64) % self.slots))
        return h._replace(
            end_timestamp=h.begin_timestamp + int(last["diff"]) * 1000 + 999,
            end_phy_offset=int(last["phy"]),
            hash_slot_count=occupied,
            index_count=keep + 1,
        )
