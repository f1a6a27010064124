"""Builds a small store on disk for the lookup tests: commitlog segment, index files, queues.

Records are encoded with the shared format library and written to a real segment file; the
index files are filled with ``IndexFile.put_many`` (small slot and entry counts force slot
collisions and roll-overs); consume queues get their units. The returned model lists what was
put, so tests compute expected answers without any index.
"""

import mmap
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqstore import dispatch
from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.index_file import IndexFile, file_size
from rmqstore.formats.javahash import index_hashes
from rmqstore.formats.msgid import UniqKeyGenerator
from rmqstore.layout import StoreLayout, unique_index_file_name
from rmqstore.segments import segment_name


@dataclass(frozen=True)
class Stored:
    phy: int
    topic: str
    queue_id: int
    queue_offset: int
    keys: str
    uniq_key: str
    tags: str
    store_timestamp: int

    def matches(self, topic: str, key: str, begin: int, end: int) -> bool:
        if self.topic != topic or not key or not begin <= self.store_timestamp <= end:
            return False
        return key == self.uniq_key or key in self.keys.split(" ")


@dataclass
class BuiltStore:
    root: Path
    segment_size: int
    slots: int
    entries: int
    messages: list[Stored] = field(default_factory=list)

    def expected(self, topic: str, key: str, begin: int, end: int) -> list[int]:
        return sorted(
            (m.phy for m in self.messages if m.matches(topic, key, begin, end)), reverse=True
        )


def build_store(root: Path, messages: list[dict], slots: int, entries: int,
                segment_size: int = 4 * 1024 * 1024, index_chunk: int = 17,
                cq_entries_per_file: int = 300_000) -> BuiltStore:
    """``messages``: dicts with topic, queue_id, keys, uniq_key, tags, store_timestamp, body."""
    layout = StoreLayout.of(root)
    layout.commitlog_dir.mkdir(parents=True)
    layout.index_dir.mkdir()
    built = BuiltStore(root, segment_size, slots, entries)
    seg = bytearray(segment_size)
    pos = 0
    queue_next: dict[tuple[str, int], int] = {}
    cq_units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    records = []
    for m in messages:
        props = {}
        if m.get("keys"):
            props[props_fmt.KEYS] = m["keys"]
        if m.get("uniq_key"):
            props[props_fmt.UNIQ_KEY] = m["uniq_key"]
        if m.get("tags"):
            props[props_fmt.TAGS] = m["tags"]
        q = (m["topic"], m["queue_id"])
        qoff = queue_next.get(q, 0)
        rec = commitlog.Record(
            topic=m["topic"], queue_id=m["queue_id"], body=m.get("body", b"x"),
            properties=props_fmt.encode(props), queue_offset=qoff, physical_offset=pos,
            store_timestamp=m["store_timestamp"], born_timestamp=m["store_timestamp"],
        )
        raw = commitlog.encode(rec)
        if pos + len(raw) + commitlog.BLANK_SIZE > segment_size:
            raise ValueError("segment too small for the test messages")
        seg[pos : pos + len(raw)] = raw
        rec = commitlog.decode(raw)
        records.append(rec)
        queue_next[q] = qoff + 1
        cq_units.setdefault(q, []).append((pos, len(raw), dispatch.from_record(rec).tags_code))
        built.messages.append(Stored(pos, m["topic"], m["queue_id"], qoff, m.get("keys", ""),
                                     m.get("uniq_key", ""), m.get("tags", ""),
                                     m["store_timestamp"]))
        pos += len(raw)
    (layout.commitlog_dir / segment_name(0)).write_bytes(bytes(seg))
    for (topic, qid), units in cq_units.items():
        qdir = layout.queue_dir(topic, qid)
        qdir.mkdir(parents=True)
        for i in range(0, len(units), cq_entries_per_file):
            part = units[i : i + cq_entries_per_file]
            data = cq.encode_many(*(np.array(c) for c in zip(*part, strict=True)))
            buf = data + bytes(cq.file_size(cq_entries_per_file) - len(data))
            (qdir / segment_name(i * cq.UNIT_SIZE)).write_bytes(buf)
    _write_index(layout, records, slots, entries, index_chunk)
    return built


def _write_index(layout: StoreLayout, records: list[commitlog.Record], slots: int,
                 entries: int, chunk: int) -> None:
    keys, phys, times = [], [], []
    for rec in records:
        for k in dispatch.index_keys(dispatch.from_record(rec)):
            keys.append(k)
            phys.append(rec.physical_offset)
            times.append(rec.store_timestamp)
    hashes = index_hashes(keys) if keys else np.zeros(0, dtype=np.int64)
    phys_a = np.array(phys, dtype=np.int64)
    times_a = np.array(times, dtype=np.int64)
    taken: set[str] = set()
    i = 0
    current: tuple[Path, IndexFile] | None = None
    while i < len(keys):
        if current is None or current[1].is_full:
            name = unique_index_file_name(int(times_a[i]), taken)
            taken.add(name)
            path = layout.index_dir / name
            path.write_bytes(bytes(file_size(slots, entries)))
            current = (path, IndexFile(bytearray(path.read_bytes()), slots, entries))
        path, index = current
        n = index.put_many(hashes[i : i + chunk], phys_a[i : i + chunk], times_a[i : i + chunk])
        path.write_bytes(bytes(index.buf))
        i += n


def random_messages(rng: random.Random, n: int, topics: list[str], vocab: list[str],
                    start_ms: int = 1_700_000_000_000) -> list[dict]:
    """Messages with random keys (duplicates, empty parts), UNIQ_KEYs and rising times."""
    gen = UniqKeyGenerator(pid=rng.randrange(1 << 16))
    t = start_ms
    out = []
    for _ in range(n):
        t += rng.choice((0, 0, 1, 7, 250, 999, 1000, 1001, 2500))
        ks = [rng.choice(vocab) for _ in range(rng.randrange(0, 4))]
        keys = (" " * rng.randrange(1, 3)).join(ks)
        out.append({
            "topic": rng.choice(topics),
            "queue_id": rng.randrange(2),
            "keys": keys,
            "uniq_key": gen.next(t) if rng.random() < 0.9 else "",
            "tags": rng.choice(("", "TagA", "TagB", "TagC")),
            "store_timestamp": t,
            "body": rng.randbytes(rng.randrange(0, 40)),
        })
    return out


def open_mmap(path: Path) -> mmap.mmap:
    with open(path, "r+b") as f:
        return mmap.mmap(f.fileno(), 0)


def copy_store(src: Path, dst: Path) -> Path:
    """Copy a (read-only) store and make the copy writable for the writer process."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for root, _dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return dst
