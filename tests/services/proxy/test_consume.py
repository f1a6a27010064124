"""Consumption's bookkeeping on real consume-queue files, with the writer replaced by records
kept in memory (a put appends the record and its consume-queue unit): a due message copied
to the group's retry topic and then settled, the copy delivered as a message of its topic,
dead letters after the last delivery naming the original, a copy the store refuses (or
stores without confirming: a duplicate, never a loss), FIFO redelivery in place, a restart,
stale receipt handles and a PushConsumer's messages kept invisible while it is connected."""

import asyncio
import re

import pytest

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.formats.javahash import java_hash
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.layout import StoreLayout
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.segments import segment_name
from services.proxy import redelivery
from services.proxy.consume import ConsumeConfig, Consumption
from services.proxy.deliver import TagFilter
from services.proxy.status import BusinessError

TOPIC = TopicConfig("T", read_queue_nums=1, write_queue_nums=1)
RETRY = "%RETRY%g_T"
EVERYTHING = TagFilter("*")


class Store:
    """The writer's ReadRecords and PutBatch over records kept in memory (offset -> bytes);
    a put also appends each record's consume-queue unit, as the builder would."""

    def __init__(self, root) -> None:
        self.layout = StoreLayout.of(root)
        self.by_offset: dict[int, bytes] = {}
        self.units: dict[tuple[str, int], list[bytes]] = {}
        self.refuse = False
        self.lose_answer = False
        self.created: list[tuple[str, int, int]] = []

    async def read_many(self, offsets):
        return [self.by_offset[o] for o in offsets]

    def add(self, topic: str, body: bytes, props: dict[str, str], reconsume: int = 0) -> None:
        units = self.units.setdefault((topic, 0), [])
        phy = 1000 * len(self.by_offset)
        raw = commitlog.encode(commitlog.Record(topic, 0, body, P.encode(props),
                                                queue_offset=len(units), physical_offset=phy,
                                                reconsume_times=reconsume))  # fmt: skip
        self.by_offset[phy] = raw
        units.append(cq.encode(cq.CqUnit(phy, len(raw), java_hash(props.get(P.TAGS, "")))))
        qdir = self.layout.queue_dir(topic, 0)
        qdir.mkdir(parents=True, exist_ok=True)
        (qdir / segment_name(0)).write_bytes(b"".join(units) + b"\0" * 400)

    async def put(self, messages):
        if self.refuse:
            raise BusinessError(pb.INTERNAL_SERVER_ERROR, "store unavailable: refused")
        for m in messages:
            props = {p.name: p.value for p in m.properties}
            props |= {P.TAGS: m.tags, P.KEYS: m.keys, P.UNIQ_KEY: m.unique_key}
            self.add(m.topic, m.body, props, m.reconsume_times)
        if self.lose_answer:  # stored, but the answer never came (the writer died)
            self.lose_answer = False
            raise BusinessError(pb.INTERNAL_SERVER_ERROR, "store unavailable: stream closed")
        return []

    async def create_topic(self, name: str, queues: int, perm: int) -> None:
        self.created.append((name, queues, perm))

    def records(self, topic: str) -> list[commitlog.Record]:
        rs = (commitlog.decode(raw, 0, check_crc=True) for raw in self.by_offset.values())
        return [r for r in rs if r.topic == topic]


def _consumption(tmp_path, n: int, **config) -> tuple[Consumption, Store]:
    store = Store(tmp_path)
    for i in range(n):
        store.add("T", f"m{i}".encode(), {P.UNIQ_KEY: f"ID{i}", P.TAGS: "t", P.KEYS: f"k{i}",
                                          "color": "red"})  # fmt: skip
    c = Consumption(tmp_path, store, ConsumeConfig(**config))  # type: ignore[arg-type]
    c.create_topic = store.create_topic
    return c, store


def _sp(messages) -> list[tuple[str, str, int]]:
    return [(m.topic.name, m.system_properties.message_id, m.system_properties.delivery_attempt)
            for m in messages]  # fmt: skip


def test_due_messages_are_copied_to_the_retry_topic_then_settled_and_dead_lettered(tmp_path):
    async def run():
        c, store = _consumption(tmp_path, 3, default_retry_max_times=1)  # 2 deliveries
        first = await c.receive("g", TOPIC, EVERYTHING, 2, 1, 0)
        assert _sp(first) == [("T", "ID0", 1), ("T", "ID1", 1)]
        await asyncio.sleep(0.01)  # the 1 ms invisible time is over
        assert await c.sweep() == 2  # no receive needed
        copies = store.records(RETRY)
        assert [r.uniq_key for r in copies] == ["ID0", "ID1"]
        r = copies[0]
        assert (r.queue_id, r.reconsume_times, r.body, r.tags, r.keys) == (0, 1, b"m0", "t", "k0")
        props = r.property_map
        assert (props["RETRY_TOPIC"], props["RECONSUME_TIME"], props["ORIGIN_MESSAGE_ID"],
                props["color"]) == ("T", "1", "ID0", "red")  # fmt: skip
        assert store.created == [(RETRY, 1, 6)]
        p = c.state[("g", "T")][0]
        assert (p.committed, p.inflight) == (2, {})  # settled once copied
        with pytest.raises(BusinessError):  # the first delivery's handle is stale now
            c.ack("g", "T", first[0].system_properties.receipt_handle)
        # delivered from the retry topic as messages of T: attempt = RECONSUME_TIME + 1
        again = await c.receive("g", TOPIC, TagFilter("t"), 3, 1, 0)
        assert sorted(_sp(again)) == [("T", "ID0", 2), ("T", "ID1", 2), ("T", "ID2", 1)]
        by_id = {m.system_properties.message_id: m for m in again}
        retried = by_id["ID0"]
        assert retried.body == b"m0" and retried.user_properties["color"] == "red"
        assert retried.system_properties.keys == ["k0"] and retried.system_properties.tag == "t"
        handle = retried.system_properties.receipt_handle
        assert handle.startswith("r:0:0:")
        with pytest.raises(BusinessError, match="stale"):  # T's offset 0 is settled
            c.ack("g", "T", handle[2:])
        with pytest.raises(BusinessError, match="malformed"):
            c.ack("g", "T", "x:" + handle[2:])
        handle = c.change("g", "T", handle, 60_000)
        assert handle.startswith("r:0:0:")
        c.ack("g", "T", handle)
        c.ack("g", "T", by_id["ID2"].system_properties.receipt_handle)
        # ID1's second delivery was its last: to %DLQ%g, naming the original topic and id
        await asyncio.sleep(0.01)
        assert await c.sweep() == 1
        (dead,) = store.records("%DLQ%g")
        props = dead.property_map
        assert (props["DLQ_ORIGIN_TOPIC"], props["DLQ_ORIGIN_MESSAGE_ID"], props["RETRY_TOPIC"],
                dead.uniq_key, dead.reconsume_times) == ("T", "ID1", "T", "ID1", 1)  # fmt: skip
        r = c.state[("g", RETRY)][0]
        assert (r.committed, r.inflight) == (2, {})
        await c.close()
        return (tmp_path / "config" / "consumerOffset.json").read_text()

    offsets = asyncio.run(run())
    assert re.search(r'"%RETRY%g_T@g":\{0:2\s', offsets) and re.search(r'"T@g":\{0:3\s', offsets)


def test_a_copy_the_store_refuses_keeps_the_original_in_flight_until_it_takes_it(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(redelivery, "MOVE_RETRY_MS", 1)

    async def run():
        c, store = _consumption(tmp_path, 1)
        (m,) = await c.receive("g", TOPIC, EVERYTHING, 1, 1, 0)
        store.refuse = True
        await asyncio.sleep(0.01)
        assert await c.sweep() == 0
        assert store.records(RETRY) == []
        p = c.state[("g", "T")][0]
        assert (p.committed, list(p.inflight)) == (0, [0])  # still in flight, not lost
        c.flush()
        # a restart meanwhile: the in-flight state comes back from popInflight.json
        c = Consumption(tmp_path, store, ConsumeConfig())  # type: ignore[arg-type]
        store.refuse = False
        await asyncio.sleep(0.01)
        assert await c.sweep() == 1
        assert [r.uniq_key for r in store.records(RETRY)] == ["ID0"]
        assert c.state[("g", "T")][0].committed == 1
        (again,) = await c.receive("g", TOPIC, EVERYTHING, 1, 60_000, 0)
        assert _sp([again]) == [("T", "ID0", 2)]
        # forwarded to the dead-letter topic by its retry handle: it names the original
        await c.forward("g", "T", again.system_properties.receipt_handle)
        (dead,) = store.records("%DLQ%g")
        assert (dead.property_map["DLQ_ORIGIN_TOPIC"], dead.uniq_key) == ("T", "ID0")
        assert c.state[("g", RETRY)][0].committed == 1
        await c.close()

    asyncio.run(run())


def test_a_copy_stored_but_not_confirmed_is_copied_again_a_duplicate_not_a_loss(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(redelivery, "MOVE_RETRY_MS", 1)

    async def run():
        c, store = _consumption(tmp_path, 1)
        await c.receive("g", TOPIC, EVERYTHING, 1, 1, 0)
        store.lose_answer = True
        await asyncio.sleep(0.01)
        assert await c.sweep() == 0  # not confirmed: the original is kept
        assert c.state[("g", "T")][0].committed == 0
        await asyncio.sleep(0.01)
        assert await c.sweep() == 1
        assert c.state[("g", "T")][0].committed == 1
        both = await c.receive("g", TOPIC, EVERYTHING, 2, 60_000, 0)
        assert _sp(both) == [("T", "ID0", 2), ("T", "ID0", 2)]
        await c.close()

    asyncio.run(run())


def test_fifo_groups_and_a_restart_redeliver_in_place(tmp_path):
    async def run():
        c, store = _consumption(tmp_path, 2, fifo_groups=("f",))
        (m,) = await c.receive("f", TOPIC, EVERYTHING, 2, 1, 0)  # one at a time
        await asyncio.sleep(0.01)
        assert await c.sweep() == 0
        (again,) = await c.receive("f", TOPIC, EVERYTHING, 2, 60_000, 0)
        assert _sp([again]) == [("T", "ID0", 2)]
        assert store.records("%RETRY%f_T") == []
        await c.close()
        # restarted cleanly: the receipt handle given out before still acks
        c = Consumption(tmp_path, store, ConsumeConfig(fifo_groups=("f",)))  # type: ignore[arg-type]
        c.ack("f", "T", again.system_properties.receipt_handle)
        (nxt,) = await c.receive("f", TOPIC, EVERYTHING, 2, 60_000, 0)
        assert _sp([nxt]) == [("T", "ID1", 1)]
        await c.close()

    asyncio.run(run())


def test_auto_renewal_keeps_a_push_consumers_message_invisible(tmp_path):
    async def run():
        config = {"auto_renew_ms": 30_000, "renew_before_ms": 40_000}
        c, _store = _consumption(tmp_path, 1, **config)
        (pushed,) = await c.receive("g", TOPIC, EVERYTHING, 1, 30_000, 0, renew_for="c1")
        c.alive = lambda client_id: client_id == "c1"
        assert c.renew() == 1
        c.alive = lambda client_id: False
        assert c.renew() == 0
        c.ack("g", "T", pushed.system_properties.receipt_handle)  # same handle
        assert c.state[("g", "T")][0].committed == 1
        await c.close()

    asyncio.run(run())
