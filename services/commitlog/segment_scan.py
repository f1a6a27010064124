"""Recovery's two walks over segment files, a worker process per segment when that pays.

Records never cross segments, so each segment is checked (``scan_end``: CRC and lengths, and
the queue offsets its records take) or read without CRCs (``heads``: queue offsets only) on
its own and the results are combined in segment order by the caller; both read records as
columns, a chunk at a time. With at least ``parallel_bytes`` to read and more than one core,
each segment goes to its own forked worker process (at most twice the cores), which maps the
file read-only (the reading holds Python's lock most of the time, so threads would share one
core); otherwise, or if workers cannot be started, they are read here.
"""

import logging
import mmap
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any, TypeVar

from rmqstore.errors import CorruptRecordError
from rmqstore.formats.commitlog_segment import Blank, QueueTally, scan_end

log = logging.getLogger(__name__)
PARALLEL_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Part:
    """Bytes [begin, limit) of the segment file at ``path`` that starts at ``start``; a check
    counts queue offsets from position ``count_from`` on (a walk from ``begin``)."""

    path: str
    start: int
    begin: int
    limit: int
    count_from: int = 0


@dataclass(frozen=True)
class ScanEnd:
    """Where a segment's valid data ends (``scan_end``'s answer, picklable), and the queue
    offsets taken by its valid records from ``Part.count_from`` on."""

    position: int
    blank: Blank | None
    error: str | None = None
    error_offset: int = -1
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    last_position: int | None = None

    def corruption(self) -> CorruptRecordError | None:
        return None if self.error is None else CorruptRecordError(self.error, self.error_offset)


@dataclass(frozen=True)
class Heads:
    """What reading one part without CRCs found: next queue offset per (topic, queue id), the
    position of its last record, and the error that stopped it early."""

    next_offsets: dict[tuple[str, int], int]
    last_position: int | None
    error: str | None = None


def _mapped(part: Part, fn: Callable[[Any], Any]) -> Any:
    with open(part.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return fn(m)


def check(buf: Any, part: Part) -> ScanEnd:
    """``scan_end`` with CRC checks over one segment's bytes, counting queue offsets."""
    tally = QueueTally(part.count_from)
    pos, blank, err = scan_end(buf, part.begin, True, part.start, tally)
    if err is None:
        return ScanEnd(pos, blank, next_offsets=tally.next_offsets,
                       last_position=tally.last_position)
    return ScanEnd(pos, blank, str(err), err.offset, tally.next_offsets, tally.last_position)


def heads(buf: Any, part: Part) -> Heads:
    """Queue offsets taken by the records of one part, read without their CRCs (a trusted
    segment)."""
    tally = QueueTally()
    _, _, err = scan_end(buf, part.begin, False, part.start, tally, part.limit)
    return Heads(tally.next_offsets, tally.last_position, None if err is None else str(err))


def _check_file(part: Part) -> ScanEnd:
    return _mapped(part, lambda m: check(m, part))


def _heads_file(part: Part) -> Heads:
    return _mapped(part, lambda m: heads(m, part))


R = TypeVar("R")


def run_parts(
    parts: Sequence[Part],
    local: Callable[[Part], R],
    remote: Callable[[Part], R],
    parallel_bytes: int = PARALLEL_BYTES,
) -> list[R]:
    """``remote(part)`` for every part in worker processes when that pays, else ``local``;
    results in the order of ``parts``."""
    cores = os.cpu_count() or 1
    workers = min(len(parts), 2 * cores)  # 3 segments on 2 cores: 1.5 rounds, not 2
    if cores > 1 and workers > 1 and sum(p.limit - p.begin for p in parts) >= parallel_bytes:
        try:
            with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
                return list(pool.map(remote, parts))
        except (OSError, RuntimeError) as e:  # no fork here, or a worker died
            log.warning("recovery reads segments in this process: %s", e)
    return [local(p) for p in parts]


def check_all(parts: Sequence[Part], local: Callable[[Part], ScanEnd],
              parallel_bytes: int = PARALLEL_BYTES) -> list[ScanEnd]:
    return run_parts(parts, local, _check_file, parallel_bytes)


def heads_all(parts: Sequence[Part], local: Callable[[Part], Heads],
              parallel_bytes: int = PARALLEL_BYTES) -> list[Heads]:
    return run_parts(parts, local, _heads_file, parallel_bytes)
