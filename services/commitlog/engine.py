"""The commitlog writer engine: append, flush, read, dispatch (its own part, see
``dispatching``) — no gRPC in here.

One append lock assigns physical offsets, queue offsets and the store timestamp; records are
encoded and validated before it is taken, so a bad message never leaves a byte behind, and a
batch either fits (segments pre-created first) or nothing of it is written.
"""

import bisect
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import count

from rmqstore import identity, quarantine, store_hosts
from rmqstore.durable import replace_file
from rmqstore.errors import (
    NotMasterError,
    OffsetOutOfRangeError,
    StoreError,
    UnavailableError,
)
from rmqstore.formats import checkpoint
from rmqstore.formats.commitlog_batch import PlainFew, PlainRun
from rmqstore.layout import StoreLayout
from rmqstore.v1 import commitlog_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.dispatch_cache import DispatchCache
from services.commitlog.dispatch_files import RecentBatches
from services.commitlog.dispatching import LINGER_BELOW, Dispatching
from services.commitlog.epochs import Epochs
from services.commitlog.flusher import Flusher
from services.commitlog.messages import MessageBuilder
from services.commitlog.record_reads import read_records, record_at
from services.commitlog.recovery import Recovered, recover, save_snapshot
from services.commitlog.segment_files import Segment, SegmentQueue
from services.commitlog.store_lock import StoreLock
from services.commitlog.stored import Stored
from services.commitlog.terms import Terms
from services.commitlog.wire_batch import WireBatch

log = logging.getLogger(__name__)
INDEX_SUBSCRIBER = "index"  # builders' subscriber names: their acks feed the checkpoint
CONSUME_QUEUE_SUBSCRIBER = "consume-queue"


DURABLE_TIMEOUT_S = 5.0  # a sync-flush put not durable by then fails (FLUSH_DISK_TIMEOUT)


def flush_timeout(end: int) -> StoreError:
    return StoreError(
        f"flush did not reach offset {end} within {DURABLE_TIMEOUT_S:g} s (FLUSH_DISK_TIMEOUT)"
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLogEngine(Dispatching):
    read_only = False  # see ``ReadOnlyStore`` for a store served read-only

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.layout = StoreLayout.of(config.store)
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self._store_lock = StoreLock(self.layout.lock)
        try:
            self._open()
        except BaseException:
            self._store_lock.release()
            raise

    # -- start-up ------------------------------------------------------------------------
    def _open(self) -> None:
        cfg = self.config
        self.store_id = identity.create_or_read(self.layout)
        self.last_exit_clean = not self.layout.abort.exists()
        self.segments = SegmentQueue(
            self.layout.commitlog_dir, cfg.segment_size, cfg.warmup, cfg.preallocate
        )
        t0 = time.perf_counter()
        self.recovered: Recovered = recover(self.segments, self._snapshot_path,
                                            keep=self._keep_cut)
        self.recovery_seconds = time.perf_counter() - t0
        r = self.recovered
        log.info(
            "recovered commitlog to offset %d in %.3fs, %d bytes read (%s exit, %d queues%s)",
            r.end,
            self.recovery_seconds,
            r.scanned_bytes,
            "clean" if self.last_exit_clean else "unclean",
            len(r.queue_table),
            f"; cut: {r.corruption}" if r.corruption else "",
        )
        self.queue_table = r.queue_table
        self.max_offset = r.end
        self._head: Segment | None = next(
            (s for s in self.segments.segments if s.start <= r.end < s.end), None
        )
        self._lock = threading.Lock()
        appended = threading.RLock()
        self._appended = threading.Condition(appended)  # notified on every append: idle subscribers
        # lingering subscribers wait on this, notified only once one of them has LINGER_BELOW
        # bytes waiting (each wake-up is a system call made while holding Python's lock)
        self._grown = threading.Condition(appended)
        self._lingering: list[int] = []  # their positions
        self._closed = False
        self._failed = ""  # why appends stopped: a write into the commitlog failed
        self.builder = MessageBuilder(cfg)
        self.cache = DispatchCache()
        self.file_batches = RecentBatches()
        self._marks: deque[tuple[int, int]] = deque(maxlen=200_000)  # (end offset, store ts)
        if r.last_store_timestamp:
            self._marks.append((r.end, r.last_store_timestamp))
        self.acks: dict[str, int] = {}
        self._subscriptions: dict[str, int] = {}
        self._checkpoint = self._read_checkpoint()
        self.bytes_written = 0
        self.messages_written = 0
        self.flusher = Flusher(
            self._flush_all,
            self._housekeeping,
            cfg.flush == "sync",
            cfg.flush_interval_ms / 1000 if cfg.flush == "async" else 0.01,
            cfg.snapshot_interval_ms / 1000,
        )
        self.epochs = Epochs(self.layout.progress("commitlog-epochs"))
        self.terms = Terms(self.layout.progress("commitlog-terms"))
        if not cfg.is_slave:
            self.terms.master_now()
        if not self.last_exit_clean or r.corruption or not self.epochs.history:
            self.epochs.begin(r.end)
        if not cfg.is_slave:
            store_hosts.remember(self.layout, cfg.store_host, r.end)
        self.layout.abort.write_bytes(b"")
        self.flusher.start(r.end)

    def _keep_cut(self, offset: int, data: memoryview, segment: str, reason: str) -> None:
        quarantine.keep(self.layout, offset, data, segment, reason)

    @property
    def _snapshot_path(self):
        return self.layout.progress("commitlog-queues")

    def _read_checkpoint(self) -> checkpoint.Checkpoint:
        try:
            return checkpoint.decode(self.layout.checkpoint.read_bytes())
        except OSError:
            return checkpoint.Checkpoint()

    @property
    def min_offset(self) -> int:
        return self.segments.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.flusher.flushed

    # -- appending -----------------------------------------------------------------------
    def put(
        self, messages: Sequence | commitlog_pb2.MessageColumns, now_ms: int | None = None
    ) -> Stored:
        """Validate, then append all messages (Messages, or one MessageColumns) or none;
        durable first under sync flush."""
        stored, end = self.append(messages, now_ms)
        self.wait_durable(end)
        return stored

    def append(
        self, messages: Sequence | commitlog_pb2.MessageColumns, now_ms: int | None = None
    ) -> tuple[Stored, int]:
        """``put`` without waiting for the flush: the stored batch and the commitlog offset
        its last byte ends at (pass it to ``wait_durable`` before acknowledging)."""
        self._refuse_on_slave()
        now = now_ms or _now_ms()
        if isinstance(messages, commitlog_pb2.MessageColumns):
            columns = self.builder.build_columns(messages, now)
        else:
            columns = self.builder.build_batch(messages, now)
        return self.append_columns(columns, now_ms)

    def append_columns(self, columns: tuple, now_ms: int | None = None) -> tuple[Stored, int]:
        """Append records already built (``messages.Columns``: the delivery service's
        re-puts come this way), all or none."""
        self._refuse_on_slave()
        now = now_ms or _now_ms()
        if not columns:
            return Stored(self.builder.store_host, [], [], [], now, [], [], []), 0
        with self._lock:
            if self._closed:
                raise UnavailableError("the commitlog writer is shutting down")
            if self._failed:
                raise UnavailableError(self._failed)
            self.segments.ensure_room(self._head, self.max_offset, columns[1])
            stored, end = self._append(columns, now_ms or _now_ms())  # store time
        with self._appended:
            self._appended.notify_all()
            if self._lingering and self.max_offset - min(self._lingering) >= LINGER_BELOW:
                self._grown.notify_all()
        return stored, end

    def _refuse_on_slave(self) -> None:
        if self.config.is_slave:
            raise NotMasterError(
                f"this writer is a slave of {self.config.ha_master}; send puts to the master"
            )

    def become_master(self, role: str, ha_port: int) -> tuple[int, int, int]:
        """A slave that stopped following takes puts from now on (``promotion``): a new
        master term and a new writer epoch begin at its end. (term, start offset, epoch)."""
        with self._lock:
            start = self.max_offset
            self.config = dataclasses.replace(self.config, role=role, ha_master="",
                                              ha_port=ha_port)  # fmt: skip
        store_hosts.remember(self.layout, self.config.store_host, start)
        return self.terms.begin(start), start, self.epochs.begin(start)

    # -- a slave's appends (see ``replica_log``) -----------------------------------------
    def write_replicated(self, offset: int, data: bytes | memoryview) -> None:
        """Copy a master's bytes in at ``offset``: the end of what this store holds, a file
        start after it (the master's next file), or anywhere when the store is empty (its
        first file is created around ``offset``). Readers do not see them until
        ``publish_replicated`` moves ``max_offset``."""
        size = self.config.segment_size
        with self._lock:
            if self._closed:
                raise UnavailableError("the commitlog writer is shutting down")
            if self._failed:
                raise UnavailableError(self._failed)
            seg = self._head
            empty = self.max_offset == 0 and not any(s.wrote for s in self.segments.segments)
            if empty and seg is not None and not seg.start <= offset < seg.end:
                self.segments.remove_beyond(-1)  # empty files elsewhere (a fresh store's)
                seg = self._head = None
            if seg is None or offset >= seg.end:
                last = self.segments.last()
                if not empty and (last is None or offset != last.end):
                    raise OffsetOutOfRangeError(
                        f"replicated bytes at {offset} do not follow the last file "
                        f"(it ends at {last.end if last else 0})"
                    )
                seg = self._head = self.segments.roll(offset - offset % size)
            if empty:
                seg.wrote = offset - seg.start
            at = offset - seg.start
            if at != seg.wrote or at + len(data) > seg.size:
                raise OffsetOutOfRangeError(
                    f"replicated bytes [{offset}, {offset + len(data)}) do not continue the "
                    f"commitlog at {seg.start + seg.wrote} inside one file"
                )
            try:
                seg.write(at, data)
            except OSError as e:
                self._failed = (
                    f"writing replicated bytes at offset {offset} failed ({e}); restart this "
                    "writer (recovery checks the tail)"
                )
                log.error("%s", self._failed)
                raise StoreError(self._failed) from e
            seg.wrote = at + len(data)
            self.bytes_written += len(data)

    def publish_replicated(
        self, end: int, timestamps: Sequence[tuple[int, int]] = (),
        queues: dict[tuple[str, int], int] | None = None,
    ) -> None:  # fmt: skip
        """Whole records up to ``end`` arrived: readers and dispatch may take them;
        ``timestamps`` are (end offset, store time) of records among them (checkpoint),
        ``queues`` the next queue offsets they carry."""
        with self._lock:
            self._marks.extend(timestamps)
            table = self.queue_table
            for key, following in (queues or {}).items():
                if table.get(key, 0) < following:
                    table[key] = following
            self.max_offset = end
        with self._appended:
            self._appended.notify_all()
            self._grown.notify_all()

    def wait_durable(self, end: int) -> None:
        """Under sync flush, block until the commitlog is durable up to ``end``."""
        if self.config.flush == "sync" and not self.flusher.wait_durable(end, DURABLE_TIMEOUT_S):
            raise flush_timeout(end)

    def on_durable(self, end: int, done: Callable[[bool], None]) -> None:
        """``wait_durable`` without waiting: ``done(True)`` once the commitlog is durable up to
        ``end`` (sync flush), ``done(False)`` if the writer stops first; called from the flush
        thread, or at once under async flush."""
        if self.config.flush == "sync":
            self.flusher.on_durable(end, done)
        else:
            done(True)

    def _append(self, columns: tuple, ts: int) -> tuple[Stored, int]:
        """Write prepared messages, given as columns (see messages.Prepared)."""
        batch_start = self.max_offset
        seg = self._head
        if seg is None:  # a fresh store, or the last segment ended with a blank record
            seg = self._head = self.segments.roll(batch_start)
        records, sizes, topics, queue_ids, sys_flags, codes, keys, uniqs, delays, ptxs, advances = (
            columns
        )
        qos = self._queue_offsets(records, topics, queue_ids, advances)

        def encode(i: int, j: int, at: list[int]) -> bytes:
            if i == 0 and j == len(sizes):  # the whole batch, as nearly always: no slices
                return self.builder.encoder.encode(records, qos, at, ts)
            return self.builder.encoder.encode(records[i:j], qos[i:j], at, ts)

        try:
            seg, phys = self.segments.write_batch(seg, sizes, encode)
        except OSError as e:
            for key, advance in zip(zip(topics, queue_ids, strict=True), advances, strict=True):
                if advance:  # the queue offsets of a batch that was never stored
                    self.queue_table[key] -= 1
            self._failed = (
                f"writing the commitlog at offset {batch_start} failed ({e}); this writer "
                "takes no more puts: restart it (recovery checks the tail)"
            )
            log.error("%s", self._failed)
            raise StoreError(f"put not stored: {self._failed}") from e
        self._head = seg
        end = seg.start + seg.wrote
        self.bytes_written += end - batch_start
        self.messages_written += len(sizes)
        self._marks.append((end, ts))
        if any(delays):  # the schedule topic's tags code is the delivery time
            codes = tuple(ts + d if d else c for c, d in zip(codes, delays, strict=True))
        self.cache.add(
            batch_start,
            end,
            WireBatch.of(
                commitlog_pb2.DispatchBatch(
                    topic=topics,
                    queue_id=queue_ids,
                    queue_offset=qos,
                    phy_offset=phys,
                    size=sizes,
                    tags_code=codes,
                    store_timestamp=[ts] * len(sizes),
                    keys=keys,
                    unique_key=uniqs,
                    sys_flag=sys_flags,
                    prepared_transaction_offset=ptxs,
                    next_offset=end,
                    max_offset=end,
                ),
            ),
        )
        self.max_offset = end  # after the cache: a subscriber that sees it finds the chunk too
        stored = Stored(self.builder.store_host, phys, qos, sizes, ts, topics, queue_ids, uniqs)
        return stored, end

    def _queue_offsets(
        self, records: Sequence, topics: Sequence[str], queue_ids: Sequence[int],
        advances: Sequence[bool],
    ) -> list[int]:  # fmt: skip
        """Each record's queue offset, advancing the queue table (0 for a record that does not
        take one)."""
        table = self.queue_table
        if isinstance(records, PlainRun | PlainFew):  # one topic, each takes the next offset
            topic = topics[0]
            counters = {q: count(table.get((topic, q), 0)).__next__ for q in set(queue_ids)}
            qos = [counters[q]() for q in queue_ids]
            for q, following in counters.items():
                table[(topic, q)] = following()
            return qos
        qos = []
        for key, advance in zip(zip(topics, queue_ids, strict=True), advances, strict=True):
            if advance:
                qo = table.get(key, 0)
                table[key] = qo + 1
                qos.append(qo)
            else:
                qos.append(0)
        return qos

    # -- flushing ------------------------------------------------------------------------
    def _flush_all(self) -> int:
        target = self.max_offset
        for seg in list(self.segments.segments):
            if seg.flushed < seg.wrote:
                seg.flush()
        return target

    def _timestamp_at(self, offset: int) -> int:
        """Store time of the last record ending at or before ``offset`` (0 if unknown)."""
        marks = self._marks
        i = bisect.bisect_right(marks, (offset, 1 << 62)) - 1 if marks else -1
        return marks[i][1] if i >= 0 else 0

    def _housekeeping(self) -> None:
        """Runs on the flush thread, so it flushes itself (waiting for that thread would
        stall every sync put for the flush timeout); the snapshot never runs ahead of what
        is durable."""
        with self._lock:
            offset, table = self.max_offset, dict(self.queue_table)
        self._flush_all()
        save_snapshot(self._snapshot_path, offset, table)
        self._write_checkpoint()

    def _write_checkpoint(self) -> None:
        physic = self._timestamp_at(self.flusher.flushed) or self._checkpoint.physic_msg_timestamp
        logics, index = self._checkpoint.logics_msg_timestamp, self._checkpoint.index_msg_timestamp
        for name, off in self.acks.items():
            t = self._timestamp_at(off)
            if not t:
                continue
            if name == INDEX_SUBSCRIBER:
                index = t
            elif name == CONSUME_QUEUE_SUBSCRIBER:
                logics = t
        self._checkpoint = checkpoint.Checkpoint(physic, logics, index)
        replace_file(self.layout.checkpoint, checkpoint.encode(self._checkpoint))

    # -- reading -------------------------------------------------------------------------
    def _record_at(self, offset: int) -> tuple[Segment, int, int]:
        """(segment, position, size) of the record starting at ``offset``, checked."""
        return record_at(self.segments.find, self.min_offset, self.max_offset, offset)

    def read(self, offsets: Sequence[int], max_bytes: int = 1 << 62) -> list[bytes]:
        """Records starting at ``offsets``; RESOURCE_EXHAUSTED past ``max_bytes`` in all."""
        return read_records(self.segments.find, self.min_offset, self.max_offset, offsets,
                            max_bytes)

    def read_sized(self, offset: int, size: int) -> bytes:
        """The ``size`` bytes at ``offset`` (a record whose size a consume-queue unit gives;
        the caller decodes and checks it); OffsetOutOfRangeError if not in the commitlog."""
        if not self.min_offset <= offset <= self.max_offset - size or size <= 0:
            raise OffsetOutOfRangeError(
                f"{size} bytes at {offset} are outside the commitlog "
                f"[{self.min_offset}, {self.max_offset})"
            )
        try:
            seg = self.segments.find(offset)
            return bytes(seg.map[offset - seg.start : offset - seg.start + size])
        except ValueError:  # its segment was deleted (and unmapped) meanwhile
            raise OffsetOutOfRangeError(
                f"offset {offset} is below the store's minimum offset {self.min_offset}"
            ) from None

    def delete_oldest_segment(self) -> Segment | None:
        """Retention: delete the oldest segment, unless it is the one being written."""
        with self._lock:
            segs = self.segments.segments
            if len(segs) < 2 or segs[0] is self._head or segs[0].end > self.max_offset:
                return None
            return self.segments.retire_first()

    # -- shutdown ------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with self._appended:
            self._appended.notify_all()
            self._grown.notify_all()
        self.flusher.stop()
        self._flush_all()
        try:
            save_snapshot(self._snapshot_path, self.max_offset, dict(self.queue_table))
            self._write_checkpoint()
        except OSError as e:  # e.g. a full disk: the next start walks record headers instead
            log.warning("could not write the queue snapshot or checkpoint at shutdown: %s", e)
        self.segments.close()
        if not self._failed:  # else the next start checks the tail as after a crash
            self.layout.abort.unlink(missing_ok=True)
        self._store_lock.release()
        if self._failed:
            log.warning("commitlog closed at offset %d after a failed write", self.max_offset)
        else:
            log.info("commitlog closed cleanly at offset %d", self.max_offset)
