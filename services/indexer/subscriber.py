"""The builders' link to the writer: subscribe, apply batches, flush, acknowledge.

One thread reads the dispatch stream from the builder's resume offset and applies each
batch; another flushes every ``flush_interval`` seconds (files first, then the progress
record) and then acknowledges the durable offset to the writer. When the writer is down the
subscription is retried with back-off. When the writer's end lies below what was built (its
recovery cut the commitlog), the builder's output is cut to it before resuming.
"""

import logging
import threading
import time
from pathlib import Path
from typing import Protocol

import grpc

from rmqstore.durable import replace_file
from rmqstore.errors import StoreError
from rmqstore.layout import StoreLayout
from rmqstore.server import channel as make_channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from rmqstore.writer_link import check_identity
from services.indexer.batch import Columns
from services.indexer.progress import FlushTicket

log = logging.getLogger(__name__)

MIN_BACKOFF = 0.05
MAX_BACKOFF = 2.0
RPC_TIMEOUT = 5.0
RETENTION_LOOK_S = 1.0  # how often a builder asks for the writer's minimum offset


class Builder(Protocol):
    name: str
    layout: StoreLayout
    built_offset: int
    durable_offset: int
    entries: int
    flushes: int
    last_flush_seconds: float

    @property
    def files(self) -> int: ...

    def apply(self, batch: Columns) -> int: ...
    def flush(self) -> int: ...
    def begin_flush(self) -> FlushTicket: ...
    def finish_flush(self, ticket: FlushTicket) -> int: ...
    def truncate(self, phy_end: int) -> None: ...
    def delete_below(self, phy_min: int) -> int: ...
    def close(self) -> None: ...


class Subscriber:
    def __init__(
        self,
        builder: Builder,
        address: str,
        flush_interval: float = 0.5,
        max_batch_records: int = 0,
        channel: grpc.Channel | None = None,
    ) -> None:
        self.builder = builder
        self.address = address
        self.flush_interval = flush_interval
        self.max_batch_records = max_batch_records
        self.lock = threading.Lock()  # guards the builder's files and counters
        # serializes recording progress (flush's slow part runs outside ``lock``) with cuts
        self.progress_lock = threading.Lock()
        self.connected = False
        self.writer_max_offset = 0
        self.writer_min_offset = 0
        self.deleted_files = 0  # deleted below the writer's minimum (retention)
        self.acked_offset = -1
        self.batches = 0
        self.reconnects = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._stream: grpc.Future | None = None
        self._channel = channel or make_channel(address)
        self._stub = commitlog_pb2_grpc.CommitLogStub(self._channel)
        self._threads = [
            threading.Thread(target=self._read_loop, name=f"{builder.name}-subscribe", daemon=True),
            threading.Thread(target=self._flush_loop, name=f"{builder.name}-flush", daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    # -- reading -------------------------------------------------------------------------
    def _read_loop(self) -> None:
        backoff = MIN_BACKOFF
        while not self._stop.is_set():
            try:
                self._session()
                backoff = MIN_BACKOFF
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if not self._stop.is_set():
                    error = f"{code}: {e.details() if isinstance(e, grpc.Call) else e}"
                    # WARNING when the reason changes (a TLS handshake failure, the writer
                    # down…), not at every retry
                    level = logging.WARNING if error != self.last_error else logging.DEBUG
                    self.last_error = error
                    log.log(level, "%s: writer at %s not usable (%s); retrying",
                            self.builder.name, self.address, error)
            except (StoreError, ValueError) as e:
                level = logging.ERROR if str(e) != self.last_error else logging.DEBUG
                self.last_error = str(e)
                log.log(level, "%s: %s; retrying", self.builder.name, e)
            self.connected = False
            self.reconnects += 1
            self._stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _session(self) -> None:
        seen = self._seen_epoch()
        offsets = self._stub.GetOffsets(
            commitlog_pb2.GetOffsetsRequest(since_epoch=seen or 0), timeout=RPC_TIMEOUT
        )
        store_id = check_identity(self.builder.layout, offsets, self.address)
        self.writer_max_offset = offsets.max_offset
        with self.lock, self.progress_lock:
            b = self.builder
            if (
                seen is not None
                and offsets.epoch != seen
                and 0 <= offsets.cut_offset < b.built_offset
            ):
                # the writer restarted uncleanly since we last saw it: bytes past the cut may
                # not be the ones we built from (a lost tail, then new records over it)
                log.warning(
                    "%s: writer epoch %d -> %d, cutting our output at %d (was %d)",
                    b.name,
                    seen,
                    offsets.epoch,
                    offsets.cut_offset,
                    b.built_offset,
                )
                b.truncate(offsets.cut_offset)
            if offsets.max_offset < b.built_offset:
                log.warning(
                    "%s: writer ends at %d, below our %d: cutting our output",
                    b.name,
                    offsets.max_offset,
                    b.built_offset,
                )
                b.truncate(offsets.max_offset)
            start = b.built_offset
            if start < offsets.min_offset:
                log.warning(
                    "%s: resuming at the writer's minimum %d (we were at %d)",
                    b.name,
                    offsets.min_offset,
                    start,
                )
                start = offsets.min_offset
            if offsets.epoch != seen:
                self._save_epoch(offsets.epoch)
        stream = self._stub.Subscribe(
            commitlog_pb2.SubscribeRequest(
                subscriber=self.builder.name,
                from_offset=start,
                max_batch_records=self.max_batch_records,
                store_id=store_id,
            )
        )
        self._stream = stream
        if self._stop.is_set():
            stream.cancel()
            return
        self.connected = True
        self.last_error = ""
        for msg in stream:
            cols = Columns.from_proto(msg)
            with self.lock:
                self.builder.apply(cols)
            self.writer_max_offset = msg.max_offset
            self.batches += 1
            if self._stop.is_set():
                break

    def _epoch_path(self) -> Path:
        return self.builder.layout.progress(f"{self.builder.name}-epoch")

    def _seen_epoch(self) -> int | None:
        """The writer epoch our output was built in (None: never recorded; adopt the current)."""
        try:
            return int(self._epoch_path().read_text())
        except (OSError, ValueError):
            return None

    def _save_epoch(self, epoch: int) -> None:
        """Record the epoch after any cut it required is durable (truncate records it)."""
        replace_file(self._epoch_path(), str(epoch).encode())

    # -- flushing ------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        last_look = 0.0
        while not self._stop.wait(self.flush_interval):
            self.flush_and_ack()
            if time.monotonic() - last_look >= RETENTION_LOOK_S:
                last_look = time.monotonic()
                self.follow_retention()

    def follow_retention(self) -> int:
        """Delete our files wholly below the writer's minimum offset (it deletes commitlog
        segments); returns how many files went."""
        if not self.connected:
            return 0
        try:
            offsets = self._stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=RPC_TIMEOUT)
            check_identity(self.builder.layout, offsets, self.address)
        except (grpc.RpcError, StoreError, ValueError):  # never delete for another store's writer
            return 0
        low = offsets.min_offset
        if low <= self.writer_min_offset:
            return 0
        self.writer_min_offset = low
        with self.lock:
            deleted = self.builder.delete_below(low)
        if deleted:
            self.deleted_files += deleted
            log.info("%s: deleted %d files below offset %d", self.builder.name, deleted, low)
        return deleted

    def flush_and_ack(self) -> int:
        with self.lock:
            ticket = self.builder.begin_flush()
        with self.progress_lock:  # files sync while batches keep being applied
            durable = self.builder.finish_flush(ticket)
        if durable != self.acked_offset and self.connected:
            try:
                self._stub.Ack(
                    commitlog_pb2.AckRequest(subscriber=self.builder.name, durable_offset=durable),
                    timeout=RPC_TIMEOUT,
                )
                self.acked_offset = durable
            except grpc.RpcError as e:
                log.debug("%s: ack %d failed: %s", self.builder.name, durable, e)
        return durable

    def stop(self) -> None:
        """Stop reading, flush, record progress, acknowledge, unmap."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        deadline = time.monotonic() + 10
        for t in self._threads:
            if t.is_alive():
                t.join(max(deadline - time.monotonic(), 0.1))
        self.flush_and_ack()
        with self.lock:
            self.builder.close()
        self._channel.close()
