"""``/groups`` and ``/groups/<group>``: consumer groups of the proxy (RocketMQ 5 protocol
service), through its ``ConsumerGroups`` API.

``/groups/<group>`` is the CLI's ``group describe --json`` document
(:mod:`rmqstore.group_json`) with one field added per queue: ``oldestUnconsumedStoreTimestamp``,
the store time (epoch ms) of the message at the committed offset, read from the query service
(null when nothing is unconsumed or that message is gone). ``/groups`` lists the groups as
``group list --json`` does, each with its total ``lag`` and ``inFlight``.
"""

import asyncio
from typing import Any

from aiohttp import web

from rmqstore.group_json import describe_json, group_json
from rmqstore.times import now_ms
from rmqstore.v1 import groups_pb2
from services.console import params
from services.console.backend import Backend, BackendError
from services.console.views import BACKEND, Answer

MAX_GROUP = 255  # RocketMQ's longest group name
CALLS_AT_ONCE = 16  # describes (for /groups) or pulls (for a group) in flight at once


async def groups(request: web.Request) -> Answer:
    backend = request.app[BACKEND]
    listed = (await backend.list_groups()).groups
    gate = asyncio.Semaphore(CALLS_AT_ONCE)

    async def row(g: groups_pb2.GroupConfig) -> dict[str, Any] | None:
        try:
            async with gate:
                queues = (await backend.describe_group(g.name)).queues
        except BackendError as e:
            if e.status == 404:  # deleted between the list and its description
                return None
            raise
        return {**group_json(g), "lag": sum(q.lag for q in queues),
                "inFlight": sum(q.in_flight for q in queues), "queues": len(queues)}

    rows = await asyncio.gather(*(row(g) for g in listed))
    return Answer({"groups": [r for r in rows if r is not None]}, "groups.html", {})


async def _oldest(backend: Backend, q: groups_pb2.QueueProgress,
                  gate: asyncio.Semaphore) -> int | None:
    if q.lag <= 0:
        return None
    async with gate:
        try:
            r = await backend.pull(q.topic, q.queue_id, q.committed_offset, 1)
        except BackendError:
            return None  # the group's topic may be unknown to the query service
    first = r.messages[0] if r.messages else None
    return first.store_timestamp if first is not None else None


async def group(request: web.Request) -> Answer:
    name = request.match_info["group"].strip()
    if not name or len(name) > MAX_GROUP:
        raise params.ParamError(f"a group name of 1 to {MAX_GROUP} characters is required")
    backend = request.app[BACKEND]
    r = await backend.describe_group(name)
    doc = describe_json(r.group, r.queues, r.dead_letters)
    gate = asyncio.Semaphore(CALLS_AT_ONCE)
    oldest = await asyncio.gather(*(_oldest(backend, q, gate) for q in r.queues))
    for q_doc, ms in zip(doc["queues"], oldest, strict=True):
        q_doc["oldestUnconsumedStoreTimestamp"] = ms
    totals = {"lag": sum(q.lag for q in r.queues), "inFlight": sum(q.in_flight for q in r.queues)}
    return Answer(doc, "group.html", {"totals": totals, "now": now_ms()})
