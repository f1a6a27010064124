"""``--topics-file``: topics the writer makes sure of at start (the Helm chart's ``topics``).

The file is a JSON list of topics, each ``{"name": "Orders", "queues": 8}`` with optional
``"perm"`` (RocketMQ's: 6 read and write, 4 read only, 2 write only) and ``"type"`` (NORMAL,
FIFO, DELAY, TRANSACTION or MIXED, the default)::

    [{"name": "Orders", "queues": 8}, {"name": "Payments", "queues": 4, "type": "FIFO"}]

Every entry is checked before any topic is made: one bad entry refuses the start, naming it,
and creates nothing. Then each topic the store lacks is created; one it has is left as it is
(its queues, perm and type: a declared topic is never shrunk, changed or deleted, and one
dropped from the file stays). A slave applies none: it takes its master's topics.
"""

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats.topics_json import TopicConfig
from services.commitlog.topics import TopicStore

log = logging.getLogger("rmqstore.commitlog")

_KEYS = {"name", "queues", "perm", "type"}


@dataclass(frozen=True)
class Declared:
    name: str
    queues: int
    perm: int = 0  # 0: the writer's default (read and write)
    type: str = ""  # "": MIXED


def _int(entry: dict, key: str, where: str) -> int:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {key} must be a whole number, not {value!r}")
    return value


def _entry(entry: object, where: str) -> Declared:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: not an object with name and queues")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (name, queues, perm, type)")
    if not isinstance(entry.get("name"), str):
        raise ValueError(f"{where}: name must be a string")
    where = f"{where} ({entry['name']!r})"
    if "queues" not in entry:
        raise ValueError(f"{where}: queues is missing")
    kind = entry.get("type", "")
    if not isinstance(kind, str):
        raise ValueError(f"{where}: type must be a string, not {kind!r}")
    perm = _int(entry, "perm", where) if "perm" in entry else 0
    if perm == 0 and "perm" in entry:
        raise ValueError(f"{where}: perm 0 lets nobody read or write")
    queues = _int(entry, "queues", where)
    if queues < 1:
        raise ValueError(f"{where}: queues must be at least 1, not {queues}")
    return Declared(entry["name"], queues, perm, kind)


def load(path: str | Path) -> list[Declared]:
    """The declared topics of ``path``, or ``ValueError`` naming the file and the entry."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    if not isinstance(doc, list):
        raise ValueError(f"{path}: a JSON list of topics is expected")
    declared = [_entry(e, f"{path}: topic {i + 1}") for i, e in enumerate(doc)]
    seen: set[str] = set()
    for d in declared:
        if d.name in seen:
            raise ValueError(f"{path}: topic {d.name!r} is declared twice")
        seen.add(d.name)
    return declared


def apply(store: TopicStore, declared: list[Declared]) -> list[tuple[TopicConfig, bool]]:
    """Each declared topic and whether it was created now; every entry is checked against the
    store (name, queues within its --queues-per-topic, perm, type) before any is created."""
    for d in declared:
        try:
            store.checked(d.name, d.queues, d.perm, d.type)
        except InvalidArgumentError as e:
            raise ValueError(f"topic {d.name!r}: {e}") from None
    out = []
    for d in declared:
        topic, created = store.create(d.name, d.queues, d.perm, d.type)
        out.append((topic, created))
        if created:
            log.info("declared topic %s created: %d queues, perm %d, %s", topic.name,
                     topic.write_queue_nums, topic.perm, topic.message_type)  # fmt: skip
        else:
            log.info("declared topic %s exists, unchanged: queues r%d/w%d, perm %d, %s",
                     topic.name, topic.read_queue_nums, topic.write_queue_nums, topic.perm,
                     topic.message_type)  # fmt: skip
    return out
