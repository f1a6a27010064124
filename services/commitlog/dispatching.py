"""The writer's side of dispatch: subscribers (the builders) stream the records appended
from an offset on, as batches of columns (``WireBatch``), and acknowledge what they have made
durable.

``Dispatching`` is a part of ``CommitLogEngine``, kept apart because it changes for other
reasons than appending: it reads the engine's state (declared below) and never appends. A
batch near the head comes from the dispatch cache, an older one is decoded from the segment
files; a subscriber with little waiting lingers a moment so the puts right behind join it.
"""

import re
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

from rmqstore.errors import InvalidArgumentError, OffsetOutOfRangeError, ResourceExhaustedError
from services.commitlog.config import WriterConfig
from services.commitlog.dispatch_cache import DispatchCache
from services.commitlog.dispatch_files import RecentBatches, decode_dispatch
from services.commitlog.segment_files import Segment, SegmentQueue
from services.commitlog.wire_batch import WireBatch

DEFAULT_BATCH_RECORDS = 4096
SUBSCRIBER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_SUBSCRIBERS = 64
MAX_BATCH_RECORDS = 100_000
LINGER_BELOW = 4 * 1024 * 1024  # dispatch: bytes waiting below which a subscriber lingers


class Dispatching:
    """Subscribe, stream and acknowledge, on the engine's state."""

    config: WriterConfig
    segments: SegmentQueue
    max_offset: int  # the end of what was appended
    cache: DispatchCache
    file_batches: RecentBatches
    acks: dict[str, int]  # subscriber -> the offset it made durable
    _subscriptions: dict[str, int]  # subscriber -> its streams open now
    _appended: threading.Condition  # notified on every append
    _grown: threading.Condition  # notified once a lingering subscriber's batch has grown
    _lingering: list[int]  # the positions of lingering subscribers
    _closed: bool

    @property
    def min_offset(self) -> int:
        raise NotImplementedError

    def _record_at(self, offset: int) -> tuple[Segment, int, int]:
        raise NotImplementedError

    def check_subscribe_offset(self, offset: int) -> None:
        if offset == self.max_offset:
            return
        if offset > self.max_offset or offset < self.min_offset:
            raise OffsetOutOfRangeError(
                f"subscribe offset {offset} is outside [{self.min_offset}, {self.max_offset}]"
            )
        if offset % self.config.segment_size == 0:
            return
        self._record_at(offset)

    @staticmethod
    def check_subscriber(name: str) -> None:
        """Subscriber names become ack-table keys and metric labels: keep them tame."""
        if not SUBSCRIBER_NAME.fullmatch(name):
            raise InvalidArgumentError(
                f"subscriber name {name[:80]!r} must be 1-64 characters of [A-Za-z0-9_.-]"
            )

    def _register(self, name: str) -> None:
        self.check_subscriber(name)
        if name not in self.acks and len(self.acks) >= MAX_SUBSCRIBERS:
            raise ResourceExhaustedError(
                f"{len(self.acks)} subscribers are known already (at most {MAX_SUBSCRIBERS})"
            )

    def subscribe(
        self, name: str, offset: int, max_records: int, active: Callable[[], bool],
        linger: bool = True,
    ) -> Iterator[WireBatch]:  # fmt: skip
        """Dispatch batches (serialized) from ``offset`` on while ``active()``; ``linger``
        False: each batch at once, never held for the puts right behind it."""
        self._register(name)
        if not 0 <= max_records <= MAX_BATCH_RECORDS:
            raise InvalidArgumentError(
                f"max batch records {max_records} is outside 0..{MAX_BATCH_RECORDS} (0 = default)"
            )
        try:
            self.check_subscribe_offset(offset)
        except InvalidArgumentError as e:
            raise OffsetOutOfRangeError(str(e)) from None
        max_records = max_records or DEFAULT_BATCH_RECORDS
        self.acks.setdefault(name, offset)
        self._subscriptions[name] = self._subscriptions.get(name, 0) + 1
        try:
            yield from self._stream(offset, max_records, active, linger)
        finally:
            self._subscriptions[name] -= 1

    def active_subscriptions(self) -> dict[str, int]:
        return dict(self._subscriptions)

    def _stream(
        self, offset: int, max_records: int, active: Callable[[], bool], lingers: bool
    ) -> Iterator[WireBatch]:
        pos = offset
        # subscribed to an empty store: a slave's first file may start anywhere (its master's
        # last file), so the first records are wherever the store begins
        from_empty = pos == 0 == self.max_offset
        linger = self.config.dispatch_linger_ms / 1000 if lingers else 0
        while active() and not self._closed:
            with self._appended:
                while self.max_offset <= pos and active() and not self._closed:
                    self._appended.wait(0.25)
                if from_empty:
                    pos = max(pos, self.min_offset)
                    from_empty = False
                if linger and self._small_batch(pos, max_records):
                    # only a little is waiting: let the puts right behind it join (a builder
                    # pays a fixed cost per batch, and each put is a chunk of its own)
                    self._linger(pos, max_records, time.monotonic() + linger, active)
            if not active() or self._closed:
                return
            batch = self.cache.take(pos, max_records)
            if batch is None:  # decode files, up to where the cache can take over again
                batch = self.file_batches.get_or_decode(
                    pos, max_records, partial(self._decode_files, pos, max_records)
                )
            pos = batch.next_offset
            yield batch

    def _linger(
        self, pos: int, max_records: int, until: float, active: Callable[[], bool]
    ) -> None:
        """Wait (holding ``_appended``) until ``until``, or until the batch from ``pos`` is no
        longer small in bytes, or the engine closes."""
        self._lingering.append(pos)
        try:
            while self._small_batch(pos, max_records) and not self._closed:
                left = until - time.monotonic()
                if left <= 0 or not active():
                    break
                self._grown.wait(left)
        finally:
            self._lingering.remove(pos)

    def _small_batch(self, pos: int, max_records: int) -> bool:
        """Whether the batch from ``pos`` would be short of ``max_records`` and of
        ``LINGER_BELOW`` bytes, with every record of it in memory."""
        if self.max_offset - pos >= LINGER_BELOW:
            return False
        waiting = self.cache.records_from(pos, max_records)
        return waiting is not None and waiting < max_records

    def _decode_files(self, pos: int, max_records: int) -> WireBatch:
        head, stop = self.max_offset, self.cache.next_start(pos)
        end = head if stop is None else min(stop, head)
        return WireBatch.of(decode_dispatch(self.segments, pos, end, max_records, head))

    def ack(self, name: str, durable_offset: int) -> None:
        self._register(name)
        if not 0 <= durable_offset <= self.max_offset:
            raise OffsetOutOfRangeError(
                f"acknowledged offset {durable_offset} is outside [0, {self.max_offset}]"
            )
        self.acks[name] = durable_offset

    def lag(self) -> dict[str, int]:
        return {n: max(self.max_offset - off, 0) for n, off in self.acks.items()}
