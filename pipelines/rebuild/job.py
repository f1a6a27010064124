"""The rebuild job: commitlog segments in, consume-queue and index files out.

1. Plan byte ranges (one per segment, large segments cut at records found near the split
   points: ``pipelines.source``); one task each decodes its range into consume-queue units per
   queue and index keys (kept, not recomputed).
2. The driver reads the small summaries: that every range began where the one before it
   ended (else it cuts again by walking every record size and decodes again), where the
   commitlog's good data ends, the key count of every range (a running sum numbers the keys,
   so each index file's keys are known), and which consume-queue files every queue needs.
3. Every consume-queue file and every index file is one shuffle key: the pieces of it from all
   ranges meet in one task, which writes the file into the staging root.
4. The driver names the index files from their first entries' store times, then swaps the
   staging root into place.
"""

import os
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from pipelines.progress import Progress, report_range
from pipelines.rebuild import consume_queue_sink as cq_sink
from pipelines.rebuild import index_sink
from pipelines.rebuild.range_data import RangeData, decode_range
from pipelines.source import (
    DEFAULT_SPLIT_BYTES,
    ByteRange,
    Corruption,
    commitlog_dir,
    list_segments,
    misaligned,
    plan_ranges,
    replanned_note,
    valid_prefix,
)
from pipelines.staging import Staging
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import consume_queue
from rmqstore.formats import index_file as index_fmt

CQ_DIR = "consumequeue"
INDEX_DIR = "index"
_PART_PREFIX = ".part-"
MIB = 1024 * 1024


@dataclass(frozen=True)
class RebuildSettings:
    index_slots: int = index_fmt.DEFAULT_SLOTS
    index_entries: int = index_fmt.DEFAULT_ENTRIES
    cq_entries_per_file: int = consume_queue.DEFAULT_ENTRIES_PER_FILE
    split_bytes: int = DEFAULT_SPLIT_BYTES
    check_crc: bool = True

    def __post_init__(self) -> None:
        if self.index_slots < 1:
            raise InvalidArgumentError(f"index slots {self.index_slots} must be at least 1")
        if self.index_entries < 2:
            raise InvalidArgumentError(
                f"index entries {self.index_entries} must be at least 2 (entry 0 is unused)")
        if self.cq_entries_per_file < 1:
            raise InvalidArgumentError(
                f"consume-queue entries per file {self.cq_entries_per_file} must be at least 1")
        if self.split_bytes < 1:
            raise InvalidArgumentError(f"split size {self.split_bytes} must be positive")


@dataclass
class RebuildReport:
    segments: int = 0
    ranges: int = 0
    bytes: int = 0  # commitlog bytes of good data read
    records: int = 0
    queues: int = 0
    cq_files: int = 0
    cq_units: int = 0
    index_files: list[str] = field(default_factory=list)
    index_keys: int = 0
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["corruptions"] = [asdict(c) for c in self.corruptions]
        d["mib_per_s"] = round(self.mib_per_s, 2)
        return d


# -- task functions (module level so Spark pickles them by reference) ---------------------------

def _decode(r: ByteRange, check_crc: bool, tracker: tuple | None) -> RangeData:
    data = decode_range(r, check_crc)
    if tracker is not None:
        report_range(tracker, r.number, data.bytes)
    return data


def _summary(d: RangeData) -> tuple:
    return d.number, d.end, d.records, d.bytes, d.queue_spans(), d.key_count


def _pieces(d: RangeData, key_base: dict[int, int], per_index_file: int,
            entries_per_file: int, index_slots: int):
    """Shuffle records: (file key, (range number, piece of that file))."""
    for (topic, qid), units in d.queues.items():
        for f, part in cq_sink.split_by_file(units, entries_per_file).items():
            yield ("cq", topic, qid, f), (d.number, part)
    if d.key_count:
        for f, start, stop in index_sink.file_slices(key_base[d.number], d.key_count,
                                                     per_index_file):
            yield ("ix", f), (d.number, index_sink.piece(
                d.key_hashes[start:stop], d.key_phys[start:stop], d.key_times[start:stop],
                index_slots))


class _FilePartitioner:
    """Spreads file keys over partitions as the driver planned."""

    def __init__(self, assignment: dict[tuple, int]) -> None:
        self.assignment = assignment

    def __call__(self, key: tuple) -> int:
        return self.assignment[key]


def _write_files(items, staging_dir: str, settings: RebuildSettings,
                 queue_first: dict[tuple[str, int], int]):
    """Build every file whose pieces landed in this partition; yield what was written."""
    groups: dict[tuple, list] = {}
    for key, piece in items:
        groups.setdefault(key, []).append(piece)
    root = Path(staging_dir)
    epf = settings.cq_entries_per_file
    for key, pieces in groups.items():
        pieces.sort(key=lambda p: p[0])
        if key[0] == "cq":
            _, topic, qid, f = key
            units = np.concatenate([p[1] for p in pieces])
            data = cq_sink.file_bytes(units, f, epf, queue_first[(topic, qid)])
            path = cq_sink.file_path(root, topic, qid, f, epf)
            cq_sink.write_file(path, data, consume_queue.file_size(epf))
            yield key, len(units), None
        else:
            _, f = key
            parts = [p[1] for p in pieces]
            path = root / INDEX_DIR / f"{_PART_PREFIX}{f:010d}"
            index_sink.build_file(path, parts, settings.index_slots, settings.index_entries)
            yield key, sum(len(p.hashes) for p in parts), int(parts[0].times[0])


# -- driver ---------------------------------------------------------------------------------

def _decode_all(sc, ranges: list[ByteRange], check_crc: bool, tracker: tuple | None) -> tuple:
    """The ranges decoded (kept for the file-writing stage) and their summaries."""
    from pyspark import StorageLevel

    decoded = (sc.parallelize(ranges, len(ranges))
               .map(partial(_decode, check_crc=check_crc, tracker=tracker))
               .persist(StorageLevel.MEMORY_AND_DISK))
    return decoded, decoded.map(_summary).collect()


@dataclass
class _FilePlan:
    key_base: dict[int, int]  # range number -> number of its first index key
    queue_first: dict[tuple[str, int], int]  # queue -> its first queue offset
    weights: dict[tuple, int]  # every file to write -> rough work


def _plan_files(summaries: list[tuple], included: set[int], settings: RebuildSettings,
                report: RebuildReport) -> _FilePlan:
    """Number the index keys over the commitlog and list every file to write."""
    plan = _FilePlan({}, {}, {})
    total_keys = 0
    epf = settings.cq_entries_per_file
    per_index_file = index_sink.capacity(settings.index_entries)
    for number, _end, records, nbytes, spans, key_count in summaries:
        if number not in included:
            continue
        report.records += records
        report.bytes += nbytes
        plan.key_base[number] = total_keys
        total_keys += key_count
        for q, (first, last, units) in spans.items():
            plan.queue_first[q] = min(first, plan.queue_first.get(q, first))
            files = cq_sink.file_numbers(first, last, epf)
            for f in files:
                k = ("cq", q[0], q[1], f)
                plan.weights[k] = plan.weights.get(k, 0) + units // len(files) + 1
    for f in range((total_keys + per_index_file - 1) // per_index_file):
        plan.weights[("ix", f)] = 2 * min(per_index_file, total_keys - f * per_index_file)
    report.index_keys = total_keys
    report.queues = len(plan.queue_first)
    return plan


def _assign_partitions(keys: list[tuple], weights: dict[tuple, int],
                       partitions: int) -> dict[tuple, int]:
    """Heaviest first, each to the lightest partition so far."""
    load = [0] * partitions
    out: dict[tuple, int] = {}
    for key in sorted(keys, key=lambda k: -weights[k]):
        p = min(range(partitions), key=load.__getitem__)
        out[key] = p
        load[p] += weights[key]
    return out


def rebuild(spark, store: str | Path, out: str | Path,
            settings: RebuildSettings | None = None, replace: bool = False,
            progress: bool = False, progress_interval: float = 2.0) -> RebuildReport:
    """Rebuild ``consumequeue/`` and ``index/`` of ``store``'s commitlog into ``out``."""
    settings = settings or RebuildSettings()
    started = time.monotonic()
    segments = list_segments(commitlog_dir(store))
    ranges = plan_ranges(segments, settings.split_bytes)
    report = RebuildReport(segments=len(segments), ranges=len(ranges))
    staging = Staging(out, (CQ_DIR, INDEX_DIR), replace=replace)
    sc = spark.sparkContext
    decoded = None
    try:
        prog = Progress(sc, "rebuild", {r.number: r.segment.path for r in ranges},
                        sum(s.size for s in segments), interval=progress_interval,
                        enabled=progress)
        with prog:
            summaries: list[tuple] = []
            if ranges:
                decoded, summaries = _decode_all(sc, ranges, settings.check_crc, prog.tracker())
                bad = misaligned(ranges, {s[0]: s[1] for s in summaries})
                if bad:  # cut inside a record: cut again by walking, decode again
                    report.notes.append(replanned_note(bad))
                    decoded.unpersist()
                    ranges = plan_ranges(segments, settings.split_bytes, walk=True)
                    report.ranges = len(ranges)
                    decoded, summaries = _decode_all(sc, ranges, settings.check_crc, None)
            ends = {s[0]: s[1] for s in summaries}
            included, notes = valid_prefix(ranges, ends, {s[0]: s[2] > 0 for s in summaries})
            report.notes += notes
            report.corruptions = [ends[n].corruption for n in sorted(included)
                                  if ends[n].corruption is not None]
            plan = _plan_files(sorted(summaries), included, settings, report)
            written = []
            if plan.weights and decoded is not None:
                parts = max(1, min(len(plan.weights), 2 * sc.defaultParallelism))
                assignment = _assign_partitions(list(plan.weights), plan.weights, parts)
                written = (
                    decoded.filter(lambda d, inc=frozenset(included): d.number in inc)
                    .flatMap(partial(_pieces, key_base=plan.key_base,
                                     per_index_file=index_sink.capacity(settings.index_entries),
                                     entries_per_file=settings.cq_entries_per_file,
                                     index_slots=settings.index_slots))
                    .partitionBy(parts, _FilePartitioner(assignment))
                    .mapPartitions(partial(_write_files, staging_dir=str(staging.dir),
                                           settings=settings, queue_first=plan.queue_first))
                    .collect()
                )
        first_times = {key[1]: t for key, _, t in written if key[0] == "ix"}
        names = index_sink.names_in_order([first_times[f] for f in sorted(first_times)])
        for f, name in zip(sorted(first_times), names, strict=True):
            os.rename(staging.path(INDEX_DIR, f"{_PART_PREFIX}{f:010d}"),
                      staging.path(INDEX_DIR, name))
        report.index_files = names
        report.cq_files = sum(1 for key, _, _ in written if key[0] == "cq")
        report.cq_units = sum(n for key, n, _ in written if key[0] == "cq")
        staging.commit()
    except BaseException:
        staging.abort()
        raise
    finally:
        if decoded is not None:
            decoded.unpersist()
    report.seconds = time.monotonic() - started
    return report
