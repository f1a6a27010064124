"""Find records by key and/or store-time range by scanning the commitlog: no index needed.

A record matches a key when its topic is the given topic (if any) and the key is one of its
KEYS tokens or equals its UNIQ_KEY; and its store time is within [begin, end] (inclusive).
Matches come back in commitlog order. A task checks its range's records as columns
(``commitlog_columns``) and decodes in full only those that match.
"""

import base64
import mmap
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from pipelines.records import key_tokens
from pipelines.scan import DictParam, ScanPlan, outcome
from pipelines.source import (
    DEFAULT_SPLIT_BYTES,
    ByteRange,
    Corruption,
    read_range_columns,
    replanned_note,
)
from rmqstore.dispatch_columns import property_texts
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog_columns import RecordColumns
from rmqstore.formats.msgid import offset_msg_id


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
    matches: list[dict] = field(default_factory=list)
    records_scanned: int = 0
    corruptions: list[Corruption] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _find_in_range(r: ByteRange, criteria: Criteria, check_crc: bool, ends_acc):
    """(range number, description) of each match in the range; reports the range's end."""
    cols, end = read_range_columns(r, check_crc)
    ends_acc.add({r.number: (end, len(cols))})
    picked = criteria.select(cols)
    if not picked:
        return
    seg = r.segment
    with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for i in picked:
            rec = commitlog.decode(m, int(cols.position[i]), False, seg.start_offset)
            if criteria.matches(rec):  # the rule for one record, checked once more
                yield r.number, describe(rec)


def _find_all(spark, plan: ScanPlan, criteria: Criteria, check_crc: bool) -> tuple:
    """(matches as (range number, description), what the scan found)."""
    sc = spark.sparkContext
    ends = sc.accumulator({}, DictParam())
    found = []
    if plan.ranges:
        found = (sc.parallelize(plan.ranges, len(plan.ranges))
                 .flatMap(partial(_find_in_range, criteria=criteria, check_crc=check_crc,
                                  ends_acc=ends))
                 .collect())
    return found, outcome(plan, ends.value)


def find(spark, store: str | Path, criteria: Criteria, split_bytes: int = DEFAULT_SPLIT_BYTES,
         check_crc: bool = True) -> FindResult:
    found, result = _find_all(spark, ScanPlan.of(store, split_bytes), criteria, check_crc)
    replanned = []
    if result.misaligned:  # cut inside a record: cut again by walking, scan again
        replanned.append(replanned_note(result.misaligned))
        plan = ScanPlan.of(store, split_bytes, walk=True)
        found, result = _find_all(spark, plan, criteria, check_crc)
    matches = sorted((m for n, m in found if n in result.included), key=lambda m: m["phyOffset"])
    return FindResult(matches, result.records, result.corruptions, replanned + result.notes)
