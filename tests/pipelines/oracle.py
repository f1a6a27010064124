"""A one-record-at-a-time builder, the way a dispatcher thread builds files: the oracle the
parallel rebuild is checked against. It uses the same rmqstore format modules."""

from pathlib import Path

from rmqstore import dispatch
from rmqstore.formats import commitlog_segment, consume_queue
from rmqstore.formats.index_file import IndexFile, file_size
from rmqstore.formats.javahash import index_hash
from rmqstore.layout import unique_index_file_name
from rmqstore.segments import parse_segment_name, segment_name


def sequential_build(commitlog_dir: Path, epf: int, slots: int, entries: int,
                     ) -> dict[str, bytes]:
    """Relative path -> file bytes, for every consume-queue and index file."""
    queues: dict[tuple[str, int], bytearray] = {}
    index_files: list[tuple[str, bytearray]] = []
    current: IndexFile | None = None
    taken: set[str] = set()
    for seg in sorted(p for p in commitlog_dir.iterdir() if parse_segment_name(p.name) is not None):
        buf = seg.read_bytes()
        base = parse_segment_name(seg.name)
        for _, rec in commitlog_segment.iter_segment(buf, base_offset=base):
            d = dispatch.from_record(rec)
            if dispatch.goes_to_consume_queue(d.sys_flag):
                q = queues.setdefault((d.topic, d.queue_id), bytearray())
                at = d.queue_offset * consume_queue.UNIT_SIZE
                if len(q) < at + consume_queue.UNIT_SIZE:
                    q.extend(bytes(at + consume_queue.UNIT_SIZE - len(q)))
                q[at:at + consume_queue.UNIT_SIZE] = consume_queue.encode(
                    consume_queue.CqUnit(d.phy_offset, d.size, d.tags_code))
            for key in dispatch.index_keys(d):
                h = index_hash(key)
                if current is None or not current.put(h, d.phy_offset, d.store_timestamp):
                    name = unique_index_file_name(d.store_timestamp, taken)
                    taken.add(name)
                    buf_ix = bytearray(file_size(slots, entries))
                    index_files.append((name, buf_ix))
                    current = IndexFile(buf_ix, slots, entries)
                    assert current.put(h, d.phy_offset, d.store_timestamp)
    out: dict[str, bytes] = {}
    fsize = consume_queue.file_size(epf)
    for (topic, qid), data in queues.items():
        for start in range(0, len(data), fsize):
            chunk = bytes(data[start:start + fsize])
            out[f"consumequeue/{topic}/{qid}/{segment_name(start)}"] = chunk.ljust(fsize, b"\0")
    for name, data in index_files:
        out[f"index/{name}"] = bytes(data)
    return out


def read_tree(root: Path, subdirs=("consumequeue", "index")) -> dict[str, bytes]:
    out = {}
    for sub in subdirs:
        for p in sorted((root / sub).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out
