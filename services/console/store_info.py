"""What the console reads of the store directory itself (read-only): the topics and queues
under ``consumequeue/``, commitlog segments, index files and their fill, builders' progress,
and disk use. Offsets and times come from the services over gRPC.
"""

import asyncio
import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from rmqstore.formats.index_file import HEADER, HEADER_SIZE, IndexHeader
from rmqstore.layout import StoreLayout, is_index_file_name
from rmqstore.segments import parse_segment_name
from rmqstore.v1 import commitlog_pb2
from services.console.backend import Backend, BackendError

BUILDERS = ("consume-queue", "index")  # the builders that ack the writer's dispatch stream
LISTING_CONCURRENCY = 16


def topic_queues(layout: StoreLayout) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, queue, _dir in layout.queues():
        out.setdefault(topic, []).append(queue)
    return out


async def queue_rows(backend: Backend, topic: str, queues: list[int]) -> list[dict[str, Any]]:
    """Per queue: min/max offsets and the store time of the newest message (None if empty)."""
    gate = asyncio.Semaphore(LISTING_CONCURRENCY)

    async def row(q: int) -> dict[str, Any]:
        async with gate:
            lo, hi = await backend.offsets(topic, q)
            latest = None
            if hi > lo:
                resp = await backend.pull(topic, q, hi - 1, 1)
                if resp.messages:
                    latest = resp.messages[0].store_timestamp
        return {"queueId": q, "minOffset": lo, "maxOffset": hi, "messages": hi - lo,
                "latestStoreTimestamp": latest}

    return list(await asyncio.gather(*(row(q) for q in sorted(queues))))


async def topics_doc(backend: Backend, layout: StoreLayout) -> dict[str, Any]:
    topics = []
    for topic, queues in sorted(topic_queues(layout).items()):
        rows = await queue_rows(backend, topic, queues)
        latest = [r["latestStoreTimestamp"] for r in rows if r["latestStoreTimestamp"]]
        topics.append({"topic": topic, "queues": rows,
                       "messages": sum(r["messages"] for r in rows),
                       "latestStoreTimestamp": max(latest) if latest else None})
    return {"count": len(topics), "topics": topics}


def _disk_bytes(path: Path) -> tuple[int, int]:
    """(files, bytes on disk) under ``path`` (allocated blocks: mapped files are sparse)."""
    files = used = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except OSError:
                continue
            files += 1
            used += st.st_blocks * 512
    return files, used


def _index_files(layout: StoreLayout, entries: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not layout.index_dir.is_dir():
        return rows
    for path in sorted(layout.index_dir.iterdir()):
        if not is_index_file_name(path.name):
            continue
        try:
            with open(path, "rb") as f:
                raw = f.read(HEADER_SIZE)
        except OSError:
            continue
        if len(raw) < HEADER_SIZE:
            continue
        h = IndexHeader(*HEADER.unpack_from(raw))
        capacity = max(entries - 1, 1)  # entry 0 is never used
        rows.append({"name": path.name, "beginTimestamp": h.begin_timestamp,
                     "endTimestamp": h.end_timestamp, "entries": h.entries,
                     "capacity": capacity, "fill": round(h.entries / capacity, 4)})
    return rows


def _progress(layout: StoreLayout, builder: str) -> int | None:
    try:
        return int(json.loads(layout.progress(builder).read_text())["offset"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _segments(layout: StoreLayout) -> list[dict[str, Any]]:
    rows = []
    if layout.commitlog_dir.is_dir():
        for path in sorted(layout.commitlog_dir.iterdir()):
            start = parse_segment_name(path.name)
            if start is not None:
                rows.append({"name": path.name, "startOffset": start,
                             "size": path.stat().st_size})
    return rows


def _local(layout: StoreLayout, index_entries: int) -> dict[str, Any]:
    disk = shutil.disk_usage(layout.root)
    dirs = {}
    for name, path in (("commitlog", layout.commitlog_dir),
                       ("consumequeue", layout.consumequeue_dir), ("index", layout.index_dir)):
        files, used = _disk_bytes(path)
        dirs[name] = {"files": files, "bytes": used}
    return {
        "segments": _segments(layout),
        "indexFiles": _index_files(layout, index_entries),
        "progress": {b: _progress(layout, b) for b in BUILDERS},
        "disk": {"total": disk.total, "used": disk.used, "free": disk.free, "store": dirs},
    }


async def store_doc(backend: Backend, layout: StoreLayout, index_entries: int
                    ) -> dict[str, Any]:
    local = await asyncio.to_thread(_local, layout, index_entries)
    commitlog: dict[str, Any] | None = None
    error = ""
    status = None
    try:
        offs = await backend.commitlog()
    except BackendError as e:
        offs, error = None, str(e)
    if offs is not None:
        with contextlib.suppress(BackendError):  # the offsets are worth showing without it
            status = await backend.writer_status()
    if offs is not None:
        commitlog = {"minOffset": offs.min_offset, "maxOffset": offs.max_offset,
                     "flushedOffset": offs.flushed_offset, "segmentSize": offs.segment_size,
                     "storeHost": offs.store_host, "epoch": offs.epoch}
    builders = []
    for name, done in local.pop("progress").items():
        lag = None
        if done is not None and commitlog is not None:
            lag = max(commitlog["maxOffset"] - done, 0)
        builders.append({"builder": name, "durableOffset": done, "lagBytes": lag})
    delivery = _delivery(status)
    return {"commitlog": commitlog, "writerError": error, **local, "builders": builders,
            "delivery": delivery,
            "delayedPending": None if delivery is None else delivery["pending"],
            "replication": _replication(status)}


def _replication(status: commitlog_pb2.WriterStatus | None) -> dict[str, Any] | None:
    """The writer's role and its connected slaves; None without a writer or its status."""
    if status is None or not status.replication.role:
        return None
    r = status.replication
    slaves = [{"address": s.address, "ackedOffset": s.acked_offset, "lagBytes": s.lag_bytes,
               "connectedSeconds": round(s.connected_seconds, 3)} for s in r.slaves]  # fmt: skip
    return {"role": r.role, "haPort": r.ha_port or None, "ackedOffset": r.acked_offset,
            "inSync": r.in_sync, "minSyncReplicas": r.min_sync_replicas, "slaves": slaves}


def _delivery(status: commitlog_pb2.WriterStatus | None) -> dict[str, Any] | None:
    """Delayed delivery as the writer reports it; None without a writer or with delivery off
    (``--no-delivery``, or a read-only store)."""
    if status is None or not status.delivery.enabled:
        return None
    d = status.delivery
    levels = [{"level": lv.level, "delayMs": lv.delay_ms, "pending": lv.pending,
               "nextDeliveryMs": lv.next_delivery_ms or None, "delivered": lv.delivered}
              for lv in d.levels]  # fmt: skip
    return {"pending": sum(lv["pending"] for lv in levels), "lagMs": d.lag_ms,
            "delivered": d.delivered, "skipped": d.skipped, "levels": levels}
