"""Recovery keeps what it cuts: after an unclean stop, a flipped byte in a record of a middle
segment ends the commitlog there, and every byte cut after it (the rest of that segment, the
later segment) is in the quarantine, byte for byte, listed by ``rmqstore inspect`` and counted
by a metric."""

import json
import subprocess
import sys
import urllib.request

import pytest

from rmqstore.segments import segment_name
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs
from tests.reliability.cluster import fresh_channel

pytestmark = pytest.mark.integration
SEGMENT = 64 * 1024


def _writer(store, *extra: str) -> procs.ServiceProcess:
    return procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                       "--commitlog-segment-size", str(SEGMENT), "--flush", "sync", *extra)


def test_a_corrupt_middle_segment_is_cut_into_the_quarantine(tmp_path):
    store = tmp_path / "store"
    w = _writer(store)
    stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address))
    results = []
    for b in range(12):
        results += stub.PutBatch(commitlog_pb2.PutBatchRequest(messages=[
            common_pb2.Message(topic="Q", body=f"m-{b}-{i}-".encode() * 20, keys=f"k{b}-{i}")
            for i in range(50)]), timeout=10).results
    end = max(r.phy_offset + r.size for r in results)
    w.kill()  # unclean: abort stays
    segs = sorted((store / "commitlog").iterdir())
    original = {p.name: p.read_bytes() for p in segs}
    last_start = (end - 1) // SEGMENT * SEGMENT
    victim = next(r for r in results if r.phy_offset // SEGMENT * SEGMENT == last_start - SEGMENT
                  and r.phy_offset % SEGMENT > SEGMENT // 2)  # in the second-to-last segment
    seg = store / "commitlog" / segment_name(victim.phy_offset // SEGMENT * SEGMENT)
    at = victim.phy_offset % SEGMENT + victim.size - 10  # in its properties
    with open(seg, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    damaged = {p.name: p.read_bytes() for p in segs}
    metrics_port = procs.free_port()
    w = _writer(store, "--metrics-port", str(metrics_port))
    try:
        off = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address)).GetOffsets(
            commitlog_pb2.GetOffsetsRequest(), timeout=10)
        assert off.max_offset == victim.phy_offset
        ranges = [json.loads(x) for x in
                  (store / "rmqstore" / "quarantine" / "ranges.jsonl").read_text().splitlines()]
        kept = {}
        for r in ranges:
            data = (store / "rmqstore" / "quarantine" / r["file"]).read_bytes()
            assert len(data) == r["size"]
            start = r["offset"] // SEGMENT * SEGMENT
            pos = r["offset"] - start
            assert data == damaged[segment_name(start)][pos : pos + r["size"]], r
            kept[r["offset"]] = r["size"]
        # exactly the cut bytes: every non-zero byte at or after the cut, nothing before it
        want = {}
        for name, data in damaged.items():
            start = int(name)
            if start + len(data) <= victim.phy_offset:
                continue
            begin = max(victim.phy_offset - start, 0)
            stop = len(data[begin:].rstrip(b"\0")) + begin
            if stop > begin:
                want[start + begin] = stop - begin
        print(f"cut at {victim.phy_offset} of {end} written: quarantine holds {kept} "
              f"({sum(kept.values())} bytes)")
        assert kept == want and len(kept) == 2
        assert original[seg.name][: at] == damaged[seg.name][: at]
        errors = [x for x in w.lines if " ERROR " in x and "quarantine" in x]
        assert len(errors) == 2 and str(victim.phy_offset) in errors[0], w.lines
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                      timeout=10).read().decode()
        assert f"rmqstore_store_quarantined_bytes {float(sum(kept.values()))}" in body
        out = subprocess.run([sys.executable, "-m", "services.cli.main", "inspect", str(store)],
                             cwd=procs.ROOT, capture_output=True, text=True, timeout=60).stdout
        listed = [x for x in out.splitlines() if x.startswith("QUARANTINED")]
        print("\n".join(listed))
        assert len(listed) == 2
        assert listed[0].startswith(f"QUARANTINED [{victim.phy_offset}, "
                                    f"{victim.phy_offset + want[victim.phy_offset]})")
    finally:
        w.stop()
