"""Disk full: the writer on a small tmpfs the test mounts (root only; skipped otherwise).

Puts go on until the file system is full. Then: puts are refused with RESOURCE_EXHAUSTED
before any byte of a record is written, reads keep working, the commitlog on disk ends
exactly at the last acknowledged record, and writing resumes once space is freed (a
ballast file is deleted). A restart then recovers every acknowledged record, no corruption.
"""

import os
import subprocess

import grpc
import pytest

from rmqstore.formats import commitlog, commitlog_segment
from rmqstore.segments import segment_name
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from tests import procs
from tests.reliability.cluster import fresh_channel

pytestmark = pytest.mark.integration
FS_BYTES = 6 * 1024 * 1024
SEGMENT = 1024 * 1024
BALLAST = 2 * 1024 * 1024


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; run as root (e.g. in the CI container)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _start(store):
    return procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                       "--commitlog-segment-size", str(SEGMENT), "--flush", "sync")


def _msg(i: int) -> common_pb2.Message:
    return common_pb2.Message(topic="Full", queue_id=i % 3, body=os.urandom(1000) + b"%d" % i,
                              keys=f"full-{i}")


def _disk_end(store) -> tuple[int, str]:
    """Where the valid records on disk end, and the first error found (if any)."""
    end, error = 0, ""
    for seg in sorted((store / "commitlog").iterdir()):
        data = seg.read_bytes()
        pos, blank, err = commitlog_segment.scan_end(data, 0, True, int(seg.name))
        end = int(seg.name) + pos
        if err is not None:
            return end, str(err)
        if blank is None:
            break
    return end, error


def fill(path) -> None:
    """Write ``path`` until the file system has not one byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def test_full_disk_refuses_puts_cleanly_and_recovers(small_fs):
    store = small_fs / "store"
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\0" * BALLAST)  # tmpfs allocates on write
    w = _start(store)
    acked: list[commitlog_pb2.PutResult] = []
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address))
        refused = None
        i = 0
        while refused is None and i < 20_000:
            try:
                rs = stub.PutBatch(commitlog_pb2.PutBatchRequest(
                    messages=[_msg(i + j) for j in range(20)]), timeout=10)
                acked.extend(rs.results)
                i += 20
            except grpc.RpcError as e:
                refused = e
        assert refused is not None, "the file system never filled"
        # fill the last free bytes too: checkpoint and snapshot writes now fail as well
        filler = small_fs / "filler"
        fill(filler)
        # a single message still fits in the current segment until it needs the next one
        singles = 0
        while singles < 10_000:
            try:
                acked.append(stub.Put(commitlog_pb2.PutRequest(message=_msg(i)), timeout=10))
                singles += 1
                i += 1
            except grpc.RpcError as e:
                refused = e
                break
        offsets = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)
        end, err = _disk_end(store)
        last = acked[-1].phy_offset + acked[-1].size
        print(f"disk full after {len(acked)} messages ({singles} single puts after the first "
              f"refused batch; {last} bytes): "
              f"{refused.code()} {refused.details()!r}; writer max {offsets.max_offset}, "
              f"disk ends at {end}, corruption {err or 'none'}; segments "
              f"{sorted(p.name for p in (store / 'commitlog').iterdir())}")
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "no space" in refused.details()
        assert offsets.max_offset == last and end == last and not err
        for _ in range(3):  # keeps refusing, keeps serving
            with pytest.raises(grpc.RpcError) as again:
                stub.Put(commitlog_pb2.PutRequest(message=_msg(0)), timeout=10)
            assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        sample = acked[:: max(len(acked) // 50, 1)] + acked[-3:]
        raws = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
            offsets=[r.phy_offset for r in sample]), timeout=10).records
        assert [commitlog.decode(raw).uniq_key for raw in raws] == [r.unique_key for r in sample]
        assert stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5).max_offset == last

        complaints = [x for x in w.lines if "ERROR" in x or "WARNING" in x or "Traceback" in x]
        print(f"writer log while full: {len(complaints)} warnings/errors; first: "
              f"{complaints[:2]}")
        ballast.unlink()  # space comes back: writing resumes
        filler.unlink()
        more = stub.PutBatch(commitlog_pb2.PutBatchRequest(
            messages=[_msg(10**6 + j) for j in range(200)]), timeout=10).results
        assert more[0].phy_offset >= last and len(more) == 200
        print(f"after freeing {BALLAST} bytes: {len(more)} more messages acknowledged")
        acked.extend(more)
        assert w.stop() == 0
        w = _start(store)
        stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address))
        raws = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
            offsets=[r.phy_offset for r in acked]), timeout=30).records
        assert [commitlog.decode(raw).uniq_key for raw in raws] == [r.unique_key for r in acked]
        end, err = _disk_end(store)
        assert end == acked[-1].phy_offset + acked[-1].size and not err
        assert not (store / "commitlog" / (segment_name(0) + ".creating")).exists()
    finally:
        w.stop()


def test_stop_and_restart_on_a_full_disk(small_fs):
    """SIGTERM while not one byte is free (checkpoint and snapshot cannot be written), then
    a restart on the still-full disk: every acknowledged record is there, nothing torn."""
    store = small_fs / "store"
    w = _start(store)
    try:
        stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address))
        acked = list(stub.PutBatch(commitlog_pb2.PutBatchRequest(
            messages=[_msg(j) for j in range(300)]), timeout=10).results)
        fill(small_fs / "filler")
        acked += stub.PutBatch(commitlog_pb2.PutBatchRequest(  # fits in the mapped segment
            messages=[_msg(1000 + j) for j in range(20)]), timeout=10).results
        code = w.stop()
        first_log = "\n".join(w.lines[-12:])
        print(f"SIGTERM with the disk full: exit code {code}; log tail:\n{first_log}")
        w = _start(store)
        stub = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address))
        raws = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
            offsets=[r.phy_offset for r in acked]), timeout=30).records
        end, err = _disk_end(store)
        print(f"restart on the full disk: {len(raws)} of {len(acked)} records read back, "
              f"disk ends at {end}, corruption {err or 'none'}")
        assert [commitlog.decode(raw).uniq_key for raw in raws] == [r.unique_key for r in acked]
        assert end == acked[-1].phy_offset + acked[-1].size and not err
        assert code == 0, "SIGTERM with the disk full must still stop cleanly"
    finally:
        w.stop()
