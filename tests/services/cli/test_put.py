"""``rmqstore put`` against a real writer: JSON-lines input (the golden messages) and flags."""

import json
import subprocess
import sys

import pytest

from rmqstore.formats import commitlog
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from tests import procs
from tests.services.cli.dispatched import dispatched

pytestmark = pytest.mark.integration


@pytest.fixture
def writer(tmp_path):
    p = procs.start(
        "services.commitlog",
        "--store",
        str(tmp_path / "store"),
        "--listen",
        "127.0.0.1:0",
        "--commitlog-segment-size",
        "65536",
        "--store-host",
        "198.51.100.7:10911",
        "--no-delivery",  # a delivered golden message would shift its real queue's offsets
    )
    yield p
    p.stop()


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.golden
def test_put_golden_file_stores_the_same_records(writer, golden_dir, golden_expected):
    out = _cli(
        "put",
        "--commitlog",
        writer.address,
        "--file",
        str(golden_dir / "messages.jsonl"),
        "--batch",
        "16",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(results) == 200
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    raws = stub.ReadRecords(
        commitlog_pb2.ReadRecordsRequest(offsets=[r["phyOffset"] for r in results])
    ).records
    for raw, r, m in zip(raws, results, golden_expected["messages"], strict=True):
        rec, exp = commitlog.decode(raw), m["stored"]
        assert (rec.topic, rec.queue_id, rec.queue_offset) == (
            exp["topic"],
            exp["queueId"],
            exp["queueOffset"],
        )
        assert rec.properties == exp["propertiesString"]
        assert rec.sys_flag & ~commitlog.STOREHOST_V6_FLAG == exp["sysFlag"] & ~0x20
        assert (rec.flag, rec.reconsume_times, rec.body_crc) == (
            exp["flag"],
            exp["reconsumeTimes"],
            exp["bodyCRC"],
        )
        assert str(rec.born_host) == exp["bornHost"]
        assert r["uniqKey"] == (exp["uniqKey"] or "")
        assert r["msgId"].startswith("C633640700002A9F")
    # a prepared-transaction reference resolves to the referenced message's offset
    assert commitlog.decode(raws[121]).prepared_transaction_offset == results[120]["phyOffset"]


def test_put_flags_and_load_generator(writer):
    out = _cli(
        "put",
        "--commitlog",
        writer.address,
        "--topic",
        "Orders",
        "--keys",
        "order-{i}",
        "--body",
        "hello {i}",
        "--count",
        "250",
        "--producers",
        "2",
        "--batch",
        "50",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(results) == 250 and len({r["phyOffset"] for r in results}) == 250
    assert "msgs/s" in out.stderr
    out = _cli("put", "--commitlog", writer.address, "--topic", "../etc", "--body", "x")
    assert out.returncode == 2 and "INVALID_ARGUMENT" in out.stderr  # refused: an input error


@pytest.mark.parametrize(
    "extra", [["--inflight", "1"], ["--inflight", "4"], ["--inflight", "4", "--columns"]]
)
def test_load_generator_streams_batches(writer, extra):
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    before = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    flags = ["--topic", "Load", "--keys", "k-{i}", "--body-size", "64", "--count", "300"]
    out = _cli("put", "--commitlog", writer.address, *flags, "--producers", "3", "--batch", "40",
               "--tags", "T", *extra)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "sent 300 messages" in out.stdout and "msgs/s" in out.stdout
    keys, queues, sizes = [], [], set()
    for batch in dispatched(writer.address, before):
        keys += batch.keys
        queues += [(k, q) for k, q in zip(batch.keys, batch.queue_id, strict=True)]
        sizes |= set(batch.size)
    assert sorted(keys) == sorted(f"k-{i}" for i in range(300))
    assert all(q == int(k[2:]) % 4 for k, q in queues)  # round robin over --queues 4
    assert len(sizes) <= 3  # 64 B bodies: records differ only by the key's digits
    out = _cli("put", "--commitlog", writer.address, "--topic", "../etc", "--count", "5",
               "--batch", "5")  # fmt: skip
    assert out.returncode == 2 and "INVALID_ARGUMENT" in out.stderr and "topic" in out.stderr
    assert "0 of 5 messages were stored" in out.stderr


def test_producer_processes_report_a_refusal_and_an_absent_writer(writer):
    out = _cli("put", "--commitlog", writer.address, "--topic", "../etc", "--count", "20",
               "--batch", "5", "--producers", "2")  # fmt: skip
    assert out.returncode == 2 and "INVALID_ARGUMENT" in out.stderr and "topic" in out.stderr
    address = writer.address
    writer.stop()
    out = _cli("put", "--commitlog", address, "--topic", "Load", "--count", "20", "--batch",
               "5", "--producers", "2", "--columns")  # fmt: skip
    assert out.returncode == 3 and "UNAVAILABLE" in out.stderr


def test_load_generator_refuses_a_window_of_zero(writer):
    out = _cli("put", "--commitlog", writer.address, "--topic", "Load", "--count", "5",
               "--inflight", "0")  # fmt: skip
    assert out.returncode == 2 and "--inflight: 0 is outside 1..1024" in out.stderr
    out = _cli("put", "--commitlog", writer.address, "--topic", "Load", "--columns",
               "--delay-level", "2")  # fmt: skip
    assert out.returncode == 2 and "--columns sends generated plain messages" in out.stderr


def test_one_put_prints_what_was_stored(writer):
    out = _cli("put", "--commitlog", writer.address, "--topic", "Orders", "--keys", "order-42",
               "--tags", "paid", "--body", "hi", "--queue", "2")  # fmt: skip
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.splitlines()
    assert line.startswith("stored Orders/2 queueOffset=0 commitlogOffset=0 size=")
    assert "msgId=C6336407" in line and "uniqKey=" in line and "storeTime=20" in line
    assert "msgs/s" not in out.stdout + out.stderr
    out = _cli("put", "--commitlog", writer.address, "--topic", "Orders", "--body", "hi",
               "--queue", "2", "--json")  # fmt: skip
    doc = json.loads(out.stdout)
    assert (doc["topic"], doc["queueId"], doc["queueOffset"]) == ("Orders", 2, 1)
    assert isinstance(doc["storeTimestamp"], int) and doc["phyOffset"] > 0


def test_load_generator_defaults_are_its_fastest_settings(writer):
    out = _cli("put", "--commitlog", writer.address, "--topic", "Load", "--count", "300")
    assert out.returncode == 0, out.stderr
    assert "sent 300 messages" in out.stdout
    assert "(columns, batch 100, 4 in flight)" in out.stdout
    out = _cli("put", "--commitlog", writer.address, "--topic", "Load", "--count", "300",
               "--delay-level", "1")  # fmt: skip
    assert out.returncode == 0 and "(messages, batch 100, 4 in flight)" in out.stdout


def test_standard_input_stops_at_a_bad_line_after_storing_the_ones_before(writer):
    lines = "".join(json.dumps({"topic": "In", "body": f"b{i}"}) + "\n" for i in range(2))
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "put", "--commitlog",
                          writer.address, "--file", "-", "--batch", "10"],
                         input=lines + "{oops\n" + lines, cwd=procs.ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert [t.split(":")[0] for t in out.stdout.splitlines()] == ["line 1", "line 2"]
    (err,) = out.stderr.splitlines()
    assert err.startswith("error: line 3 of - was not stored: not JSON")
    assert "2 messages before it are stored" in err and err.endswith("--skip 2")


def test_a_delivery_time_parks_the_message_on_its_level(writer):
    """``--deliver-at`` and the JSON field ``deliverAt`` store a delayed message (schedule
    topic, its real topic and delivery time as properties); not with --columns."""
    line = json.dumps({"topic": "Later", "body": "j", "deliverAt": "+1h"}) + "\n"
    at_file = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "put", "--commitlog", writer.address,
         "--file", "-", "--json"],
        input=line, cwd=procs.ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    at_flag = _cli("put", "--commitlog", writer.address, "--topic", "Later", "--body", "f",
                   "--deliver-at", "+1h", "--json")  # fmt: skip
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    for out in (at_file, at_flag):
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["topic"] == "SCHEDULE_TOPIC_XXXX"
        request = commitlog_pb2.ReadRecordsRequest(offsets=[doc["phyOffset"]])
        (raw,) = stub.ReadRecords(request).records
        props = commitlog.decode(raw).property_map
        assert props["REAL_TOPIC"] == "Later"
        assert 0 < int(props["TIMER_DELIVER_MS"]) - doc["storeTimestamp"] <= 3_600_000
    out = _cli("put", "--commitlog", writer.address, "--topic", "Later", "--count", "5",
               "--columns", "--deliver-at", "+1m")  # fmt: skip
    assert out.returncode == 2 and "--deliver-at" in out.stderr
