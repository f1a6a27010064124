"""Export decoded records to Parquet and read them back with Spark SQL."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.export import export
from pipelines.export_batches import SCHEMA
from pipelines.records import utc_date
from pipelines.stores import StoreRef
from pipelines.synthetic import Message, mixed_messages, write_commitlog
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from tests.pipelines.forged import forged_store

pytestmark = pytest.mark.spark


def test_export_round_trips_every_record(spark, tmp_path: Path):
    store = tmp_path / "store"
    written = write_commitlog(store, mixed_messages(300, step_ms=400_000),
                              segment_size=16 * 1024)
    out = tmp_path / "parquet"
    report = export(spark, store, out, split_bytes=8_000)
    assert report.records == len(written) and report.corruptions == []
    # partitioned by topic and date, as directories
    topics = {p.name for p in out.iterdir() if p.is_dir()}
    assert topics == {f"topic={m.message.topic}" for m in written}
    assert any(len(list(p.iterdir())) > 1 for p in out.iterdir() if p.is_dir())
    rows = {r["phy_offset"]: r for r in spark.read.parquet(str(out)).collect()}
    assert sorted(rows) == [w.phy_offset for w in written]
    for w in written:
        r, m = rows[w.phy_offset], w.message
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["size"]) == (
            m.topic, m.queue_id, w.queue_offset, w.size)
        assert r["store_timestamp"] == m.store_timestamp
        assert str(r["date"]) == utc_date(m.store_timestamp)  # read back as a date
        assert bytes(r["body"]) == m.body
        assert dict(r["properties"]) == m.properties
        assert r["uniq_key"] == m.properties["UNIQ_KEY"]
        assert r["tags"] == m.properties.get("TAGS")
        assert list(r["keys"]) == [k for k in m.properties.get("KEYS", "").split(" ") if k]
        assert r["store_host"] == "127.0.0.1:10911"
        assert r["msg_id"] == f"7F00000100002A9F{w.phy_offset:016X}"
    for part in out.rglob("*.parquet"):  # each file in commitlog order
        offsets = pq.read_table(part, columns=["phy_offset"]).column(0).to_pylist()
        assert offsets == sorted(offsets)
    # analysts query it with SQL
    spark.read.parquet(str(out)).createOrReplaceTempView("msgs")
    n = spark.sql("select count(*) as n from msgs where array_contains(keys, 'BB') "
                  "and topic = 'Topic1'").collect()[0]["n"]
    assert n == sum(1 for w in written if w.message.topic == "Topic1"
                    and "BB" in w.message.properties.get("KEYS", "").split(" "))


def test_export_stops_at_a_corrupt_record_and_refuses_a_used_output(spark, tmp_path: Path):
    store = tmp_path / "store"
    written = write_commitlog(store, mixed_messages(120), segment_size=8 * 1024)
    segs = sorted((store / "commitlog").iterdir())
    first_of_second = next(w for w in written if w.phy_offset == int(segs[1].name))
    with open(segs[1], "r+b") as f:  # the first record of segment 2 gets a bad magic
        f.seek(commitlog.MAGIC_AT)
        f.write(b"\0\0\0\1")
    out = tmp_path / "parquet"
    report = export(spark, store, out)
    [c] = report.corruptions
    assert c.offset == first_of_second.phy_offset and "magic" in c.reason
    kept = spark.read.parquet(str(out)).select("phy_offset").collect()
    assert sorted(r[0] for r in kept) == [w.phy_offset for w in written
                                         if w.phy_offset < first_of_second.phy_offset]
    with pytest.raises(InvalidArgumentError, match="not empty"):
        export(spark, store, out)


def test_export_cuts_again_by_walking_after_a_cut_inside_a_record(spark, tmp_path: Path):
    store, written, fake = forged_store(tmp_path)
    out = tmp_path / "parquet"
    report = export(spark, store, out, split_bytes=fake)
    assert report.records == len(written) and report.corruptions == []
    [note] = report.notes
    assert f"cut at position {fake} did not begin at a record" in note
    rows = spark.read.parquet(str(out)).select("phy_offset").collect()
    assert sorted(r["phy_offset"] for r in rows) == [w.phy_offset for w in written]


def test_topics_with_any_characters_read_back_as_partitions(spark, tmp_path: Path):
    store = tmp_path / "store"
    topics = ["a%b|c", "x=y", "Topic 7", "Thé"]
    written = write_commitlog(
        store, (Message(t, 0, b"b", {"KEYS": f"k{i}"}) for i, t in enumerate(topics * 3)),
        segment_size=8 * 1024)  # fmt: skip
    out = tmp_path / "parquet"
    export(spark, store, out, split_bytes=500)
    assert (out / "_SUCCESS").exists()
    rows = spark.read.parquet(str(out)).select("topic", "phy_offset", "keys").collect()
    assert sorted((r["phy_offset"], r["topic"], list(r["keys"])) for r in rows) == [
        (w.phy_offset, w.message.topic, [w.message.properties["KEYS"]]) for w in written
    ]


def test_a_store_time_without_a_date_reads_back_as_a_null_date(spark, tmp_path: Path):
    store = tmp_path / "store"
    times = [1_700_000_000_000, 253_402_300_800_000, 1_700_000_001_000, -(2**62)]  # 2 dateless
    written = write_commitlog(
        store, (Message("T", 0, b"b", {"KEYS": f"k{i}"}, store_timestamp=t)
                for i, t in enumerate(times)),
        segment_size=8 * 1024)  # fmt: skip
    out = tmp_path / "parquet"
    report = export(spark, store, out)
    assert report.records == len(times) and report.corruptions == []
    assert sorted(p.name for p in (out / "topic=T").iterdir()) == [
        "date=2023-11-14", "date=__HIVE_DEFAULT_PARTITION__"]
    rows = spark.read.parquet(str(out)).select("phy_offset", "store_timestamp", "date").collect()
    got = sorted((r["phy_offset"], r["store_timestamp"], r["date"] and str(r["date"]))
                 for r in rows)  # fmt: skip
    assert got == [(w.phy_offset, t, utc_date(t)) for w, t in zip(written, times, strict=True)]
    assert [d for _, _, d in got] == ["2023-11-14", None, "2023-11-14", None]


def test_an_export_without_records_still_has_its_columns(spark, tmp_path: Path):
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    out = tmp_path / "parquet"
    report = export(spark, store, out)
    assert report.records == 0
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "empty.parquet"]
    frame = spark.read.parquet(str(out))
    assert frame.count() == 0
    assert frame.columns == [f.name for f in SCHEMA]
    # a store whose first record is corrupt exports nothing either
    store2 = tmp_path / "store2"
    write_commitlog(store2, mixed_messages(5), segment_size=8 * 1024)
    with open(next((store2 / "commitlog").iterdir()), "r+b") as f:
        f.seek(commitlog.MAGIC_AT)
        f.write(b"\0\0\0\1")
    report = export(spark, store2, tmp_path / "parquet2")
    assert report.records == 0 and len(report.corruptions) == 1
    assert spark.read.parquet(str(tmp_path / "parquet2")).count() == 0


def test_the_stores_of_two_brokers_are_one_dataset_with_a_broker_column(spark, tmp_path: Path):
    written = {
        "broker-a": write_commitlog(tmp_path / "a", mixed_messages(150, step_ms=400_000),
                                    segment_size=16 * 1024),
        "broker-b": write_commitlog(tmp_path / "b", mixed_messages(80, body_size=60, topics=2),
                                    segment_size=8 * 1024),
    }  # fmt: skip
    stores = [StoreRef("broker-a", tmp_path / "a"), StoreRef("broker-b", tmp_path / "b")]
    out = tmp_path / "parquet"
    report = export(spark, stores, out, split_bytes=12_000)
    assert report.brokers == {b: len(w) for b, w in written.items()}
    assert report.records == sum(report.brokers.values()) and report.corruptions == []
    frame = spark.read.parquet(str(out))
    assert frame.columns == ["broker", *(f.name for f in SCHEMA if f.name not in ("topic", "date")),
                             "topic", "date"]  # fmt: skip
    rows = {(r["broker"], r["phy_offset"]): r for r in frame.collect()}
    # both brokers' offsets start at 0: (broker, phy_offset) names a message
    assert sorted(rows) == sorted((b, w.phy_offset) for b, ws in written.items() for w in ws)
    for b, ws in written.items():
        for w in ws:
            r = rows[b, w.phy_offset]
            assert (r["topic"], r["queue_id"], r["queue_offset"], bytes(r["body"])) == (
                w.message.topic, w.message.queue_id, w.queue_offset, w.message.body)
    assert frame.where("broker = 'broker-b' and topic = 'Topic2'").count() == 0


def test_an_export_of_named_stores_without_records_has_the_broker_column(spark, tmp_path: Path):
    (tmp_path / "a" / "commitlog").mkdir(parents=True)
    out = tmp_path / "parquet"
    report = export(spark, [StoreRef("a", tmp_path / "a")], out)
    assert (report.records, report.brokers) == (0, {"a": 0})
    frame = spark.read.parquet(str(out))
    assert frame.count() == 0 and frame.columns == ["broker", *(f.name for f in SCHEMA)]
