"""``rmqstore inspect``: the real CLI, run as a process, on the golden store and crafted files."""

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rmqstore.formats import checkpoint as ck
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import index_file as ix
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.javahash import index_hash
from services.cli import inspect as inspect_mod

ROOT = Path(__file__).resolve().parents[3]


def inspect(*args: object, check: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "inspect", *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


def rows(*args: object, check: int | None = 0) -> list[dict]:
    out = inspect(*args, "--json", check=check).stdout
    return [json.loads(line) for line in out.splitlines()]


def of_type(rs: list[dict], t: str) -> list[dict]:
    return [r for r in rs if r["type"] == t]


def _digest(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


# -- golden store ---------------------------------------------------------------------------
@pytest.mark.golden
def test_commitlog_segments_decode_like_rocketmq(golden_store, golden_expected):
    before = _digest(golden_store)
    records, blanks, summaries = [], [], []
    for seg in sorted((golden_store / "commitlog").iterdir()):
        rs = rows(seg)
        records += of_type(rs, "record")
        blanks += of_type(rs, "blank")
        summaries += of_type(rs, "summary")
        assert not of_type(rs, "corrupt")
    assert len(records) == len(golden_expected["messages"]) == 200
    for got, m in zip(records, golden_expected["messages"], strict=True):
        exp = m["stored"]
        for ours, theirs in [("phyOffset", "phyOffset"), ("size", "totalSize"),
                             ("topic", "topic"), ("queueId", "queueId"),
                             ("queueOffset", "queueOffset"), ("sysFlag", "sysFlag"),
                             ("storeTimestamp", "storeTimestamp"), ("bornHost", "bornHost"),
                             ("storeHost", "storeHost"), ("bodyCRC", "bodyCRC"),
                             ("bodyLength", "bodyLength"), ("msgId", "msgId"),
                             ("tagsCode", "tagsCode"), ("properties", "properties")]:
            assert got[ours] == exp[theirs], (ours, exp["phyOffset"])
        assert got["uniqKey"] == (exp["uniqKey"] or "") and got["keys"] == (exp["keys"] or "")
    assert [(b["phyOffset"], b["declaredSize"]) for b in blanks] == [
        (b["phyOffset"], b["declaredSize"]) for b in golden_expected["blankRecords"]
    ]
    assert all(b["fillsFile"] for b in blanks)
    assert [s["endReason"] for s in summaries] == ["blank", "blank", "zeros"]
    end = golden_expected["commitlogEnd"][0]
    assert summaries[-1]["dataEnd"] == end["phyOffset"] == golden_expected["commitlogMaxOffset"]
    assert sum(s["records"] for s in summaries) == 200
    assert _digest(golden_store) == before  # read-only: same bytes, same mtimes


@pytest.mark.golden
def test_consume_queue_files(golden_store, golden_expected):
    # a queue of four files, the two schedule queues and one more; every byte of every golden
    # consume-queue file is compared in tests/rmqstore/test_golden_store.py
    chosen = ["TopicA/0", "SCHEDULE_TOPIC_XXXX/2", "SCHEDULE_TOPIC_XXXX/4", "TopicB/1"]
    for key in chosen:
        entries = golden_expected["consumeQueues"][key]
        units = []
        for f in sorted((golden_store / "consumequeue" / key).iterdir()):
            rs = rows(f)
            (summary,) = of_type(rs, "summary")
            assert summary["firstQueueOffset"] == int(f.name) // 20
            assert summary["nextQueueOffset"] == summary["firstQueueOffset"] + summary["units"]
            units += of_type(rs, "unit")
        assert [(u["queueOffset"], u["phyOffset"], u["size"], u["tagsCode"]) for u in units] == [
            (e["queueOffset"], e["phyOffset"], e["size"], e["tagsCode"]) for e in entries
        ]


@pytest.mark.golden
def test_index_files(golden_store, golden_expected):
    slots = golden_expected["config"]["maxHashSlotNum"]
    for f in golden_expected["files"]["index"]:
        path = golden_store / "index" / f["name"]
        data = path.read_bytes()
        rs = rows(path)  # shape inferred from the size
        (header,) = of_type(rs, "header")
        assert (header["slots"], header["entriesCapacity"]) == (slots, 400)
        for k in ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset",
                  "hashSlotCount", "indexCount"):
            assert header[k] == f[k], k
        (occ,) = of_type(rs, "slots")
        slot_values = struct.unpack_from(f">{slots}i", data, 40)
        assert occ["usedSlots"] == sum(1 for v in slot_values if v > 0)
        entries = of_type(rs, "entry")
        assert len(entries) == f["indexCount"] - 1
        base = 40 + 4 * slots
        for e in entries:
            kh, phy, diff, prev = struct.unpack_from(">iqii", data, base + 20 * e["number"])
            assert (e["keyHash"], e["phyOffset"], e["timeDiff"], e["prev"]) == (kh, phy, diff, prev)
            assert e["time"] == f["beginTimestamp"] + 1000 * diff
        # the same with the shape given explicitly, and a limit on entries
        limited = rows(path, "--index-slots", slots, "--index-entries", 400, "--limit", 3)
        assert [e["number"] for e in of_type(limited, "entry")] == [1, 2, 3]
        assert of_type(limited, "header") == [header]


@pytest.mark.golden
def test_checkpoint(golden_store, golden_expected):
    (row,) = rows(golden_store / "checkpoint")
    exp = golden_expected["checkpoint"]
    for k in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "minTimestamp",
              "minTimestampIndex", "fileSize"):
        assert row[k] == exp[k], k


@pytest.mark.golden
def test_store_directory_summary(golden_store, golden_expected):
    rs = rows(golden_store)
    (clog,) = of_type(rs, "commitlog")
    assert clog["segments"] == [f["name"] for f in golden_expected["files"]["commitlog"]]
    assert clog["minOffset"] == 0
    assert clog["maxOffset"] == golden_expected["commitlogMaxOffset"]
    assert clog["corrupt"] is None
    queues = {f"{q['topic']}/{q['queueId']}": (q["minOffset"], q["maxOffset"])
              for q in of_type(rs, "queue")}
    assert queues == {k: (v["min"], v["max"])
                      for k, v in golden_expected["consumeQueueMaxOffsets"].items()}
    idx = of_type(rs, "indexFile")
    assert [(i["name"], i["indexCount"], i["endPhyOffset"]) for i in idx] == [
        (f["name"], f["indexCount"], f["endPhyOffset"]) for f in golden_expected["files"]["index"]
    ]
    (cp,) = of_type(rs, "checkpoint")
    assert cp["physicMsgTimestamp"] == golden_expected["checkpoint"]["physicMsgTimestamp"]
    assert of_type(rs, "markers") == [{"type": "markers", "abort": False, "lock": False}]
    assert of_type(rs, "broker") == [{"type": "broker", "permission": 6, "state": "read-write"}]


def test_store_summary_shows_a_drained_broker(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "brokerPermission.json").write_text('{"brokerPermission": 4}')
    assert inspect_mod.permission_row(tmp_path) == {
        "type": "broker", "permission": 4, "state": "read-only"}
    (tmp_path / "config" / "brokerPermission.json").write_text("{")
    row = inspect_mod.permission_row(tmp_path)
    assert row["permission"] is None and "brokerPermission.json" in row["error"]


@pytest.mark.golden
def test_human_output(golden_store, golden_expected):
    seg = golden_store / "commitlog" / "00000000000000000000"
    out = inspect(seg, "--limit", 2).stdout.splitlines()
    first = golden_expected["messages"][0]["stored"]
    assert out[0].startswith(f"record @0 size={first['totalSize']} {first['topic']}/")
    assert first["msgId"] in out[0]
    assert out[1].startswith("record @")
    blank_at = golden_expected["blankRecords"][0]["phyOffset"]
    assert out[2].startswith(f"blank end-of-file record at {blank_at}")
    in_first = sum(m["stored"]["file"] == seg.name for m in golden_expected["messages"])
    assert out[3].startswith("summary: kind=commitlog") and f"records={in_first}," in out[3]
    assert len(out) == 4
    store = inspect(golden_store).stdout
    assert "queue TopicA/0: files=4 min=0 max=35" in store


# -- crafted files --------------------------------------------------------------------------
def _record(i: int, phy: int) -> bytes:
    props = {"TAGS": "TagA", "KEYS": f"k{i}"} if i % 2 else {}
    return cl.encode(cl.Record(
        topic="Crafted", queue_id=1, body=f"body-{i}".encode() * (i + 1),
        properties=cl.props_fmt.encode(props), queue_offset=i, physical_offset=phy,
        store_timestamp=1700000000000 + i, born_host=parse_host("10.0.0.1:1"),
        store_host=parse_host("[::1]:10911"),
    ))


def _crafted_segment(base: int, size: int, n: int, corrupt_last: bool) -> tuple[bytes, list[int]]:
    seg = bytearray(size)
    pos, starts = 0, []
    for i in range(n):
        rec = _record(i, base + pos)
        seg[pos : pos + len(rec)] = rec
        starts.append(pos)
        pos += len(rec)
    if corrupt_last:
        seg[starts[-1] + 110] ^= 0xFF  # inside the body (v4 born + v6 store: body at 100)
    return bytes(seg), starts


def test_crafted_commitlog_with_corrupt_record(tmp_path):
    base = 4096
    data, starts = _crafted_segment(base, 4096, 5, corrupt_last=True)
    path = tmp_path / "commitlog" / f"{base:020d}"
    path.parent.mkdir()
    path.write_bytes(data)
    rs = rows(path, check=1)
    assert [r["phyOffset"] for r in of_type(rs, "record")] == [base + s for s in starts[:-1]]
    assert all(r["storeHost"] == "[0:0:0:0:0:0:0:1]:10911" for r in of_type(rs, "record"))
    (bad,) = of_type(rs, "corrupt")
    assert bad["phyOffset"] == base + starts[-1] and bad["filePos"] == starts[-1]
    assert "CRC" in bad["reason"]
    (summary,) = of_type(rs, "summary")
    assert summary["records"] == 4 and summary["endReason"] == "corrupt"
    assert summary["dataEnd"] == base + starts[-1]
    human = inspect(path, check=1).stdout
    assert f"CORRUPT at {base + starts[-1]} (file position {starts[-1]})" in human
    # --limit shows fewer records but the summary still covers the whole segment
    limited = rows(path, "--limit", 1, check=1)
    assert len(of_type(limited, "record")) == 1
    assert of_type(limited, "summary")[0]["records"] == 4


def test_crafted_commitlog_with_blank_and_a_torn_header(tmp_path):
    data, starts = _crafted_segment(0, 2048, 3, corrupt_last=False)
    end = starts[-1] + len(_record(2, 0))
    seg = bytearray(data)
    seg[end : end + 8] = cl.blank(len(seg) - end)
    path = tmp_path / "commitlog" / ("0" * 20)
    path.parent.mkdir()
    path.write_bytes(seg)
    rs = rows(path)
    assert [b["declaredSize"] for b in of_type(rs, "blank")] == [2048 - end]
    seg[end : end + 8] = struct.pack(">ii", 5000, 0x1234)  # neither blank nor a record
    path.write_bytes(seg)
    rs = rows(path, check=1)
    (bad,) = of_type(rs, "corrupt")
    assert bad["phyOffset"] == end and "magic" in bad["reason"]


def _crafted_store(root: Path, slots: int, entries: int) -> None:
    (root / "commitlog").mkdir(parents=True)
    data, starts = _crafted_segment(0, 4096, 4, corrupt_last=False)
    (root / "commitlog" / ("0" * 20)).write_bytes(data)
    (root / "commitlog" / f"{4096:020d}").write_bytes(bytes(4096))  # preallocated, empty
    qdir = root / "consumequeue" / "Crafted" / "1"
    qdir.mkdir(parents=True)
    units = [cq.CqUnit(0, 0x7FFFFFFF, 0)] * 2  # RocketMQ's pre-blank units
    units += [cq.CqUnit(s, 100, 7) for s in starts]
    (qdir / f"{100:020d}").write_bytes(b"".join(map(cq.encode, units)).ljust(200, b"\0"))
    buf = bytearray(ix.file_size(slots, entries))
    f = ix.IndexFile(buf, slots, entries)
    for i, s in enumerate(starts):
        assert f.put(index_hash(f"Crafted#k{i}"), s, 1700000000000 + 1500 * i)
    (root / "index").mkdir()
    (root / "index" / "20231114221320000").write_bytes(buf)
    (root / "checkpoint").write_bytes(ck.encode(ck.Checkpoint(0xAABB, 0xCCDD, 0)))
    (root / "abort").write_bytes(b"")


def test_crafted_store_and_index_shape_inference(tmp_path):
    root = tmp_path / "store"
    _crafted_store(root, slots=10, entries=25)  # not the defaults, not 4 entries per slot
    rs = rows(root)
    (clog,) = of_type(rs, "commitlog")
    data = (root / "commitlog" / ("0" * 20)).read_bytes()
    end, _, _ = commitlog_segment.scan_end(data)
    assert (clog["minOffset"], clog["maxOffset"]) == (0, end)
    (q,) = of_type(rs, "queue")
    assert (q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) == ("Crafted", 1, 5, 11)
    (idx,) = of_type(rs, "indexFile")
    assert "cannot infer" in idx["error"] and "--index-slots" in idx["error"]
    (idx,) = of_type(rows(root, "--index-slots", 10), "indexFile")
    assert (idx["slots"], idx["entriesCapacity"], idx["indexCount"]) == (10, 25, 5)
    assert of_type(rs, "markers")[0]["abort"] is True
    assert of_type(rs, "checkpoint")[0]["minTimestamp"] == 40707

    index_path = root / "index" / "20231114221320000"
    failed = inspect(index_path, check=2)
    assert "cannot infer the slot and entry counts" in failed.stderr
    assert f"({ix.file_size(10, 25)} bytes)" in failed.stderr
    for shape in (("--index-slots", 10), ("--index-entries", 25)):
        rs = rows(index_path, *shape)
        assert of_type(rs, "header")[0]["entries"] == 4
        hops = {e["number"]: e for e in of_type(rs, "entry")}
        assert [hops[n]["timeDiff"] for n in (1, 2, 3, 4)] == [0, 1, 3, 4]
    assert "40 + 4*slots + 20*entries" in inspect(index_path, "--index-slots", 9, check=2).stderr

    cq_path = root / "consumequeue" / "Crafted" / "1" / f"{100:020d}"
    rs = rows(cq_path)
    units = of_type(rs, "unit")
    assert [u["queueOffset"] for u in units] == list(range(5, 11))
    assert [bool(u.get("preBlank")) for u in units] == [True, True, False, False, False, False]


def test_kind_override_and_errors(tmp_path):
    odd = tmp_path / "some.bin"
    odd.write_bytes(cq.encode(cq.CqUnit(42, 99, -1)) + bytes(20))
    failed = inspect(odd, check=2)
    assert "pass --kind" in failed.stderr and not failed.stdout
    rs = rows(odd, "--kind", "consumequeue")
    assert [(u["queueOffset"], u["phyOffset"], u["tagsCode"]) for u in of_type(rs, "unit")] == [
        (0, 42, -1)
    ]
    assert "does not exist" in inspect(tmp_path / "missing", check=2).stderr
    assert "not a store" in inspect(tmp_path, check=2).stderr
    short = tmp_path / "checkpoint"
    short.write_bytes(b"\0" * 10)
    assert "at least 24" in inspect(short, check=2).stderr
    empty = tmp_path / "commitlog" / ("0" * 20)
    empty.parent.mkdir()
    empty.write_bytes(b"")
    (summary,) = rows(empty)
    assert summary["records"] == 0 and summary["fileSize"] == 0


def test_times_are_shown_in_utc_with_z_or_as_the_number(tmp_path):
    """Times print as ISO-8601 UTC with ``Z`` (rmqstore's one time format); a value no date
    can show (a damaged field) prints as the number itself instead of failing."""
    out_of_range = 2**62
    cp = tmp_path / "checkpoint"
    cp.write_bytes(ck.encode(ck.Checkpoint(1700000000250, 0, out_of_range)))
    (row,) = rows(cp)
    assert (row["physic"], row["logics"], row["index"]) == (
        "2023-11-14T22:13:20.250Z", "1970-01-01T00:00:00.000Z", str(out_of_range)
    )
    seg = tmp_path / "commitlog" / ("0" * 20)
    seg.parent.mkdir()
    seg.write_bytes(_record(7, 0).ljust(4096, b"\0"))
    assert " store=2023-11-14T22:13:20.007Z " in inspect(seg).stdout
