"""The store directory, laid out exactly as RocketMQ 4.9 lays it out.

<root>/commitlog/<20-digit offset>          commitlog segments
<root>/consumequeue/<topic>/<queueId>/<20-digit byte offset>
<root>/index/<yyyyMMddHHmmssSSS>             index files
<root>/checkpoint  <root>/abort  <root>/lock
<root>/config/delayOffset.json                delivery progress per delay level (RocketMQ's)
<root>/config/brokerPermission.json          the broker's permission (``rmqstore.broker_perm``)
<root>/rmqstore/<builder>.progress           our builders' durable progress (not RocketMQ's)
<root>/rmqstore/index.topics                 every topic the index builder has seen, one a line
<root>/rmqstore/store-id                     the store's identity (see ``rmqstore.identity``)
<root>/rmqstore/store-hosts.json             every store host of its records (``store_hosts``)
<root>/rmqstore/quarantine/                  bytes recovery cut, kept aside
"""

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from rmqstore.durable import replace_file
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats.javahash import utf16_len

TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_%|-]+")  # fullmatch only: "T\n" is not a topic
MAX_TOPIC_LENGTH = 127
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# RocketMQ 4.9's transaction topics: half messages (queue 0), and op records (tag "d",
# body = the half's queue offset) that mark a half message committed or rolled back
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


def validate_topic(topic: str) -> str:
    """A topic becomes a directory name: only ``[A-Za-z0-9_%|-]``, 1..127 characters."""
    if not topic:
        raise InvalidArgumentError("topic is empty")
    if utf16_len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidArgumentError(
            f"topic is {utf16_len(topic)} characters long, at most {MAX_TOPIC_LENGTH}"
        )
    if not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidArgumentError(f"topic {topic!r} has characters outside [A-Za-z0-9_%|-]")
    return topic


def index_file_name(timestamp_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of a store time, in UTC (a rebuild must reproduce it)."""
    t = dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=dt.UTC)
    return t.strftime("%Y%m%d%H%M%S") + f"{timestamp_ms % 1000:03d}"


def unique_index_file_name(first_timestamp_ms: int, taken: set[str]) -> str:
    """Name of a new index file: its first entry's store time, plus 1 ms until it is unique.

    The online index builder and the rebuild pipeline both name files with this rule.
    """
    t = first_timestamp_ms
    while (name := index_file_name(t)) in taken:
        t += 1
    return name


_INDEX_NAME = re.compile(r"\d{17}")


def is_index_file_name(name: str) -> bool:
    return bool(_INDEX_NAME.fullmatch(name))


@dataclass(frozen=True)
class StoreLayout:
    root: Path

    @classmethod
    def of(cls, root: str | Path) -> "StoreLayout":
        return cls(Path(root))

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    def queue_dir(self, topic: str, queue_id: int) -> Path:
        validate_topic(topic)
        return self.consumequeue_dir / topic / str(queue_id)

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort(self) -> Path:
        return self.root / "abort"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def own_dir(self) -> Path:
        """rmqstore's own subdirectory (RocketMQ ignores it)."""
        return self.root / "rmqstore"

    @property
    def replica_config_dir(self) -> Path:
        """A slave's copies of its master's consumer progress (``consumerOffset.json``,
        ``subscriptionGroup.json``), kept by its writer and read by its proxy at start."""
        return self.own_dir / "replica-config"

    @property
    def delay_offset(self) -> Path:
        return self.root / "config" / "delayOffset.json"

    def schedule_queue_dir(self, level: int) -> Path:
        return self.consumequeue_dir / SCHEDULE_TOPIC / str(level - 1)

    def progress(self, builder: str) -> Path:
        return self.own_dir / f"{builder}.progress"

    @property
    def index_topics(self) -> Path:
        return self.own_dir / "index.topics"

    def indexed_topics(self) -> set[str]:
        """Topics the index builder has seen (a topic may have no consume queue: one holding
        only prepared transaction messages, or one the consume-queue builder has not reached)."""
        try:
            lines = self.index_topics.read_text().split("\n")
        except OSError:
            return set()
        return {t for t in lines if t and TOPIC_PATTERN.fullmatch(t)}

    def note_indexed_topics(self, topics: set[str]) -> set[str]:
        """Add ``topics`` to the file, durably; every topic it holds now."""
        known = self.indexed_topics()
        if not topics <= known:
            known |= topics
            self.own_dir.mkdir(parents=True, exist_ok=True)
            replace_file(self.index_topics, "\n".join(sorted(known)).encode() + b"\n")
        return known

    def topics(self) -> list[str]:
        """Every topic of the store: with a consume queue, or seen by the index builder."""
        found = self.indexed_topics()
        if self.consumequeue_dir.is_dir():
            found.update(p.name for p in self.consumequeue_dir.iterdir()
                         if p.is_dir() and TOPIC_PATTERN.fullmatch(p.name))
        return sorted(found)

    @property
    def store_id(self) -> Path:
        return self.own_dir / "store-id"

    @property
    def quarantine_dir(self) -> Path:
        return self.own_dir / "quarantine"

    def queues(self) -> list[tuple[str, int, Path]]:
        """Every (topic, queue id, dir) under consumequeue/ whose names are valid."""
        out: list[tuple[str, int, Path]] = []
        if not self.consumequeue_dir.is_dir():
            return out
        for tdir in sorted(self.consumequeue_dir.iterdir()):
            if not tdir.is_dir() or not TOPIC_PATTERN.fullmatch(tdir.name):
                continue
            for qdir in sorted(tdir.iterdir()):
                if qdir.is_dir() and qdir.name.isdigit():
                    out.append((tdir.name, int(qdir.name), qdir))
        return out
