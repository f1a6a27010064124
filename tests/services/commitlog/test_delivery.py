"""The delivery service on a store RocketMQ wrote: due schedule records put again as RocketMQ's
schedule service puts them, progress read from and written to RocketMQ's delayOffset.json."""

import shutil

import pytest

from rmqstore import delay
from rmqstore.errors import StoreError
from rmqstore.formats import commitlog, delay_offset
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import properties as P
from rmqstore.layout import SCHEDULE_TOPIC
from rmqstore.segments import segment_name
from rmqstore.v1 import common_pb2
from services.commitlog import delivery
from services.commitlog.config import WriterConfig
from services.commitlog.delivery import DeliveryService
from services.commitlog.engine import CommitLogEngine

# RocketMQ's own file: level 5's only message delivered already, level 3's not
ROCKETMQ_FILE = (
    '{\n\t"offsetTable":{1:0,2:0,3:0,4:0,5:1,6:0,7:0,8:0,9:0,10:0,11:0,12:0,13:0,14:0,'
    "15:0,16:0,17:0,18:0\n\t}\n}"
)


@pytest.fixture
def golden_copy(tmp_path, golden_store):
    store = tmp_path / "store"
    shutil.copytree(golden_store, store)
    (store / "config").mkdir()
    (store / "config" / "delayOffset.json").write_text(ROCKETMQ_FILE)
    return store


def _records_after(engine, start):
    out, off = [], start
    while off < engine.max_offset:
        seg = engine.segments.find(off)
        size, magic = commitlog.peek(seg.map, off - seg.start)
        if magic == commitlog.BLANK_MAGIC:
            off = seg.end
            continue
        out.append(commitlog.decode(engine.read([off])[0]))
        off += size
    return out


def test_golden_delayed_message_is_delivered_as_rocketmq_delivers_it(
    golden_copy, golden_expected
):
    engine = CommitLogEngine(WriterConfig(store=golden_copy, segment_size=65536))
    try:
        start = engine.max_offset
        service = DeliveryService(engine)
        assert service.offsets()[3] == 0 and service.offsets()[5] == 1  # RocketMQ's file read
        service.run_once()
        delivered = _records_after(engine, start)
    finally:
        engine.close()
    (level3,) = [
        m["stored"] for m in golden_expected["messages"]
        if m["stored"]["topic"] == SCHEDULE_TOPIC and m["stored"]["queueId"] == 2
    ]  # fmt: skip
    assert len(delivered) == 1  # level 5's was delivered before, by RocketMQ
    rec = delivered[0]
    assert (rec.topic, rec.queue_id) == ("TopicA", 1)
    # the stored properties string, serialized again: DELAY, REAL_TOPIC, REAL_QID stay
    assert rec.properties == level3["propertiesString"]
    assert rec.property_map[P.DELAY] == "3"
    assert rec.body_crc == level3["bodyCRC"] and rec.born_timestamp == level3["bornTimestamp"]
    assert rec.sys_flag & ~commitlog.V6_BITS == level3["sysFlag"] & ~commitlog.V6_BITS
    table = delay_offset.decode((golden_copy / "config" / "delayOffset.json").read_text())
    assert table == {**dict.fromkeys(range(1, 19), 0), 3: 1, 5: 1}
    assert (golden_copy / "config" / "delayOffset.json").read_text() == delay_offset.encode(table)


def test_nothing_is_delivered_before_its_time(golden_copy):
    engine = CommitLogEngine(WriterConfig(store=golden_copy, segment_size=65536))
    try:
        service = DeliveryService(engine)
        start = engine.max_offset
        assert service.run_once(now_ms=1_700_000_063_582) == 1_700_000_063_583  # 1 ms early
        assert engine.max_offset == start
        status = service.status(now_ms=1_700_000_063_582)
        (lv,) = status["levels"]
        assert (lv["level"], lv["pending"], lv["next_delivery_ms"]) == (3, 1, 1_700_000_063_583)
        service.run_once(now_ms=1_700_000_063_583)
        assert engine.max_offset > start and service.status()["delivered"] == 1
    finally:
        engine.close()


def test_a_delivery_time_is_parked_on_the_largest_level_not_beyond_it(tmp_path):
    delay.use_levels("1s 5s 10s")
    try:
        engine = CommitLogEngine(WriterConfig(store=tmp_path, delay_levels="1s 5s 10s"))
        try:
            now = 1_800_000_000_000
            msgs = [
                common_pb2.Message(topic="T", body=b"a", deliver_at_ms=now + 7_000),
                common_pb2.Message(topic="T", body=b"b", deliver_at_ms=now + 60_000),
                common_pb2.Message(topic="T", body=b"c", deliver_at_ms=now + 500),
            ]
            stored = engine.put(msgs, now_ms=now)
            assert [(r.topic, r.queue_id) for r in stored] == [
                (SCHEDULE_TOPIC, 1), (SCHEDULE_TOPIC, 2), ("T", 0)]  # fmt: skip
            rec = commitlog.decode(engine.read([stored[0].phy_offset])[0])
            assert rec.property_map[delay.TIMER_DELIVER_MS] == str(now + 7_000)
            assert rec.property_map[P.DELAY] == "2"
        finally:
            engine.close()
    finally:
        delay.use_levels(delay.DEFAULT_LEVELS)


def test_the_unpersisted_step_of_an_unclean_stop_is_counted_as_possible_duplicates(golden_copy):
    # a step of level 3's one message was under way (recorded) when the writer died
    (golden_copy / "rmqstore").mkdir(exist_ok=True)
    (golden_copy / "rmqstore" / "delivery.progress").write_text('{"3": [0, 1]}')
    engine = CommitLogEngine(WriterConfig(store=golden_copy, segment_size=65536))
    try:
        service = DeliveryService(engine)
        assert service.stats.possible_duplicates == 1
        service.run_once()
        assert service.status()["possible_duplicates"] == 1
        service.close()
        assert not (golden_copy / "rmqstore" / "delivery.progress").exists()  # clean stop
    finally:
        engine.close()


def test_an_unreadable_progress_file_stops_the_start_instead_of_delivering_again(golden_copy):
    (golden_copy / "config" / "delayOffset.json").write_text('{"offsetTable":{3:')
    engine = CommitLogEngine(WriterConfig(store=golden_copy, segment_size=65536))
    try:
        with pytest.raises(StoreError, match="remove it to deliver every message"):
            DeliveryService(engine)
        (golden_copy / "config" / "delayOffset.json.bak").write_text(ROCKETMQ_FILE)
        assert DeliveryService(engine).offsets()[5] == 1  # RocketMQ's backup, as it falls back
    finally:
        engine.close()


def test_a_delivery_time_given_as_a_property_with_its_level_is_kept(tmp_path):
    """As a RocketMQ 5 proxy sends it: a delay level and TIMER_DELIVER_MS as a property."""
    engine = CommitLogEngine(WriterConfig(store=tmp_path))
    try:
        at = 1_800_000_004_000
        m = common_pb2.Message(topic="T", body=b"p", delay_level=2, properties=[
            common_pb2.Property(name=delay.TIMER_DELIVER_MS, value=str(at))])  # fmt: skip
        (r,) = engine.put([m], now_ms=1_800_000_000_000)
        assert (r.topic, r.queue_id) == (SCHEDULE_TOPIC, 1)
        rec = commitlog.decode(engine.read([r.phy_offset])[0])
        assert rec.property_map[delay.TIMER_DELIVER_MS] == str(at)
    finally:
        engine.close()


def _schedule_unit(engine, r) -> None:
    """The consume-queue builder's unit of a delayed record (tags code: its delivery time)."""
    level = r.queue_id + 1
    qdir = engine.layout.schedule_queue_dir(level)
    qdir.mkdir(parents=True, exist_ok=True)
    path = qdir / segment_name(0)
    units = path.read_bytes().rstrip(b"\0") if path.exists() else b""
    code = r.store_timestamp + delay.delay_ms(level)
    units += cq.encode(cq.CqUnit(r.phy_offset, r.size, code))
    path.write_bytes(units + b"\0" * cq.UNIT_SIZE * 8)


def test_store_times_stepping_back_neither_skip_nor_repeat_a_delayed_message(tmp_path):
    """Level 2 (5 s) holds, in queue order, u0 (due at T+5 s, to be delivered at T+5.5 s: it
    waits at the head) and u1 (stored after the clock stepped back 3 s: due at T+2 s). The
    level's progress is a prefix of its queue: u1 waits behind u0, then each is delivered
    once (before, u1 was delivered, the offset moved past u0 as well, so u0 was never
    delivered and u1 was delivered again)."""
    engine = CommitLogEngine(WriterConfig(store=tmp_path))
    try:
        t = 1_800_000_010_000
        (u0,) = engine.put([common_pb2.Message(topic="T", body=b"u0", deliver_at_ms=t + 5_500)],
                           now_ms=t)  # fmt: skip
        (u1,) = engine.put([common_pb2.Message(topic="T", body=b"u1", delay_level=2)],
                           now_ms=t - 3_000)  # fmt: skip
        assert [(r.topic, r.queue_id) for r in (u0, u1)] == [(SCHEDULE_TOPIC, 1)] * 2
        for r in (u0, u1):
            _schedule_unit(engine, r)
        start = engine.max_offset
        service = DeliveryService(engine)
        service.run_once(now_ms=t + 5_000)
        service.run_once(now_ms=t + 6_000)
        delivered = [r.body for r in _records_after(engine, start) if r.topic == "T"]
        assert sorted(delivered) == [b"u0", b"u1"]
        assert service.offsets()[2] == 2
        service.close()
    finally:
        engine.close()


def test_a_step_cut_short_still_moves_past_a_prefix_of_each_level(tmp_path, monkeypatch):
    """Two units per step. Level 2 holds u0 then u1 (due earlier: stored after the clock
    stepped back), level 1 holds v (due first). The step's two earliest are v and u1, yet of
    level 2 it takes its head u0; each message is delivered once (before, u1 twice and u0
    never)."""
    monkeypatch.setattr(delivery, "STEP", 2)
    engine = CommitLogEngine(WriterConfig(store=tmp_path))
    try:
        t = 1_800_000_010_000
        puts = ((b"u0", 2, t), (b"u1", 2, t - 3_000), (b"v", 1, t))
        stored = [engine.put([common_pb2.Message(topic="T", body=body, delay_level=level)],
                             now_ms=at)[0] for body, level, at in puts]  # fmt: skip
        for r in stored:
            _schedule_unit(engine, r)
        start = engine.max_offset
        service = DeliveryService(engine)
        service.run_once(now_ms=t + 5_000)
        delivered = [r.body for r in _records_after(engine, start) if r.topic == "T"]
        assert sorted(delivered) == [b"u0", b"u1", b"v"]
        service.close()
    finally:
        engine.close()
