"""Serving a store RocketMQ 4.9.8 wrote (a copy of tests/golden/store): sizes read from its
files, ``--read-only`` without writing a byte, and a flag that disagrees with the files named
in the one-line error."""

import hashlib
import json
import shutil
import signal
from pathlib import Path

import grpc
import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs
from tests.services.cli.test_serve_supervision import Serve, free_base

pytestmark = [pytest.mark.integration, pytest.mark.golden]
GOLDEN = procs.ROOT / "tests" / "golden"


def tree(root) -> dict[str, tuple]:
    """Every file and directory under ``root``: content hash, size, mtime, mode."""
    out = {}
    for p in sorted([root, *root.rglob("*")]):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns, st.st_mode)
    return out


@pytest.fixture
def golden_copy(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "store", store)
    return store


def _expected(query_id: int) -> tuple[dict, list[int]]:
    doc = json.loads((GOLDEN / "expected.json").read_text())
    q = doc["queries"][query_id]
    return q, sorted(q["expected"]["queryMessageKeyMatch"])


def _query_key(address: str, q: dict) -> list[int]:
    resp = query_pb2_grpc.QueryStub(channel(address)).QueryByKey(query_pb2.QueryByKeyRequest(
        topic=q["topic"], key=q["key"], max_results=64), timeout=10)
    return sorted(m.phy_offset for m in resp.messages)


def test_read_only_serves_a_rocketmq_store_without_writing_a_byte(golden_copy):
    before = tree(golden_copy)
    base = free_base()
    s = Serve("--store", str(golden_copy), "--port-base", str(base), "--read-only")
    try:
        assert s.ready.wait(120), "".join(s.out + s.err)
        names = [Path(f"/proc/{p}/cmdline").read_text() for p in s.children()]
        assert len(names) >= 2  # the writer (reading only) and the query service
        assert not [n for n in names if "services.indexer" in n]  # no builder: nothing to build
        q, want = _expected(0)
        assert _query_key(f"127.0.0.1:{base + 1}", q) == want
        pulled = query_pb2_grpc.QueryStub(channel(f"127.0.0.1:{base + 1}")).Pull(
            query_pb2.PullRequest(topic="TopicB", queue_id=1, offset=10, max_messages=4),
            timeout=10)
        assert pulled.status == query_pb2.FOUND and len(pulled.messages) == 4
        writer = commitlog_pb2_grpc.CommitLogStub(channel(f"127.0.0.1:{base}"))
        offsets = writer.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10)
        assert offsets.read_only and offsets.store_id.startswith("ro-")
        assert offsets.segment_size == 65536  # read from the files: no flag was given
        with pytest.raises(grpc.RpcError) as e:
            writer.Put(commitlog_pb2.PutRequest(message=common_pb2.Message(
                topic="TopicA", body=b"no")), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "read-only" in e.value.details()
        s.proc.send_signal(signal.SIGTERM)
        assert s.wait(60) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
    after = tree(golden_copy)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    print(f"read-only serve: {len(before)} paths, {len(changed)} changed; key query found "
          f"{len(want)} as RocketMQ does")
    assert not changed, changed


def test_sizes_come_from_the_files_and_a_disagreeing_flag_is_named(golden_copy):
    base = free_base()
    # --no-delivery: the golden store's delayed messages are long due; delivering them would
    # add records to the key queries compared with RocketMQ's answers
    s = Serve("--store", str(golden_copy), "--port-base", str(base), "--no-metrics",
              "--no-delivery")
    try:
        assert s.ready.wait(120), "".join(s.out + s.err)
        q, want = _expected(1)
        assert _query_key(f"127.0.0.1:{base + 1}", q) == want
        s.proc.send_signal(signal.SIGTERM)
        assert s.wait(60) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
    for flag, value in (("--cq-entries-per-file", "300000"), ("--index-slots", "5000000"),
                        ("--commitlog-segment-size", str(1 << 20))):
        s = Serve("--store", str(golden_copy), "--port-base", str(free_base()), "--no-metrics",
                  flag, value)
        code = s.wait()
        err = [line.strip() for line in s.err if line.startswith("error: ")]
        print(f"{flag} {value}: exit {code}: {err}")
        assert code == 3 and len(err) == 1 and flag in err[0], "".join(s.err)
        assert "Traceback" not in "".join(s.err)
