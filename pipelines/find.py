"""Find records by key and/or store-time range by scanning the commitlog: no index needed.

A record matches a key when its topic is the given topic (if any) and the key is one of its
KEYS tokens or equals its UNIQ_KEY; and its store time is within [begin, end] (inclusive).
Matches come back in commitlog order.
"""

import base64
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pipelines.records import key_tokens
from pipelines.scan import DictParam, ScanPlan, outcome, scan_range
from pipelines.source import DEFAULT_SPLIT_BYTES, Corruption
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
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


def _match(number: int, rec: commitlog.Record, criteria: Criteria):
    return (number, describe(rec)) if criteria.matches(rec) else None


def find(spark, store: str | Path, criteria: Criteria, split_bytes: int = DEFAULT_SPLIT_BYTES,
         check_crc: bool = True) -> FindResult:
    plan = ScanPlan.of(store, split_bytes)
    sc = spark.sparkContext
    ends = sc.accumulator({}, DictParam())
    found = []
    if plan.ranges:
        found = (sc.parallelize(plan.ranges, len(plan.ranges))
                 .flatMap(partial(scan_range, convert=partial(_match, criteria=criteria),
                                  check_crc=check_crc, ends_acc=ends, tracker=None))
                 .collect())
    result = outcome(plan, ends.value)
    matches = sorted((m for n, m in found if n in result.included), key=lambda m: m["phyOffset"])
    return FindResult(matches, result.records, result.corruptions, result.notes)
