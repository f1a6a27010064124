"""Long polling on real consume-queue and commitlog files: receives waiting on an empty
topic get a message written after they began to wait (read from the commitlog file, not
the writer), and the topic's watcher ends once nobody waits."""

import asyncio

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name
from services.proxy.consume import ConsumeConfig, Consumption
from services.proxy.deliver import TagFilter

TOPIC = TopicConfig("T", read_queue_nums=2, write_queue_nums=2)
UNITS = 8  # per consume-queue segment


class NoWriter:
    """Stands in for the writer: every record must come from the files."""

    async def read_many(self, offsets):
        raise AssertionError(f"records {offsets} were asked of the writer")


def _preallocate(store) -> None:
    layout = StoreLayout.of(store)
    for q in range(TOPIC.read_queue_nums):
        qdir = layout.queue_dir("T", q)
        qdir.mkdir(parents=True)
        (qdir / segment_name(0)).write_bytes(bytes(UNITS * cq.UNIT_SIZE))
    layout.commitlog_dir.mkdir(parents=True)
    (layout.commitlog_dir / segment_name(0)).write_bytes(bytes(4096))


def _append(store, q: int, queue_offset: int, phy: int, body: bytes) -> None:
    """What the writer and the builder do: the record, then its consume-queue unit."""
    props = P.encode({P.UNIQ_KEY: body.decode(), P.TAGS: "t"})
    raw = commitlog.encode(commitlog.Record("T", q, body, props, queue_offset=queue_offset,
                                            physical_offset=phy))  # fmt: skip
    layout = StoreLayout.of(store)
    with open(layout.commitlog_dir / segment_name(0), "r+b") as f:
        f.seek(phy)
        f.write(raw)
    with open(layout.queue_dir("T", q) / segment_name(0), "r+b") as f:
        f.seek(queue_offset * cq.UNIT_SIZE)
        f.write(cq.encode(cq.CqUnit(phy, len(raw), 0)))


def test_waiting_receives_get_what_arrives_and_the_watcher_stops(tmp_path):
    async def run():
        _preallocate(tmp_path)
        c = Consumption(tmp_path, NoWriter(), ConsumeConfig())  # type: ignore[arg-type]
        everything = TagFilter("*")
        waiting = [
            asyncio.ensure_future(c.receive(g, TOPIC, everything, 32, 30_000, 60))
            for g in ("g1", "g2")
        ]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while c.arrivals._waiting.get("T", 0) < 2:  # both are waiting
            assert loop.time() < deadline, "the receives never waited"
            await asyncio.sleep(0.01)
        _append(tmp_path, 1, 0, 0, b"first")
        got = await asyncio.wait_for(asyncio.gather(*waiting), 30)
        for messages in got:  # each group gets it
            assert [m.body for m in messages] == [b"first"]
            assert messages[0].system_properties.queue_id == 1
        while "T" in c.arrivals._watchers:  # nobody waits: the watcher ends
            assert loop.time() < deadline, "the watcher did not stop"
            await asyncio.sleep(0.01)
        await c.close()

    asyncio.run(run())
