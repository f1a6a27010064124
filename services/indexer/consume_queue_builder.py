"""The consume-queue builder: dispatch batches in, RocketMQ consume-queue files out.

No gRPC here, so the service, the tests and the rebuild pipeline share it.

* ``apply(batch)`` writes one unit per NOT/COMMIT record at ``queue_offset * 20`` of its queue;
  a batch is grouped by (topic, queue) and each contiguous run goes in with one slice
  assignment. Replaying records already written changes nothing.
* ``flush()`` syncs the touched segments and then records the durable commitlog offset.
* On start the queues are recovered from their files; with a progress record, units past the
  durable offset are cut (the subscriber replays from there).
* ``truncate(phy_end)`` cuts units pointing at or past a (new, lower) commitlog end.
"""

import logging
from pathlib import Path

import numpy as np

from rmqstore.durable import fsync_dir
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.layout import StoreLayout, validate_topic
from services.indexer import progress
from services.indexer.batch import Columns
from services.indexer.cq_files import QueueFiles

log = logging.getLogger(__name__)

NAME = "consume-queue"
_NOT = commitlog.TRANSACTION_NOT_TYPE
_COMMIT = commitlog.TRANSACTION_COMMIT_TYPE
_TX_MASK = commitlog.TRANSACTION_TYPE_MASK


class ConsumeQueueBuilder(progress.FlushedOutput):
    def __init__(
        self,
        layout: StoreLayout,
        entries_per_file: int = cq.DEFAULT_ENTRIES_PER_FILE,
        name: str = NAME,
    ) -> None:
        if entries_per_file <= 0:
            raise InvalidArgumentError(f"entries per file must be positive, got {entries_per_file}")
        self.layout = layout
        self.name = name
        self.entries_per_file = entries_per_file
        self.progress_path = layout.progress(name)
        self.queues: dict[tuple[str, int], QueueFiles] = {}
        self._topic_ids: dict[str, int] = {}
        self._topics: list[str] = []
        self._dirty: set[tuple[str, int]] = set()
        self._generation = 0  # bumped by truncate: flush tickets from before are stale
        # counters (cheap, read by the servicer and metrics)
        self.entries = 0  # new units written since start
        self.flushes = 0
        self.last_flush_seconds = 0.0
        self.total_flush_seconds = 0.0
        self._recover()

    # -- start-up ----------------------------------------------------------------------
    def _recover(self) -> None:
        for topic, queue_id, qdir in self.layout.queues():
            q = QueueFiles(qdir, self.entries_per_file)
            q.load()
            self.queues[(topic, queue_id)] = q
        stored = progress.read(self.progress_path)
        if stored is None:
            # Files without a record of ours (e.g. a RocketMQ store): trust them; replaying
            # from the start verifies every unit.
            self.durable_offset = 0
            if not self.queues:
                progress.write(self.progress_path, progress.Progress(0))
        else:
            self.durable_offset = stored.offset
            self._cut(stored.offset)
            for d in self._take_dirs():
                fsync_dir(d)
        self.built_offset = self.durable_offset
        log.info(
            "%s: %d queues, %d files, resuming from %d",
            self.name,
            len(self.queues),
            self.files,
            self.durable_offset,
        )

    # -- counters ----------------------------------------------------------------------
    @property
    def files(self) -> int:
        return sum(len(q.on_disk) for q in self.queues.values())

    @property
    def conflicts(self) -> int:
        return sum(q.conflicts for q in self.queues.values())

    # -- writing -----------------------------------------------------------------------
    def _topic_codes(self, topics: list[str]) -> np.ndarray:
        ids = self._topic_ids
        for t in set(topics).difference(ids):
            validate_topic(t)
            ids[t] = len(self._topics)
            self._topics.append(t)
        return np.fromiter((ids[t] for t in topics), dtype=np.int64, count=len(topics))

    def _queue(self, topic: str, queue_id: int) -> QueueFiles:
        key = (topic, queue_id)
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = QueueFiles(
                self.layout.queue_dir(topic, queue_id), self.entries_per_file
            )
        return q

    def apply(self, batch: Columns) -> int:
        """Write the consume-queue units of a batch; return how many units were new."""
        new = 0
        tx = batch.sys_flag & _TX_MASK
        sel = np.flatnonzero((tx == _NOT) | (tx == _COMMIT))
        if len(sel):
            qids = batch.queue_id[sel]
            qos = batch.queue_offset[sel]
            if qids.min() < 0 or qos.min() < 0:
                raise InvalidArgumentError(
                    f"negative queue id ({int(qids.min())}) or queue offset ({int(qos.min())}) "
                    "in a dispatch batch"
                )
            key = (self._topic_codes(batch.topic)[sel] << 32) | qids
            local = np.argsort(key, kind="stable")
            order = sel[local]
            skey = key[local]
            units = np.empty(len(order), dtype=cq.UNIT_DTYPE)
            units["offset"] = batch.phy_offset[order]
            units["size"] = batch.size[order]
            units["tags_code"] = batch.tags_code[order]
            qo = batch.queue_offset[order]
            # runs of consecutive queue offsets within one queue: one write each
            same = skey[1:] == skey[:-1]
            cuts = (np.flatnonzero(~same | (qo[1:] - qo[:-1] != 1)) + 1).tolist()
            starts, ends = [0, *cuts], [*cuts, len(order)]
            firsts, run_keys = qo[starts].tolist(), skey[starts].tolist()
            topics = self._topics
            for s, e, first, k in zip(starts, ends, firsts, run_keys, strict=True):
                qkey = (topics[k >> 32], k & 0xFFFFFFFF)
                new += self._queue(*qkey).write(first, units[s:e])
                self._dirty.add(qkey)
        self.entries += new
        self.built_offset = max(self.built_offset, batch.next_offset)
        return new

    def flush(self) -> int:
        """Sync every touched segment, then record and return the durable offset."""
        return self.finish_flush(self.begin_flush())

    def begin_flush(self) -> progress.FlushTicket:
        """Capture what to sync (under the caller's lock; cheap)."""
        paths: list[Path] = []
        for key in self._dirty:
            paths += self.queues[key].take_dirty_paths()
        self._dirty.clear()
        return progress.FlushTicket(
            progress.Progress(self.built_offset), paths, self._take_dirs(), self._generation
        )

    def _take_dirs(self) -> list[Path]:
        parents: set[Path] = set()
        dirs: list[Path] = []
        for q in self.queues.values():
            if q.new_dir:
                parents.update((q.dir.parent, q.dir.parent.parent, self.layout.root))
                q.new_dir = False
                q.dir_dirty = True
            if q.dir_dirty:
                dirs.append(q.dir)
                q.dir_dirty = False
        return dirs + sorted(parents, key=lambda p: -len(p.parts))

    def _cut(self, phy_end: int) -> None:
        for key, q in self.queues.items():
            if q.last_offset >= phy_end:
                q.truncate(phy_end)
                self._dirty.add(key)

    def truncate(self, phy_end: int) -> None:
        """Cut units at or past ``phy_end`` (the commitlog was cut there) and record it."""
        if phy_end < 0:
            raise InvalidArgumentError(f"cannot truncate to a negative offset {phy_end}")
        self._generation += 1
        if phy_end < self.durable_offset:  # record the cut first: a crash now cuts again
            self.durable_offset = phy_end
            progress.write(self.progress_path, progress.Progress(phy_end))
        self.built_offset = min(self.built_offset, phy_end)
        self._cut(phy_end)
        self.flush()

    def delete_below(self, phy_min: int) -> int:
        """Retention: delete the segments that only point below the commitlog's minimum."""
        deleted = 0
        for key, q in self.queues.items():
            n = q.delete_below(phy_min)
            if n:
                self._dirty.add(key)
                deleted += n
        return deleted

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        q = self.queues.get((topic, queue_id))
        return q.end if q else 0

    def close(self) -> None:
        """Flush, record progress and unmap everything."""
        self.flush()
        for q in self.queues.values():
            q.close()
