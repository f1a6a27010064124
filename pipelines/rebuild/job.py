"""The rebuild job: commitlog segments in, consume-queue and index files out.

1. Plan byte ranges (one per segment, large segments cut at records found near the split
   points: ``pipelines.source``); one task each decodes its range into consume-queue units per
   queue and index keys, left as files in the staging root for step 3 (``handoff``).
2. The driver reads the small summaries: that every range began where the one before it
   ended (else it cuts again by walking every record size and decodes again), where the
   commitlog's good data ends, the key count of every range (a running sum numbers the keys,
   so each index file's keys are known), and which consume-queue files every queue needs.
3. Every consume-queue file and every index file is written by one task, which reads its
   pieces from the ranges' files (the driver spreads the files over the tasks by size).
4. The driver names the index files from their first entries' store times, then swaps the
   staging root into place, and adds the indexed topics to ``rmqstore/index.topics`` (the
   query service looks a message id up in every indexed topic, consume queue or not).
"""

import os
import shutil
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from pipelines.progress import Progress, report_range
from pipelines.rebuild import consume_queue_sink as cq_sink
from pipelines.rebuild import handoff, index_sink
from pipelines.rebuild.range_data import decode_range
from pipelines.report import JobReport
from pipelines.source import (
    DEFAULT_SPLIT_BYTES,
    ByteRange,
    Corruption,
    commitlog_dir,
    data_end,
    list_segments,
    misaligned,
    plan_ranges,
    replanned_note,
    valid_prefix,
)
from pipelines.staging import Staging
from pipelines.task_errors import about
from rmqstore import delay
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import consume_queue
from rmqstore.formats import index_file as index_fmt
from rmqstore.layout import StoreLayout

CQ_DIR = "consumequeue"
INDEX_DIR = "index"
WORK_DIR = ".ranges"  # in the staging root: what decoding tasks leave for writing tasks
_PART_PREFIX = ".part-"


@dataclass(frozen=True)
class RebuildSettings:
    index_slots: int = index_fmt.DEFAULT_SLOTS
    index_entries: int = index_fmt.DEFAULT_ENTRIES
    cq_entries_per_file: int = consume_queue.DEFAULT_ENTRIES_PER_FILE
    split_bytes: int = DEFAULT_SPLIT_BYTES
    check_crc: bool = True
    delay_levels: str = delay.DEFAULT_LEVELS  # the writer's --delay-levels: schedule units'
    # tags code is the store time plus their level's delay

    def __post_init__(self) -> None:
        delay.parse_levels(self.delay_levels)  # a clear error for a bad table
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
class RebuildReport(JobReport):
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



# -- task functions (module level so Spark pickles them by reference) ---------------------------

def _decode(r: ByteRange, check_crc: bool, tracker: tuple | None, work: str,
            index_slots: int, delay_levels: str) -> tuple:
    """Decode a range, leave its data for the writers (``handoff``), return its summary."""
    with about(f"reading {r.where}"), delay.levels_in_use(delay_levels):
        data = decode_range(r, check_crc)
    with about(f"saving the decoded {r.where} in {work}"):
        handoff.save(Path(work), data, index_slots)
    if tracker is not None:
        report_range(tracker, r.number, data.bytes)
    return (data.number, data.end, data.records, data.bytes, data.queue_spans(), data.key_count,
            data.key_topics)


def _write_files(files: list[tuple[tuple, list[tuple]]], work: str, staging_dir: str,
                 settings: RebuildSettings, queue_first: dict[tuple[str, int], int],
                 out: str):
    """Build these files from their ranges' pieces (``_FilePlan.sources``); yield what was
    written."""
    root, work_dir = Path(staging_dir), Path(work)
    epf = settings.cq_entries_per_file
    for key, sources in files:
        with about(f"writing {_file_name(key, epf)} of {out}"):
            yield from _write_file(key, sources, root, work_dir, settings, queue_first)


def _file_name(key: tuple, epf: int) -> str:
    """A file to write as the user knows it (relative to the output root)."""
    if key[0] == "cq":
        _, topic, qid, f = key
        return f"{CQ_DIR}/{topic}/{qid}/{f * consume_queue.file_size(epf):020d}"
    return f"index file number {key[1]} (named once all are written)"


def _write_file(key: tuple, sources: list[tuple], root: Path, work_dir: Path,
                settings: RebuildSettings, queue_first: dict[tuple[str, int], int]):
    """Build one file from its pieces; yield (key, entries, first store time) if written."""
    epf = settings.cq_entries_per_file
    if key[0] == "cq":
        _, topic, qid, f = key
        found = (cq_sink.split_by_file(handoff.units(work_dir, n, i), epf).get(f)
                 for n, i in sorted(sources))
        parts = [p for p in found if p is not None]
        if not parts:  # the queue's offsets skip this file: nothing to write
            return
        units = np.concatenate(parts)
        data = cq_sink.file_bytes(units, f, epf, queue_first[(topic, qid)])
        path = cq_sink.file_path(root, topic, qid, f, epf)
        cq_sink.write_file(path, data, consume_queue.file_size(epf))
        yield key, len(units), None
        return
    f = key[1]
    pieces = [handoff.keys(work_dir, n, start, stop, settings.index_slots)
              for n, start, stop in sorted(sources)]
    path = root / INDEX_DIR / f"{_PART_PREFIX}{f:010d}"
    index_sink.build_file(path, pieces, settings.index_slots, settings.index_entries)
    yield key, sum(len(p.hashes) for p in pieces), int(pieces[0].times[0])


# -- driver ---------------------------------------------------------------------------------

def _decode_all(sc, ranges: list[ByteRange], settings: RebuildSettings, tracker: tuple | None,
                work: Path) -> list[tuple]:
    """Decode every range into ``work`` (emptied first); their summaries."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    return (sc.parallelize(ranges, len(ranges))
            .map(partial(_decode, check_crc=settings.check_crc, tracker=tracker, work=str(work),
                         index_slots=settings.index_slots,
                         delay_levels=settings.delay_levels))
            .collect())


@dataclass
class _FilePlan:
    queue_first: dict[tuple[str, int], int]  # queue -> its first queue offset
    weights: dict[tuple, int]  # every file to write -> rough work
    sources: dict[tuple, list[tuple]]  # every file to write -> its pieces: (range, queue
    # index) for a consume-queue file, (range, first key, end key) for an index file
    indexed_topics: set[str] = field(default_factory=set)


def _plan_files(summaries: list[tuple], included: set[int], settings: RebuildSettings,
                report: RebuildReport) -> _FilePlan:
    """Number the index keys over the commitlog and list every file to write, with the
    pieces of the ranges that make it up."""
    plan = _FilePlan({}, {}, {})
    total_keys = 0
    epf = settings.cq_entries_per_file
    per_index_file = index_sink.capacity(settings.index_entries)
    for number, _end, records, nbytes, spans, key_count, key_topics in summaries:
        if number not in included:
            continue
        plan.indexed_topics |= key_topics
        report.records += records
        report.bytes += nbytes
        for f, start, stop in index_sink.file_slices(total_keys, key_count, per_index_file):
            plan.sources.setdefault(("ix", f), []).append((number, start, stop))
        total_keys += key_count
        for i, (q, (first, last, units)) in enumerate(spans.items()):
            plan.queue_first[q] = min(first, plan.queue_first.get(q, first))
            files = cq_sink.file_numbers(first, last, epf)
            for f in files:
                k = ("cq", q[0], q[1], f)
                plan.weights[k] = plan.weights.get(k, 0) + units // len(files) + 1
                plan.sources.setdefault(k, []).append((number, i))
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
    work = staging.path(WORK_DIR)
    try:
        prog = Progress(sc, "rebuild", {r.number: r.segment.path for r in ranges},
                        sum(map(data_end, segments)), interval=progress_interval,
                        enabled=progress)
        with prog:
            summaries: list[tuple] = []
            if ranges:
                summaries = _decode_all(sc, ranges, settings, prog.tracker(), work)
                bad = misaligned(ranges, {s[0]: s[1] for s in summaries})
                if bad:  # cut inside a record: cut again by walking, decode again
                    report.notes.append(replanned_note(bad))
                    ranges = plan_ranges(segments, settings.split_bytes, walk=True)
                    report.ranges = len(ranges)
                    summaries = _decode_all(sc, ranges, settings, None, work)
            ends = {s[0]: s[1] for s in summaries}
            included, notes = valid_prefix(ranges, ends, {s[0]: s[2] > 0 for s in summaries})
            report.notes += notes
            report.corruptions = [ends[n].corruption for n in sorted(included)
                                  if ends[n].corruption is not None]
            plan = _plan_files(sorted(summaries), included, settings, report)
            written = []
            if plan.weights:
                parts = max(1, min(len(plan.weights), 2 * sc.defaultParallelism))
                assignment = _assign_partitions(list(plan.weights), plan.weights, parts)
                tasks: list[list] = [[] for _ in range(parts)]
                for key, p in assignment.items():
                    tasks[p].append((key, plan.sources[key]))
                written = (
                    sc.parallelize(tasks, parts)
                    .flatMap(partial(_write_files, work=str(work), staging_dir=str(staging.dir),
                                     settings=settings, queue_first=plan.queue_first,
                                     out=str(staging.out)))
                    .collect()
                )
        shutil.rmtree(work, ignore_errors=True)
        first_times = {key[1]: t for key, _, t in written if key[0] == "ix"}
        names = index_sink.names_in_order([first_times[f] for f in sorted(first_times)])
        for f, name in zip(sorted(first_times), names, strict=True):
            os.rename(staging.path(INDEX_DIR, f"{_PART_PREFIX}{f:010d}"),
                      staging.path(INDEX_DIR, name))
        report.index_files = names
        report.cq_files = sum(1 for key, _, _ in written if key[0] == "cq")
        report.cq_units = sum(n for key, n, _ in written if key[0] == "cq")
        staging.commit()
        StoreLayout(staging.out).note_indexed_topics(plan.indexed_topics)
    except BaseException:
        staging.abort()
        raise
    report.seconds = time.monotonic() - started
    return report
