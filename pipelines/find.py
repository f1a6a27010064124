"""Find records by key and/or store-time range by scanning the commitlog: no index needed.

A record matches a key when its topic is the given topic (if any) and the key is one of its
KEYS tokens or equals its UNIQ_KEY; and its store time is within [begin, end] (inclusive).
A task checks its range's records as columns (``commitlog_columns``), decodes in full only
those that match and writes them as JSON lines next to the other ranges' files: the matches
never go through the driver, which reads back only as many as it prints. Named stores (the
brokers of a cluster) are scanned in one job; each of their matches names its ``broker``.
"""

import base64
import json
import mmap
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from pipelines.records import key_tokens
from pipelines.scan import ScanOutcome, ScanPlan, outcome
from pipelines.source import (
    DEFAULT_SPLIT_BYTES,
    ByteRange,
    Corruption,
    read_range_columns,
    replanned_note,
)
from pipelines.staging import fresh_output
from pipelines.stores import StoreRef, as_stores
from pipelines.task_errors import about
from rmqstore.dispatch_columns import property_texts
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog_columns import RecordColumns
from rmqstore.formats.msgid import offset_msg_id

PART_PREFIX = "part-"
PART_SUFFIX = ".jsonl"
SUCCESS_MARKER = "_SUCCESS"


@dataclass(frozen=True)
class Criteria:
    topic: str | None = None
    key: str | None = None
    begin: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        if self.topic is None and self.key is None and self.begin is None and self.end is None:
            raise InvalidArgumentError("find needs a topic, a key or a time range")
        if self.begin is not None and self.end is not None and self.begin > self.end:
            raise InvalidArgumentError(f"begin {self.begin} is after end {self.end}")

    def select(self, cols: RecordColumns) -> list[int]:
        """The records of ``cols`` that match, as ``matches`` would find them."""
        mask = np.ones(len(cols), dtype=bool)
        if self.topic is not None:
            wanted = cols.topics.index(self.topic) if self.topic in cols.topics else -1
            mask &= cols.topic_id == wanted
        if self.begin is not None:
            mask &= cols.store_timestamp >= self.begin
        if self.end is not None:
            mask &= cols.store_timestamp <= self.end
        picked = np.flatnonzero(mask).tolist()
        if self.key is not None and picked:
            segs = props_fmt.segments(cols.properties)
            uniq = property_texts(cols, props_fmt.UNIQ_KEY, segs)
            keys = property_texts(cols, props_fmt.KEYS, segs)
            picked = [i for i in picked if self.key == uniq[i] or self.key in key_tokens(keys[i])]
        return picked

    def matches(self, rec: commitlog.Record) -> bool:
        if self.topic is not None and rec.topic != self.topic:
            return False
        if self.begin is not None and rec.store_timestamp < self.begin:
            return False
        if self.end is not None and rec.store_timestamp > self.end:
            return False
        if self.key is not None:
            return self.key == rec.uniq_key or self.key in key_tokens(rec.keys)
        return True


def describe(rec: commitlog.Record) -> dict:
    """A found record as JSON-ready fields; the body as text when it is UTF-8, else base64."""
    try:
        body, encoding = rec.body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(rec.body).decode(), "base64"
    return {
        "msgId": offset_msg_id(rec.store_host.ip, rec.store_host.port, rec.physical_offset),
        "uniqKey": rec.uniq_key or None,
        "topic": rec.topic,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "phyOffset": rec.physical_offset,
        "size": rec.total_size,
        "storeTimestamp": rec.store_timestamp,
        "bornTimestamp": rec.born_timestamp,
        "storeHost": str(rec.store_host),
        "bornHost": str(rec.born_host),
        "sysFlag": rec.sys_flag,
        "keys": rec.keys or None,
        "tags": rec.tags or None,
        "properties": dict(rec.property_map),
        "body": body,
        "bodyEncoding": encoding,
    }


@dataclass
class FindResult:
    out: Path  # the dataset: part-<range>.jsonl files in commitlog order, and _SUCCESS
    matches: int = 0  # over every store
    records_scanned: int = 0
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    brokers: dict[str, int] = field(default_factory=dict)  # records scanned per broker

    def parts(self) -> list[Path]:
        return sorted(self.out.glob(f"{PART_PREFIX}*{PART_SUFFIX}"))

    def read(self, limit: int | None = None) -> Iterator[dict]:
        """The matches in commitlog order (store after store), at most ``limit`` of them."""
        if limit is not None and limit <= 0:
            return
        n = 0
        for part in self.parts():
            with part.open(encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)
                    n += 1
                    if limit is not None and n >= limit:
                        return


def _part_name(number: int) -> str:
    return f"{PART_PREFIX}{number:05d}{PART_SUFFIX}"


def _find_in_range(r: ByteRange, criteria: Criteria, check_crc: bool, target: str) -> tuple:
    """Write the range's matches as JSON lines; (range number, (its end, records), matches)."""
    with about(f"reading {r.where}"):
        cols, end = read_range_columns(r, check_crc)
        picked = criteria.select(cols)
        found = []
        if picked:
            seg = r.segment
            with open(seg.path, "rb") as f, \
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                for i in picked:
                    rec = commitlog.decode(m, int(cols.position[i]), False, seg.start_offset)
                    if criteria.matches(rec):  # the rule for one record, checked once more
                        found.append(describe(rec) if r.broker is None
                                     else {"broker": r.broker, **describe(rec)})
    if found:
        path = Path(target) / _part_name(r.number)
        with about(f"writing {path}"):
            tmp = path.with_name(path.name + ".tmp")  # a retried task writes it again
            with tmp.open("w", encoding="utf-8") as lines:
                for match in found:
                    lines.write(json.dumps(match, ensure_ascii=False) + "\n")
            os.replace(tmp, path)
    return r.number, (end, len(cols)), len(found)


def _find_all(spark, plan: ScanPlan, criteria: Criteria, check_crc: bool,
              target: Path) -> tuple[ScanOutcome, dict[int, int]]:
    """What the scan found, and the matches of each range (their files are in ``target``)."""
    for stale in target.glob(f"{PART_PREFIX}*"):
        stale.unlink()
    done = []
    if plan.ranges:
        done = (spark.sparkContext.parallelize(plan.ranges, len(plan.ranges))
                .map(partial(_find_in_range, criteria=criteria, check_crc=check_crc,
                             target=str(target)))
                .collect())
    return outcome(plan, {n: end for n, end, _ in done}), {n: c for n, _, c in done}


def find(spark, stores: str | Path | list[StoreRef], criteria: Criteria, out: str | Path,
         split_bytes: int = DEFAULT_SPLIT_BYTES, check_crc: bool = True) -> FindResult:
    """Scan the commitlogs of ``stores`` (one path, or named stores: each match names its
    broker); write the matches to the new directory ``out`` as JSON lines
    (``part-<range>.jsonl``, in commitlog order, store after store, then ``_SUCCESS``)."""
    out, target = fresh_output(out, "find")
    stores = as_stores(stores)
    plan = ScanPlan.of(stores, split_bytes)
    target.mkdir()
    try:
        result, counts = _find_all(spark, plan, criteria, check_crc, target)
        replanned = []
        if result.misaligned:  # cut inside a record: cut again by walking, scan again
            replanned.append(replanned_note(result.misaligned))
            plan = ScanPlan.of(stores, split_bytes, walk=True)
            result, counts = _find_all(spark, plan, criteria, check_crc, target)
        for n in set(counts) - result.included:  # after the end of the data: not matches
            (target / _part_name(n)).unlink(missing_ok=True)
        (target / SUCCESS_MARKER).write_bytes(b"")
        os.rename(target, out)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    matches = sum(c for n, c in counts.items() if n in result.included)
    return FindResult(out, matches, result.records, result.corruptions,
                      replanned + result.notes, result.brokers)
