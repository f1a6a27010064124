"""Progress of a long run on stderr: segments done / total and bytes per second.

Tasks add to Spark accumulators (bytes read, ranges done); a driver thread prints a line
every ``interval`` seconds while the job runs.
"""

import sys
import threading
import time
from typing import IO

from pyspark.accumulators import AccumulatorParam

MIB = 1024 * 1024


class SetParam(AccumulatorParam):
    """Accumulates a set (of range numbers)."""

    def zero(self, value):
        return frozenset()

    def addInPlace(self, value1, value2):
        return frozenset(value1) | frozenset(value2)


class Progress:
    """Accumulators the decoding tasks update, and a printer thread on the driver."""

    def __init__(self, sc, label: str, segment_of_range: dict[int, str], total_bytes: int,
                 stream: IO[str] | None = None, interval: float = 2.0,
                 enabled: bool = True) -> None:
        self.label = label
        self.bytes = sc.accumulator(0)
        self.ranges = sc.accumulator(frozenset(), SetParam())
        self.segment_of_range = segment_of_range
        self.segments_total = len(set(segment_of_range.values()))
        self.total_bytes = total_bytes
        self.stream = stream or sys.stderr
        self.interval = interval
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = time.monotonic()

    def tracker(self) -> tuple:
        """What a task needs to report progress (picklable)."""
        return self.bytes, self.ranges

    def line(self) -> str:
        done_ranges = set(self.ranges.value)
        per_segment: dict[str, list[bool]] = {}
        for r, seg in self.segment_of_range.items():
            per_segment.setdefault(seg, []).append(r in done_ranges)
        segments_done = sum(all(v) for v in per_segment.values())
        elapsed = max(time.monotonic() - self.started, 1e-9)
        read = self.bytes.value
        return (f"{self.label}: segments {segments_done}/{self.segments_total}, "
                f"{read / MIB:.1f}/{self.total_bytes / MIB:.1f} MiB, "
                f"{read / MIB / elapsed:.1f} MiB/s")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def __enter__(self) -> "Progress":
        self.started = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            print(self.line(), file=self.stream, flush=True)


def report_range(tracker: tuple, range_number: int, nbytes: int) -> None:
    """Called in a task when a range is decoded."""
    acc_bytes, acc_ranges = tracker
    acc_bytes.add(nbytes)
    acc_ranges.add(frozenset((range_number,)))


