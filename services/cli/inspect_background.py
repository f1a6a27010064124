"""``rmqstore inspect STORE``: what the writer's background services left on disk.

* ``delivery`` rows, one per delay level with a schedule queue: the progress RocketMQ's
  ``config/delayOffset.json`` records, the messages still waiting and the next delivery time.
* a ``retention`` row: bytes kept in commitlog segments and the age of the oldest one.

(A running writer reports the same live, with delivery lag and deletions: ``GetStatus``.)
"""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import delay_offset
from rmqstore.layout import SCHEDULE_TOPIC, StoreLayout
from rmqstore.schedule_queue import ScheduleQueue
from rmqstore.segments import parse_segment_name

Row = dict[str, Any]


def delivery_rows(root: Path) -> Iterator[Row]:
    layout = StoreLayout.of(root)
    table: dict[int, int] = {}
    error = ""
    if layout.delay_offset.is_file():
        try:
            table = delay_offset.decode(layout.delay_offset.read_text(encoding="utf-8"))
        except (CorruptRecordError, UnicodeDecodeError) as e:
            error = str(e)
    sched = layout.consumequeue_dir / SCHEDULE_TOPIC
    levels = sorted(int(p.name) + 1 for p in sched.iterdir() if p.name.isdigit()) if (
        sched.is_dir()) else []  # fmt: skip
    for level in sorted(set(levels) | set(table)):
        queue = ScheduleQueue(layout.schedule_queue_dir(level))
        try:
            low, end = queue.min_offset(), queue.end()
            offset = max(table.get(level, 0), low)
            head = queue.read(offset, 1)
        finally:
            queue.close()
        row: Row = {"type": "delivery", "level": level, "offset": table.get(level, 0),
                    "queueMin": low, "queueMax": end, "pending": max(end - offset, 0),
                    "nextDeliveryMs": head[0][2] if head else None}  # fmt: skip
        if error:
            row["error"] = error
        yield row


def retention_row(root: Path, now: float | None = None) -> Row:
    d = root / "commitlog"
    segs = sorted(
        (p for p in d.iterdir() if parse_segment_name(p.name) is not None), key=lambda p: p.name
    ) if d.is_dir() else []  # fmt: skip
    age = (now or time.time()) - segs[0].stat().st_mtime if segs else 0.0
    return {"type": "retention", "segments": len(segs),
            "retainedBytes": sum(p.stat().st_size for p in segs),
            "oldestSegment": segs[0].name if segs else None,
            "oldestSegmentAgeSeconds": round(max(age, 0.0), 3)}  # fmt: skip
