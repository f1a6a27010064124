"""Browsing a topic or one of its queues by offset or by time, newest or oldest first.

Pages of a topic merge its queues in store-time order (ties by queue, then offset), so the
order is total and the next page starts exactly where this one stopped. The cursor holds, per
queue, where the next page starts: the next offset to read (oldest first) or the offset below
which to read (newest first); it is URL-safe base64 of ``queue:position`` pairs.

A time window (``begin``..``end``) is at most ``max_window_ms`` wide: no page walks the store
without a key or an id.
"""

import asyncio
import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from rmqstore.message_json import message_json
from rmqstore.v1 import common_pb2
from services.console.backend import Backend
from services.console.params import ParamError

PULL_BATCH = 32  # the query service answers a pull with at most this many messages


@dataclass
class BrowseRequest:
    topic: str
    queues: list[int]  # the queues browsed (one, or all of the topic's)
    newest_first: bool
    max_messages: int
    begin: int | None = None  # window, epoch ms, inclusive
    end: int | None = None
    offset: int | None = None  # start offset (one queue only)
    cursor: str = ""


@dataclass
class QueueState:
    queue: int
    min_offset: int
    max_offset: int
    position: int  # next offset to read (oldest first) / read below this (newest first)
    done: bool = False


@dataclass
class BrowsePage:
    messages: list[common_pb2.StoredMessage] = field(default_factory=list)
    cursor: str = ""  # empty: nothing further in this direction
    window_ended: bool = False  # a queue stopped at the end of the time window


def encode_cursor(positions: dict[int, int]) -> str:
    text = ",".join(f"{q}:{p}" for q, p in sorted(positions.items()))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, queues: list[int]) -> dict[int, int]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        pairs = [p.split(":") for p in text.split(",") if p]
        positions = {int(q): int(p) for q, p in pairs}
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ParamError("cursor is malformed") from None
    if not set(positions) <= set(queues) or any(p < 0 for p in positions.values()):
        raise ParamError("cursor belongs to another topic or queue")
    return positions


async def _start(backend: Backend, req: BrowseRequest, queue: int,
                 positions: dict[int, int] | None) -> QueueState:
    lo, hi = await backend.offsets(req.topic, queue)
    if positions is not None:
        pos = positions.get(queue, lo if req.newest_first else hi)
    elif req.offset is not None:
        pos = req.offset + 1 if req.newest_first else req.offset
    elif req.newest_first and req.end is not None:
        pos = await backend.offset_by_time(req.topic, queue, req.end, upper=True) + 1
    elif not req.newest_first and req.begin is not None:
        pos = await backend.offset_by_time(req.topic, queue, req.begin, upper=False)
    else:
        pos = hi if req.newest_first else lo
    pos = min(max(pos, lo), hi)
    done = pos <= lo if req.newest_first else pos >= hi
    return QueueState(queue, lo, hi, pos, done)


async def _read(backend: Backend, req: BrowseRequest, st: QueueState
                ) -> list[common_pb2.StoredMessage]:
    """Up to ``max_messages`` of the queue next in browse order from its position."""
    want = req.max_messages
    if req.newest_first:
        start, stop = max(st.min_offset, st.position - want), st.position
    else:
        start, stop = st.position, min(st.max_offset, st.position + want)
    out: list[common_pb2.StoredMessage] = []
    at = start
    while at < stop:
        resp = await backend.pull(req.topic, st.queue, at, min(PULL_BATCH, stop - at))
        got = [m for m in resp.messages if m.queue_offset < stop]
        out.extend(got)
        if not got or resp.next_offset <= at:
            break
        at = resp.next_offset
    if req.newest_first:
        out.reverse()
    return out


def _in_window(req: BrowseRequest, m: common_pb2.StoredMessage) -> bool:
    return ((req.begin is None or m.store_timestamp >= req.begin)
            and (req.end is None or m.store_timestamp <= req.end))


async def browse(backend: Backend, req: BrowseRequest) -> BrowsePage:
    positions = decode_cursor(req.cursor, req.queues) if req.cursor else None
    states = await asyncio.gather(*(_start(backend, req, q, positions) for q in req.queues))
    live = [s for s in states if not s.done]
    batches = await asyncio.gather(*(_read(backend, req, s) for s in live))
    page = BrowsePage()
    candidates: list[tuple[tuple[int, int, int], QueueState, common_pb2.StoredMessage]] = []
    for st, batch in zip(live, batches, strict=True):
        for m in batch:
            if not _in_window(req, m):
                page.window_ended = True
                st.done = True
                break
            candidates.append(((m.store_timestamp, st.queue, m.queue_offset), st, m))
        else:
            if not batch:
                st.done = True
    candidates.sort(key=lambda c: c[0], reverse=req.newest_first)
    taken = candidates[:req.max_messages]
    for _key, st, m in taken:
        st.position = m.queue_offset if req.newest_first else m.queue_offset + 1
    page.messages = [m for _k, _s, m in taken]
    more = len(candidates) > len(taken) or any(
        not s.done
        and (s.position > s.min_offset if req.newest_first else s.position < s.max_offset)
        for s in live)
    if more:
        page.cursor = encode_cursor({s.queue: s.position for s in states})
    return page


def page_doc(req: BrowseRequest, page: BrowsePage) -> dict[str, Any]:
    return {
        "topic": req.topic,
        "order": "newest" if req.newest_first else "oldest",
        "count": len(page.messages),
        "cursor": page.cursor,
        "windowEnded": page.window_ended,
        "messages": [message_json(m) for m in page.messages],
    }
