"""The index builder: dispatch batches in, RocketMQ index files out.

No gRPC here, so the service, the tests and the rebuild pipeline share it.

* ``apply(batch)`` indexes ``topic#UNIQ_KEY`` and ``topic#key`` per KEYS token of every record
  not already indexed (rollback records excepted): a batch's keys are hashed and chained at
  once with numpy. A full file is flushed and closed, and the next one is named after its
  first entry's store time (``layout.unique_index_file_name``).
* ``flush()`` syncs the current file and records the durable offset together with the
  names of the files holding entries (in creation order) and the current file's header.
* No index file is ever deleted. On start the files are brought back to the recorded durable
  state: the current file gets its recorded header back, entries past it are zeroed and its
  slot table is rebuilt from the entries it keeps; files not in the record (created after
  it) are emptied in place and reused when the replay names them again. Replaying from the
  durable offset therefore adds every key once.
* ``truncate(phy_end)`` drops entries of records at or past a (new, lower) commitlog end.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rmqstore.dispatch_columns import index_keys_of_texts
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import index_file as ixf
from rmqstore.layout import StoreLayout, is_index_file_name, unique_index_file_name
from services.indexer import progress
from services.indexer.batch import Columns
from services.indexer.index_files import IndexHandle
from services.indexer.progress import ProgressFileError

log = logging.getLogger(__name__)

NAME = "index"


class IndexBuilder(progress.FlushedOutput):
    def __init__(
        self,
        layout: StoreLayout,
        slots: int = ixf.DEFAULT_SLOTS,
        entries: int = ixf.DEFAULT_ENTRIES,
        name: str = NAME,
    ) -> None:
        if slots <= 0 or entries <= 1:
            raise InvalidArgumentError(
                f"an index file needs at least 1 slot and 2 entries, got {slots} and {entries}"
            )
        self.layout = layout
        self.name = name
        self.slots = slots
        self.capacity = entries
        self.dir = layout.index_dir
        self.progress_path = layout.progress(name)
        self.file_names: list[str] = []  # files holding entries, oldest first
        self.current: IndexHandle | None = None  # the newest of them, mapped
        self.spares: dict[str, Path] = {}  # emptied files, reused if replay names them again
        self._dir_dirty = False
        # counters (cheap, read by the servicer and metrics)
        self.entries = 0  # entries written since start
        self.records = 0  # records indexed since start
        self.rolls = 0
        self._generation = 0  # bumped by truncate: flush tickets from before are stale
        self.flushes = 0
        self.last_flush_seconds = 0.0
        self.total_flush_seconds = 0.0
        self.repaired_entries = 0  # entries past the durable point dropped on start
        self.emptied_files = 0  # files emptied on start (all their entries past it)
        self.topics = layout.indexed_topics()  # kept in layout.index_topics for lookups by id
        self._recover()

    # -- start-up ----------------------------------------------------------------------
    def _names_on_disk(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(
            p.name for p in self.dir.iterdir() if is_index_file_name(p.name) and p.is_file()
        )

    def _open(self, name: str) -> IndexHandle:
        return IndexHandle.open(self.dir / name, self.slots, self.capacity)

    def _recover(self) -> None:
        names = self._names_on_disk()
        stored = progress.read(self.progress_path)
        if stored is None:
            self._adopt(names)
            return
        self.durable_offset = stored.offset
        name = stored.extra.get("file")
        header = stored.extra.get("header")
        if name is not None and name not in names:
            raise ProgressFileError(
                f"{self.progress_path} names index file {name}, which is not in {self.dir}"
            )
        listed = stored.extra.get("files")
        if listed is None:  # a record without the list: files sort by creation time
            listed = names[: names.index(name) + 1] if name is not None else []
        # files older than every file left were deleted by retention (delete_below)
        listed = [n for n in listed if n in names or n == name or (names and n > names[0])]
        missing = [n for n in listed if n not in names]
        if missing:
            raise ProgressFileError(
                f"{self.progress_path} lists index files {missing[:5]} missing from {self.dir}"
            )
        for later in names:
            if later in listed:
                continue
            h = self._open(later)
            if not h.is_empty:
                h.reset()
                self.emptied_files += 1
            h.close()
            self.spares[later] = self.dir / later
        self.file_names = list(listed)
        for older in self.file_names[:-1]:
            h = self._open(older)
            if h.header.index_count < self.capacity:
                log.warning(
                    "%s: index file %s is not full (%d of %d entries)",
                    self.name,
                    older,
                    h.header.entries,
                    self.capacity - 1,
                )
            h.close()
        if name is not None:
            self.current = self._open(name)
            if not isinstance(header, list) or len(header) != len(ixf.IndexHeader._fields):
                raise ProgressFileError(f"{self.progress_path} holds no header for {name}")
            self.repaired_entries = self.current.restore(ixf.IndexHeader(*header))
            self.current.flush()
        self.skip_below = self.built_offset = self.durable_offset
        log.info(
            "%s: %d files (%d emptied, %d entries dropped), resuming from %d",
            self.name,
            len(self.file_names),
            self.emptied_files,
            self.repaired_entries,
            self.durable_offset,
        )

    def _adopt(self, names: list[str]) -> None:
        """No record of ours: take the files as they are (e.g. a RocketMQ store).

        Records up to the last file's end offset count as indexed.
        """
        self.durable_offset = self.built_offset = self.skip_below = 0
        for name in names:
            h = self._open(name)
            if h.is_empty:
                self.spares[name] = h.path
            else:
                self.file_names.append(name)
                self.skip_below = max(self.skip_below, h.header.end_phy_offset + 1)
            h.close()
        if self.file_names:
            self.current = self._open(self.file_names[-1])
        else:
            progress.write(self.progress_path, self._progress_record())

    def _progress_record(self) -> progress.Progress:
        cur = self.current
        return progress.Progress(
            self.built_offset,
            {
                "file": cur.name if cur else None,
                "header": list(cur.header) if cur else None,
                "files": list(self.file_names),
            },
        )

    # -- counters ----------------------------------------------------------------------
    @property
    def files(self) -> int:
        return len(self.file_names)

    @property
    def slot_occupancy(self) -> float:
        """Share of the current file's slots that head a chain."""
        return self.current.header.hash_slot_count / self.slots if self.current else 0.0

    @property
    def mean_chain_length(self) -> float:
        """Entries per occupied slot in the current file (the mean chain walked on a hit)."""
        h = self.current.header if self.current else None
        return h.entries / h.hash_slot_count if h and h.hash_slot_count else 0.0

    # -- writing -----------------------------------------------------------------------
    def apply(self, batch: Columns) -> int:
        """Index a batch (records below what is already indexed are skipped); new entries."""
        phy = batch.phy_offset
        n = len(phy)
        if n > 1 and not bool(np.all(phy[1:] > phy[:-1])):
            raise InvalidArgumentError("dispatch batch is not in commitlog order")
        start = int(np.searchsorted(phy, self.skip_below, side="left")) if n else 0
        topics: list[str] = []
        record, hashes = index_keys_of_texts(
            batch.topic[start:], batch.uniq_key[start:], batch.keys[start:], batch.sys_flag[start:],
            distinct_topics=topics,
        )
        self._note_topics(topics)
        if len(record):
            self._put(hashes, phy[start:][record], batch.store_timestamp[start:][record])
        self.records += n - start
        self.built_offset = max(self.built_offset, batch.next_offset)
        self.skip_below = max(self.skip_below, self.built_offset)
        return len(record)

    def _note_topics(self, topics: Sequence[str]) -> None:
        """Record topics not seen before, durably, before any entry of theirs is: the query
        service looks a message id up in every indexed topic, consume queue or not."""
        new = set(topics) - self.topics
        if new:
            self.topics = self.layout.note_indexed_topics(self.topics | new)

    def _put(self, hashes: np.ndarray, phys: np.ndarray, times: np.ndarray) -> None:
        done, total = 0, len(hashes)
        while done < total:
            cur = self.current
            k = cur.index.put_many(hashes[done:], phys[done:], times[done:]) if cur else 0
            if cur is None or k == 0:
                self._roll(int(times[done]))
                continue
            cur.file.dirty = True
            done += k
        self.entries += total

    def _roll(self, first_timestamp: int) -> None:
        """Flush and close the full file; open the next, named by its first entry's time."""
        if self.current is not None:
            self.current.close()
            self.current = None
        name = unique_index_file_name(first_timestamp, set(self.file_names))
        spare = self.spares.pop(name, None)
        if spare is not None:
            h = IndexHandle.open(spare, self.slots, self.capacity)
            if not h.is_empty:
                h.reset()
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            h = IndexHandle.create(self.dir / name, self.slots, self.capacity)
            self._dir_dirty = True
        self.file_names.append(name)
        self.current = h
        self.rolls += 1

    def flush(self) -> int:
        """Sync the current file, then record and return the durable offset."""
        return self.finish_flush(self.begin_flush())

    def begin_flush(self) -> progress.FlushTicket:
        """Capture what to sync and the progress record (under the caller's lock; cheap)."""
        paths = []
        if self.current is not None and (
            self.current.file.take_dirty() or self.built_offset != self.durable_offset
        ):
            paths.append(self.current.file.path)
        dirs = [self.dir, self.dir.parent] if self._dir_dirty else []
        self._dir_dirty = False
        return progress.FlushTicket(self._progress_record(), paths, dirs, self._generation)

    def delete_below(self, phy_min: int) -> int:
        """Retention: delete the files, oldest first and never the newest, whose last entry
        points below the commitlog's minimum (RocketMQ's deleteExpiredFile)."""
        deleted = 0
        while len(self.file_names) > 1:
            h = self._open(self.file_names[0])
            end = h.header.end_phy_offset
            h.close()
            if end >= phy_min:
                break
            (self.dir / self.file_names.pop(0)).unlink()
            self._dir_dirty = True
            deleted += 1
        return deleted

    def truncate(self, phy_end: int) -> None:
        """Drop entries of records at or past ``phy_end`` (the commitlog was cut there).

        Files are emptied, never deleted. The cut state is recorded before it is made, so a
        crash half-way finishes the cut on the next start.
        """
        if phy_end < 0:
            raise InvalidArgumentError(f"cannot truncate to a negative offset {phy_end}")
        self._generation += 1
        if phy_end >= self.built_offset and phy_end >= self.skip_below:
            return
        self.flush()
        if self.current is not None:
            self.current.close()
            self.current = None
        handles: list[IndexHandle] = []
        target: ixf.IndexHeader | None = None
        while self.file_names:
            h = self._open(self.file_names[-1])
            cut = h.cut_header(phy_end)
            if cut.index_count > 1:
                target = cut
                handles.append(h)
                break
            handles.append(h)
            self.file_names.pop()
        self.built_offset = self.skip_below = min(self.built_offset, phy_end)
        self.durable_offset = self.built_offset
        progress.write(
            self.progress_path,
            progress.Progress(
                self.durable_offset,
                {
                    "file": self.file_names[-1] if target else None,
                    "header": list(target) if target else None,
                    "files": list(self.file_names),
                },
            ),
        )
        for h in handles:
            if target is not None and h.name == self.file_names[-1]:
                self.current = h
                self.current.restore(target)
                self.current.flush()
            else:
                h.reset()
                h.close()
                self.spares[h.name] = h.path

    def close(self) -> None:
        """Flush, record progress and unmap."""
        self.flush()
        if self.current is not None:
            self.current.close()
            self.current = None
