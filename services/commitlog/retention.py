"""Retention: expired commitlog segments deleted, oldest first, as RocketMQ's store does.

Every ``retention_interval_s`` a pass may run: at the hour ``--delete-when`` (or always), or
at any hour when the disk holding the store is more than ``--disk-max-used-ratio`` full.
A pass deletes whole segments from the oldest on while each is expired (its last write is
``--retention-hours`` old); above the forced ratio (85 %) it deletes the oldest even if they
are not expired, until the disk is below it again. A pass deletes at most ``BATCH`` segments
and stops at the first it must keep. It never deletes:

* the segment being written (nor any after it);
* a segment whose records a builder has not made durable yet (both builders must have
  acknowledged past its end; before they have, nothing is deleted).

A deleted segment's file is unlinked at once; its mapping is closed one pass later, so a read
that found it a moment before still completes, and any later read gets "below the store's
minimum offset". The builders then delete their own files below the new minimum offset.
"""

import contextlib
import datetime as dt
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.commitlog.engine import CONSUME_QUEUE_SUBSCRIBER, INDEX_SUBSCRIBER, CommitLogEngine

log = logging.getLogger(__name__)
BATCH = 10  # segments per pass at most (RocketMQ's deleteFilesBatchMax)
BUILDERS = (CONSUME_QUEUE_SUBSCRIBER, INDEX_SUBSCRIBER)


@dataclass
class RetentionStats:
    passes: int = 0
    deleted_segments: int = 0
    deleted_bytes: int = 0
    disk_used_ratio: float = 0.0  # 0..1, at the last look
    last_pass_ms: int = 0
    waiting_for: str = ""  # why the oldest segment was kept, at the last pass


def disk_used_ratio(path) -> float:
    """As ``df`` shows it: used / (used + available to us), so 1.0 is when writes fail."""
    usage = shutil.disk_usage(path)
    room = usage.used + usage.free
    return usage.used / room if room else 0.0


class Retention:
    def __init__(
        self,
        engine: CommitLogEngine,
        clock: Callable[[], float] = time.time,
        disk_ratio: Callable[[], float] | None = None,
    ) -> None:
        self.engine = engine
        self.config = engine.config
        self.clock = clock
        self.disk_ratio = disk_ratio or (lambda: disk_used_ratio(engine.layout.commitlog_dir))
        self.stats = RetentionStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)

    def _pass_due(self, now: float, ratio: float) -> tuple[bool, bool]:
        """(run a pass, forced) for the time and disk use now."""
        cfg = self.config
        forced = ratio * 100 > cfg.disk_forced_ratio
        hour_ok = cfg.delete_when == "always" or (
            dt.datetime.fromtimestamp(now).hour == int(cfg.delete_when)
        )
        return forced or hour_ok or ratio * 100 > cfg.disk_max_used_ratio, forced

    def dispatched_offset(self) -> int | None:
        """Offset below which both builders have made everything durable (None: a builder
        has not acknowledged anything since the writer started)."""
        acks = self.engine.acks
        if any(name not in acks for name in BUILDERS):
            return None
        return min(acks[name] for name in BUILDERS)

    def run_once(self) -> list[str]:
        """One pass; returns the names of the segments deleted."""
        self.engine.segments.close_retired()  # deleted a pass ago: no read still uses them
        now = self.clock()
        ratio = self.stats.disk_used_ratio = self.disk_ratio()
        run, forced = self._pass_due(now, ratio)
        self.stats.passes += 1
        self.stats.last_pass_ms = int(now * 1000)
        if not run:
            return []
        keep_after = now - self.config.retention_hours * 3600
        deleted: list[str] = []
        while len(deleted) < BATCH and not self._stop.is_set():
            segs = self.engine.segments.segments
            if len(segs) < 2:
                self.stats.waiting_for = "only the segment being written is left"
                break
            oldest = segs[0]
            floor = self.dispatched_offset()
            if floor is None or oldest.end > floor:
                self.stats.waiting_for = "the builders to make it durable"
                break
            try:
                expired = oldest.path.stat().st_mtime <= keep_after
            except FileNotFoundError:
                expired = True
            if not expired and not forced:
                self.stats.waiting_for = "it to expire"
                break
            seg = self.engine.delete_oldest_segment()
            if seg is None:
                self.stats.waiting_for = "it is being written"
                break
            self.stats.deleted_segments += 1
            self.stats.deleted_bytes += seg.size
            deleted.append(seg.path.name)
            log.info(
                "deleted commitlog segment %s (%s); minimum offset now %d",
                seg.path.name, "disk above the forced ratio" if forced and not expired
                else "expired", self.engine.min_offset,
            )  # fmt: skip
            if forced:
                ratio = self.stats.disk_used_ratio = self.disk_ratio()
                forced = ratio * 100 > self.config.disk_forced_ratio
        else:
            self.stats.waiting_for = ""
        return deleted

    # -- thread --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.config.retention_interval_s):
            try:
                self.run_once()
            except OSError as e:
                log.error("retention pass failed: %s", e)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def status(self) -> dict:
        """Retained bytes, the oldest segment's age, what the last pass did."""
        segs = self.engine.segments.segments
        age = 0.0
        if segs:
            with contextlib.suppress(FileNotFoundError):
                age = max(self.clock() - segs[0].path.stat().st_mtime, 0.0)
        s = self.stats
        return {
            "min_offset": self.engine.min_offset,
            "retained_bytes": len(segs) * self.engine.config.segment_size,
            "segments": len(segs), "oldest_segment_age_seconds": round(age, 3),
            "deleted_segments": s.deleted_segments, "deleted_bytes": s.deleted_bytes,
            "disk_used_ratio": round(s.disk_used_ratio, 4), "waiting_for": s.waiting_for,
            "retention_hours": self.config.retention_hours,
            "delete_when": self.config.delete_when,
        }  # fmt: skip
