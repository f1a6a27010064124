"""Consumption's bookkeeping on real consume-queue files, with the records served from
memory in place of the writer: redelivery with attempt + 1, a stale receipt handle, and a
PushConsumer's messages kept invisible while it is connected."""

import asyncio

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name
from services.proxy.consume import ConsumeConfig, Consumption
from services.proxy.deliver import TagFilter
from services.proxy.status import BusinessError

TOPIC = TopicConfig("T", read_queue_nums=1, write_queue_nums=1)


class Records:
    """The writer's ReadRecords over records kept in memory (offset -> bytes)."""

    def __init__(self) -> None:
        self.by_offset: dict[int, bytes] = {}

    async def read_many(self, offsets):
        return [self.by_offset[o] for o in offsets]


def _store(tmp_path, n: int) -> Records:
    records = Records()
    units = []
    for i in range(n):
        props = P.encode({P.UNIQ_KEY: f"ID{i}", P.TAGS: "t"})
        raw = commitlog.encode(commitlog.Record("T", 0, f"m{i}".encode(), props, queue_offset=i,
                                                physical_offset=1000 * i))  # fmt: skip
        records.by_offset[1000 * i] = raw
        units.append(cq.encode(cq.CqUnit(1000 * i, len(raw), 0)))
    qdir = StoreLayout.of(tmp_path).queue_dir("T", 0)
    qdir.mkdir(parents=True)
    (qdir / segment_name(0)).write_bytes(b"".join(units) + b"\0" * 200)
    return records


def test_redelivery_stale_handles_and_auto_renewal(tmp_path):
    async def run():
        config = ConsumeConfig(auto_renew_ms=30_000, renew_before_ms=40_000)
        c = Consumption(tmp_path, _store(tmp_path, 3), config)  # type: ignore[arg-type]
        everything = TagFilter("*")
        first = await c.receive("g", TOPIC, everything, 2, 1, 0)
        assert [m.system_properties.delivery_attempt for m in first] == [1, 1]
        await asyncio.sleep(0.01)  # the 1 ms invisible time is over
        again = await c.receive("g", TOPIC, everything, 1, 60_000, 0)
        assert again[0].system_properties.message_id == "ID0"
        assert again[0].system_properties.delivery_attempt == 2
        with pytest.raises(BusinessError):  # the first delivery's handle is stale now
            c.ack("g", "T", first[0].system_properties.receipt_handle)
        c.ack("g", "T", again[0].system_properties.receipt_handle)
        # a PushConsumer's message: renewed while its client is connected, same handle
        (pushed,) = await c.receive("g", TOPIC, everything, 1, 30_000, 0, renew_for="c1")
        assert (pushed.system_properties.message_id, pushed.system_properties.delivery_attempt) == (
            "ID1", 2)  # its 1 ms invisible time was over too: before anything new  # fmt: skip
        c.alive = lambda client_id: client_id == "c1"
        assert c.renew() == 1
        c.alive = lambda client_id: False
        assert c.renew() == 0
        c.ack("g", "T", pushed.system_properties.receipt_handle)
        p = c.state[("g", "T")][0]
        assert (p.committed, p.next) == (2, 2)  # ID2 never handed out
        await c.close()
        return (tmp_path / "config" / "consumerOffset.json").read_text()

    assert '"T@g":{0:2\n' in asyncio.run(run())
