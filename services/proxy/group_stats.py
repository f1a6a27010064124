"""What consumer groups look like: per queue committed and max offset and messages in
flight (``rmqstore group describe``), and each group's lag (messages, and the age of the
oldest unsettled one) per topic for the metrics (``Consumption`` calls ``observe``)."""

from collections.abc import Callable
from typing import TYPE_CHECKING

from rmqstore.times import now_ms
from services.proxy import copies
from services.proxy.progress import Flight
from services.proxy.status import BusinessError

if TYPE_CHECKING:
    from services.proxy.consume import Consumption

# (group, topic, lag in messages, age of the oldest unsettled message in s, in flight)
Report = Callable[[str, str, int, float, int], None]


def describe(c: "Consumption", group: str) -> list[tuple[str, int, int, int, int, int]]:
    """(topic, queue, committed offset, max offset, in flight, offsets skipped since the
    start because retention deleted their messages) of each queue the group has consumed
    from."""
    now = now_ms()
    rows = []
    for (g, topic), queues in sorted(c.state.items()):
        if g != group:
            continue
        for q, p in sorted(queues.items()):
            inflight = sum(1 for f in p.inflight.values() if f.visible_at > now)
            skipped = c.skipped.get((group, topic, q), 0)
            rows.append((topic, q, p.committed, c.queues.max_offset(topic, q), inflight, skipped))
    return rows


def group_names(c: "Consumption") -> list[str]:
    return sorted(set(c.group_table.groups) | {g for g, _t in c.state})


async def oldest_age_s(c: "Consumption", group: str, topic: str) -> float:
    """Seconds since the oldest unsettled message of the group was stored (0: none)."""
    flights = []
    for q, p in c.state.get((group, topic), {}).items():
        units = c.queues.read(topic, q, p.committed, 1)
        if units:
            flights.append(Flight(0, 0, 0, units[0].phy_offset, units[0].size))
    if not flights:
        return 0.0
    records = await c.records(flights)
    oldest = min(r.store_timestamp for r in records)
    return max(0.0, (now_ms() - oldest) / 1000)


def shown_topic(c: "Consumption") -> dict[tuple[str, str], str]:
    """Each (group, retry topic) -> the topic whose messages it holds."""
    out = {}
    for group, topic in c.state:
        retry = copies.retry_topic(group, topic)
        if retry is not None and (group, retry) in c.state:
            out[(group, retry)] = topic
    return out


async def observe(c: "Consumption", report: Report) -> None:
    """Report lag, age of the oldest unsettled message and in-flight per (group, topic); a
    group's retry topic counts in the topic it retries (its lag is that topic's too)."""
    shown = shown_topic(c)
    totals: dict[tuple[str, str], list] = {}
    for group, topic in list(c.state):
        rows = [r for r in describe(c, group) if r[0] == topic]
        lag = sum(max(0, mx - done) for _t, _q, done, mx, _i, _s in rows)
        try:
            age = await oldest_age_s(c, group, topic) if lag else 0.0
        except BusinessError:
            age = 0.0
        t = totals.setdefault((group, shown.get((group, topic), topic)), [0, 0.0, 0])
        t[0] += lag
        t[1] = max(t[1], age)
        t[2] += sum(r[4] for r in rows)
    for (group, topic), (lag, age, inflight) in totals.items():
        report(group, topic, lag, age, inflight)
