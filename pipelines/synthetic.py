"""Synthetic commitlogs for tests and benchmarks, written with ``rmqstore.formats.commitlog``.

Records are laid out as the writer lays them out: queue offsets per (topic, queue) (prepared
and rollback records get 0 and do not advance the counter), physical offsets, an 8-byte blank
record when the next record does not fit with 8 bytes to spare, full-size segments.
"""

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from rmqstore.dispatch import goes_to_consume_queue
from rmqstore.formats import commitlog
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.hosts import Host
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name

STORE_HOST = Host(b"\x7f\x00\x00\x01", 10911)
BORN_HOST = Host(b"\x0a\x00\x00\x07", 50123)


@dataclass
class Message:
    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    store_timestamp: int = 1_700_000_000_000


@dataclass
class Written:
    phy_offset: int
    size: int
    queue_offset: int
    message: Message


class CommitlogWriter:
    """Appends messages to ``<root>/commitlog`` segments of ``segment_size`` bytes."""

    def __init__(self, root: str | Path, segment_size: int) -> None:
        self.dir = StoreLayout.of(root).commitlog_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_size = segment_size
        self.offset = 0
        self.counters: dict[tuple[str, int], int] = {}
        self._file: BinaryIO | None = None
        self._pos = 0
        self._open(0)

    def _open(self, start: int) -> BinaryIO:
        if self._file is not None:
            self._file.close()
        f = self._file = open(self.dir / segment_name(start), "wb")  # noqa: SIM115
        f.truncate(self.segment_size)
        self._pos = 0
        return f

    def append(self, m: Message) -> Written:
        key = (m.topic, m.queue_id)
        qo = self.counters.get(key, 0) if goes_to_consume_queue(m.sys_flag) else 0
        rec = commitlog.Record(
            topic=m.topic, queue_id=m.queue_id, body=m.body,
            properties=props_fmt.encode(m.properties), queue_offset=qo,
            physical_offset=self.offset, sys_flag=m.sys_flag, born_timestamp=m.store_timestamp - 3,
            born_host=BORN_HOST, store_timestamp=m.store_timestamp, store_host=STORE_HOST,
        )
        data = commitlog.encode(rec)
        f = self._file
        if f is None:
            raise ValueError("the commitlog writer is closed")
        if len(data) + commitlog.BLANK_SIZE > self.segment_size - self._pos:
            left = self.segment_size - self._pos
            f.write(commitlog.blank(left))
            self.offset += left
            f = self._open(self.offset)
            rec.physical_offset = self.offset
            data = commitlog.encode(rec)
        f.write(data)
        written = Written(self.offset, len(data), qo, m)
        self._pos += len(data)
        self.offset += len(data)
        if goes_to_consume_queue(m.sys_flag):
            self.counters[key] = qo + 1
        return written

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def write_commitlog(root: str | Path, messages: Iterable[Message],
                    segment_size: int) -> list[Written]:
    w = CommitlogWriter(root, segment_size)
    try:
        return [w.append(m) for m in messages]
    finally:
        w.close()


def mixed_messages(count: int, body_size: int = 100, topics: int = 3, queues: int = 4,
                   start_ms: int = 1_700_000_000_000, step_ms: int = 7) -> Iterator[Message]:
    """Messages over several topics and queues with UNIQ_KEYs, KEYS (some colliding, some
    repeated or empty tokens), tags, delayed-looking schedule records and transactions."""
    body = bytes(range(256)) * (body_size // 256 + 1)
    for i in range(count):
        topic = f"Topic{i % topics}"
        props = {
            props_fmt.UNIQ_KEY: f"7F00000100002A9F{i:016X}",
            props_fmt.CLUSTER: "DefaultCluster",
        }
        if i % 5:
            props[props_fmt.KEYS] = f"order-{i} {'Aa' if i % 2 else 'BB'}  user-{i % 13}"
        if i % 3:
            props[props_fmt.TAGS] = f"tag{i % 4}"
        sys_flag = 0
        if i % 17 == 5:
            sys_flag = commitlog.TRANSACTION_PREPARED_TYPE
        elif i % 17 == 9:
            sys_flag = commitlog.TRANSACTION_ROLLBACK_TYPE
        elif i % 17 == 11:
            sys_flag = commitlog.TRANSACTION_COMMIT_TYPE
        if i % 29 == 3:
            topic = "SCHEDULE_TOPIC_XXXX"
            props[props_fmt.DELAY] = "3"
            props[props_fmt.REAL_TOPIC] = "Topic0"
            props[props_fmt.REAL_QID] = "1"
            queue = 2
        else:
            queue = (i * 7) % queues
        size = body_size + (i * 31) % 50
        yield Message(topic, queue, body[:size], props, sys_flag, start_ms + i * step_ms)
