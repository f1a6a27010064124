"""``rmqstore inspect PATH``: decode one store file, or summarize a store directory.

Kinds (detected from the path, or forced with ``--kind``):

* ``commitlog``    a segment under ``commitlog/``: every record, the blank end-of-file marker,
                   where the data ends, and the first corrupt record (file offset and reason).
* ``consumequeue`` a file under ``consumequeue/<topic>/<queueId>/``: its 20-byte units with the
                   queue offsets that follow from the file name.
* ``index``        a file under ``index/``: header, slot occupancy and entries. The slot and entry
                   counts come from ``--index-slots``/``--index-entries`` or are inferred from the
                   file size (RocketMQ's defaults, or its 1 slot : 4 entries ratio).
* ``checkpoint``   the ``checkpoint`` file.
* ``store``        a store directory: segments, min/max offset, queues, index files, checkpoint,
                   delayed delivery per level and retention (``inspect_background``), the
                   broker's permission (read-only while drained), and the byte ranges
                   recovery cut and kept in ``rmqstore/quarantine/``.

Files are only ever opened read-only. Human-readable output by default, JSON lines with
``--json``. Exit status: 0, 1 when a commitlog segment holds a corrupt record, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import mmap
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore import broker_perm, quarantine, times
from rmqstore.dispatch import tags_code
from rmqstore.errors import CorruptRecordError, InvalidArgumentError, StoreError
from rmqstore.formats import checkpoint as ck
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import index_file as ix
from rmqstore.formats.index_file import infer_shape as infer_index_shape
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.layout import StoreLayout, is_index_file_name
from rmqstore.segments import parse_segment_name
from services.cli.errors import USAGE, CliError
from services.cli.inspect_background import delivery_rows, retention_row

KINDS = ("commitlog", "consumequeue", "index", "checkpoint", "store")
Row = dict[str, Any]


# -- reading -------------------------------------------------------------------------------
@contextmanager
def read_only(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The whole file as a read-only buffer (mmap; empty files give b"")."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield b""
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield m
        finally:
            # a numpy view may still exist: the mmap then closes when the view goes
            with suppress(BufferError):
                m.close()


def detect_kind(path: Path) -> str:
    if path.is_dir():
        if any((path / d).is_dir() for d in ("commitlog", "consumequeue", "index")):
            return "store"
        raise InvalidArgumentError(
            f"{path} is a directory but not a store (no commitlog/, consumequeue/ or index/)"
        )
    if path.name == "checkpoint":
        return "checkpoint"
    parents = [p.name for p in path.parents]
    if parents[:1] == ["commitlog"]:
        return "commitlog"
    if parents[:1] == ["index"]:
        return "index"
    if len(parents) >= 3 and parents[2] == "consumequeue":
        return "consumequeue"
    raise InvalidArgumentError(
        f"cannot tell what kind of file {path} is from its path; pass --kind "
        f"({', '.join(KINDS[:4])})"
    )


def _time(ms: int) -> str:
    """A file's time in UTC (``...Z``); the number itself when no date can show it (a
    damaged field may hold any 64-bit value)."""
    try:
        return times.format_time(ms)
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _segment_base(path: Path) -> int:
    base = parse_segment_name(path.name)
    return 0 if base is None else base


# -- commitlog -----------------------------------------------------------------------------
def record_row(r: cl.Record, base: int, pos: int) -> Row:
    p = r.property_map
    return {
        "type": "record", "phyOffset": base + pos, "filePos": pos, "size": r.total_size,
        "magic": f"{r.magic & 0xFFFFFFFF:#010x}", "topic": r.topic, "queueId": r.queue_id,
        "queueOffset": r.queue_offset, "physicalOffsetField": r.physical_offset,
        "sysFlag": r.sys_flag, "flag": r.flag, "bornTimestamp": r.born_timestamp,
        "bornHost": str(r.born_host), "storeTimestamp": r.store_timestamp,
        "storeHost": str(r.store_host), "reconsumeTimes": r.reconsume_times,
        "preparedTransactionOffset": r.prepared_transaction_offset, "bodyCRC": r.body_crc,
        "bodyLength": len(r.body),
        "msgId": offset_msg_id(r.store_host.ip, r.store_host.port, r.physical_offset),
        "tags": r.tags, "keys": r.keys, "uniqKey": r.uniq_key,
        "tagsCode": tags_code(r.topic, p, r.store_timestamp), "properties": p,
    }


def inspect_commitlog(buf, path: Path, limit: int | None) -> Iterator[Row]:
    base = _segment_base(path)
    count, end = 0, 0
    error: CorruptRecordError | None = None
    try:
        for pos, rec in commitlog_segment.iter_segment(buf, base_offset=base):
            if limit is None or count < limit:
                yield record_row(rec, base, pos)
            count += 1
            end = pos + rec.total_size
    except CorruptRecordError as e:
        error = e
    reason = "end of file"
    blank = None
    if error is not None:
        reason = "corrupt"
        at = error.offset - base if error.offset >= 0 else end
        yield {"type": "corrupt", "phyOffset": base + at, "filePos": at, "reason": str(error)}
    elif end + cl.BLANK_SIZE <= len(buf):
        size, magic = cl.BLANK.unpack_from(buf, end)
        if magic == cl.BLANK_MAGIC:
            reason = "blank"
            blank = size
            yield {"type": "blank", "phyOffset": base + end, "filePos": end,
                   "declaredSize": size, "fillsFile": end + size == len(buf)}
        else:
            reason = "zeros"
    elif end < len(buf):
        reason = "fewer than 8 bytes left"
    yield {
        "type": "summary", "kind": "commitlog", "file": str(path), "fileSize": len(buf),
        "baseOffset": base, "records": count, "dataEnd": base + end, "dataEndFilePos": end,
        "endReason": reason, "blankDeclaredSize": blank, "shown": min(count, limit)
        if limit is not None else count,
    }


# -- consume queue -------------------------------------------------------------------------
def inspect_consume_queue(buf, path: Path, limit: int | None) -> Iterator[Row]:
    start = _segment_base(path)
    if start % cq.UNIT_SIZE:
        raise InvalidArgumentError(
            f"consume-queue file name {path.name} is not a multiple of {cq.UNIT_SIZE} bytes"
        )
    first = start // cq.UNIT_SIZE
    arr = cq.units(buf)
    valid = cq.valid_count(buf)
    for i in range(valid if limit is None else min(valid, limit)):
        u = arr[i]
        row = {"type": "unit", "queueOffset": first + i, "phyOffset": int(u["offset"]),
               "size": int(u["size"]), "tagsCode": int(u["tags_code"])}
        if row["phyOffset"] == 0 and row["size"] == 0x7FFFFFFF and row["tagsCode"] == 0:
            row["preBlank"] = True
        yield row
    tail = bytes(buf[valid * cq.UNIT_SIZE :])
    yield {
        "type": "summary", "kind": "consumequeue", "file": str(path),
        "topic": path.parent.parent.name, "queueId": path.parent.name, "fileSize": len(buf),
        "capacity": len(arr), "firstQueueOffset": first, "units": valid,
        "nextQueueOffset": first + valid,
        "endReason": "end of file" if not tail else ("zeros" if not any(tail)
                                                     else "invalid unit"),
        "trailingBytes": len(buf) % cq.UNIT_SIZE,
    }


# -- index ---------------------------------------------------------------------------------
def index_header_row(f: ix.IndexFile, path: Path) -> Row:
    h = f.header
    return {
        "type": "header", "kind": "index", "file": str(path), "slots": f.slots,
        "entriesCapacity": f.entries, "beginTimestamp": h.begin_timestamp,
        "endTimestamp": h.end_timestamp, "begin": _time(h.begin_timestamp),
        "end": _time(h.end_timestamp), "beginPhyOffset": h.begin_phy_offset,
        "endPhyOffset": h.end_phy_offset, "hashSlotCount": h.hash_slot_count,
        "indexCount": h.index_count, "entries": h.entries, "full": f.is_full,
    }


def inspect_index(buf, path: Path, limit: int | None, slots: int | None,
                  entries: int | None) -> Iterator[Row]:
    s, e = infer_index_shape(len(buf), slots, entries, str(path))
    f = ix.IndexFile(buf, s, e)
    count = f.header.index_count
    if count > e:
        raise InvalidArgumentError(
            f"{path}: header index count {count} exceeds the {e} entries of the file; "
            "are --index-slots/--index-entries right?"
        )
    yield index_header_row(f, path)
    slot_values = np.frombuffer(buf, dtype=">i4", count=s, offset=ix.HEADER_SIZE)
    used = slot_values[(slot_values > 0) & (slot_values <= max(count, 0))]
    n = max(count - 1, 0)
    table = np.frombuffer(buf, dtype=ix.ENTRY_DTYPE, count=n + 1,
                          offset=ix.HEADER_SIZE + ix.SLOT_SIZE * s)[1:]
    yield {
        "type": "slots", "slots": s, "usedSlots": int(len(used)),
        "occupancy": round(len(used) / s, 6) if s else 0.0,
        "badSlotPointers": int(np.count_nonzero(slot_values > max(count, 0))
                               + np.count_nonzero(slot_values < 0)),
        "entries": n,
    }
    shown = n if limit is None else min(n, limit)
    begin = f.header.begin_timestamp
    for i, (kh, phy, diff, prev) in enumerate(table[:shown].tolist()):
        yield {"type": "entry", "number": i + 1, "keyHash": kh, "slot": kh % s if s else 0,
               "phyOffset": phy, "timeDiff": diff, "time": begin + diff * 1000,
               "prev": prev}


# -- checkpoint ----------------------------------------------------------------------------
def checkpoint_row(buf, path: Path) -> Row:
    if len(buf) < ck.FIELDS.size:
        raise InvalidArgumentError(
            f"checkpoint {path} is {len(buf)} bytes, at least {ck.FIELDS.size} needed"
        )
    cp = ck.decode(buf)
    return {
        "type": "checkpoint", "file": str(path), "fileSize": len(buf),
        "physicMsgTimestamp": cp.physic_msg_timestamp,
        "logicsMsgTimestamp": cp.logics_msg_timestamp,
        "indexMsgTimestamp": cp.index_msg_timestamp,
        "minTimestamp": cp.min_timestamp, "minTimestampIndex": cp.min_timestamp_index,
        "physic": _time(cp.physic_msg_timestamp), "logics": _time(cp.logics_msg_timestamp),
        "index": _time(cp.index_msg_timestamp),
    }


# -- store directory -----------------------------------------------------------------------
def _segments(d: Path) -> list[tuple[int, Path]]:
    if not d.is_dir():
        return []
    out = [(parse_segment_name(p.name), p) for p in d.iterdir() if p.is_file()]
    return sorted((b, p) for b, p in out if b is not None)


def inspect_store(root: Path, slots: int | None, entries: int | None) -> Iterator[Row]:
    segs = _segments(root / "commitlog")
    clog: Row = {"type": "commitlog", "segments": [p.name for _, p in segs],
                "segmentSizes": sorted({p.stat().st_size for _, p in segs}),
                "minOffset": None, "maxOffset": None, "corrupt": None}
    if segs:
        clog["minOffset"] = segs[0][0]
        # the data ends in the last segment holding any: walk back over empty ones
        for base, p in reversed(segs):
            with read_only(p) as buf:
                end, blank, err = commitlog_segment.scan_end(buf, base_offset=base)
                size = len(buf)
            if err is not None:
                clog["corrupt"] = {"phyOffset": base + end, "reason": str(err)}
            if end > 0 or blank is not None or base == segs[0][0]:
                clog["maxOffset"] = base + (size if blank is not None else end)
                break
    yield clog
    cq_root = root / "consumequeue"
    topics = sorted(p for p in cq_root.iterdir() if p.is_dir()) if cq_root.is_dir() else []
    for topic in topics:
        for qdir in sorted((q for q in topic.iterdir() if q.is_dir() and q.name.isdigit()),
                           key=lambda q: int(q.name)):
            files = _segments(qdir)
            if not files:
                continue
            first_start, first_path = files[0]
            last_start, last_path = files[-1]
            with read_only(last_path) as buf:
                last_valid = cq.valid_count(buf)
            with read_only(first_path) as buf:
                first_offsets = cq.units(buf)["offset"][: cq.valid_count(buf)].copy()
            # units pointing below the commitlog's first segment are gone (correctMinOffset)
            skip = int(np.count_nonzero(first_offsets < (clog["minOffset"] or 0)))
            yield {"type": "queue", "topic": topic.name, "queueId": int(qdir.name),
                   "files": len(files), "minOffset": first_start // cq.UNIT_SIZE + skip,
                   "maxOffset": (last_start // cq.UNIT_SIZE) + last_valid}
    idx = root / "index"
    names = sorted(p for p in idx.iterdir() if is_index_file_name(p.name)) if idx.is_dir() else []
    for p in names:
        with read_only(p) as buf:
            size = len(buf)
            try:
                s, e = infer_index_shape(size, slots, entries, str(p))
                h = index_header_row(ix.IndexFile(buf, s, e), p)
            except StoreError as err:
                yield {"type": "indexFile", "name": p.name, "size": size, "error": str(err)}
                continue
        h.update(type="indexFile", name=p.name, size=size)
        del h["kind"]
        yield h
    if (root / "checkpoint").is_file():
        with read_only(root / "checkpoint") as buf:
            yield checkpoint_row(buf, root / "checkpoint")
    yield from delivery_rows(root)
    yield retention_row(root)
    yield permission_row(root)
    yield {"type": "markers", "abort": (root / "abort").exists(),
           "lock": (root / "lock").exists()}
    for r in quarantine.ranges(StoreLayout.of(root)):  # bytes recovery cut and kept aside
        yield {"type": "quarantined", "phyOffset": r.offset, "end": r.end, "size": r.size,
               "segment": r.segment, "file": str(quarantine.path_of(StoreLayout.of(root), r)),
               "reason": r.reason, "cutAt": _time(r.at)}


def permission_row(root: Path) -> Row:
    """The broker's permission (``config/brokerPermission.json``; none: read-write)."""
    try:
        perm = broker_perm.PermissionFile(root, read_only=True).perm
    except (ValueError, OSError) as e:
        return {"type": "broker", "permission": None, "error": str(e)}
    return {"type": "broker", "permission": perm, "state": broker_perm.NAMES[perm]}


# -- output --------------------------------------------------------------------------------
def human(row: Row) -> str:
    t = row["type"]
    if t == "record":
        return (
            f"record @{row['phyOffset']} size={row['size']} {row['topic']}/{row['queueId']}"
            f" qo={row['queueOffset']} sys={row['sysFlag']:#x} store={_time(row['storeTimestamp'])}"
            f" born={row['bornHost']} at={row['storeHost']} body={row['bodyLength']}B"
            f" crc={row['bodyCRC']} tags={row['tags']!r} keys={row['keys']!r}"
            f" uniq={row['uniqKey'] or '-'} msgId={row['msgId']}"
        )
    if t == "unit":
        extra = " (pre-blank)" if row.get("preBlank") else ""
        return (f"unit qo={row['queueOffset']} phy={row['phyOffset']} size={row['size']}"
                f" tagsCode={row['tagsCode']}{extra}")
    if t == "entry":
        return (f"entry #{row['number']} hash={row['keyHash']} slot={row['slot']}"
                f" phy={row['phyOffset']} time={_time(row['time'])} (+{row['timeDiff']}s)"
                f" prev={row['prev']}")
    if t == "corrupt":
        return f"CORRUPT at {row['phyOffset']} (file position {row['filePos']}): {row['reason']}"
    if t == "blank":
        return (f"blank end-of-file record at {row['phyOffset']} (file position "
                f"{row['filePos']}), declares {row['declaredSize']} bytes")
    if t == "quarantined":
        return (f"QUARANTINED [{row['phyOffset']}, {row['end']}) {row['size']} bytes of segment "
                f"{row['segment']}, cut {row['cutAt']}: {row['reason']} -> {row['file']}")
    if t == "queue":
        return (f"queue {row['topic']}/{row['queueId']}: files={row['files']}"
                f" min={row['minOffset']} max={row['maxOffset']}")
    head = t if "name" not in row else f"{t} {row['name']}"
    body = ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("type", "name"))
    return f"{head}: {body}"


def rows_for(args: argparse.Namespace) -> Iterator[Row]:
    path = Path(args.path)
    if not path.exists():
        raise InvalidArgumentError(f"{path} does not exist")
    kind = args.kind or detect_kind(path)
    if kind == "store":
        if not path.is_dir():
            raise InvalidArgumentError(f"--kind store needs a directory, {path} is a file")
        yield from inspect_store(path, args.index_slots, args.index_entries)
        return
    if path.is_dir():
        raise InvalidArgumentError(f"{path} is a directory; --kind {kind} needs a file")
    with read_only(path) as buf:
        if kind == "commitlog":
            yield from inspect_commitlog(buf, path, args.limit)
        elif kind == "consumequeue":
            yield from inspect_consume_queue(buf, path, args.limit)
        elif kind == "index":
            yield from inspect_index(buf, path, args.limit, args.index_slots,
                                     args.index_entries)
        else:
            yield checkpoint_row(buf, path)


def run(args: argparse.Namespace) -> int:
    status = 0
    try:
        for row in rows_for(args):
            if row["type"] == "corrupt" or (row["type"] == "commitlog" and row["corrupt"]):
                status = 1
            print(json.dumps(row) if args.json else human(row))
    except BrokenPipeError:
        raise
    except (StoreError, OSError) as e:
        raise CliError(str(e), USAGE) from None
    return status


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return n


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect", help="decode a store file or summarize a store directory",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="commitlog segment, consume-queue file, index file, "
                                "checkpoint, or a store directory")
    p.add_argument("--kind", choices=KINDS, help="override the kind detected from the path")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.add_argument("--limit", type=_positive, default=None,
                   help="show at most N records / units / entries (summaries cover all)")
    p.add_argument("--index-slots", type=_positive, default=None, help="hash slots per index file")
    p.add_argument("--index-entries", type=_positive, default=None,
                   help="entries per index file")
    p.set_defaults(run=run)
