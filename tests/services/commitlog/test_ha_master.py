"""The writer as a replication master, a real process on loopback, against the spec-written
peer (``tests/ha_peer.py``) playing RocketMQ's slave: frames, start points, heartbeats, put
statuses under sync_master, --min-sync-replicas and divergence refusals."""

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.commitlog.config import WriterConfig, add_replication_flags
from tests import procs
from tests.ha_peer import PeerSlave

pytestmark = pytest.mark.integration
SEGMENT = 64 * 1024  # small files: frames meet file ends
BODY = 900
MAX_FRAME = 32 * 1024


def _start(store: Path, *extra: str) -> tuple[procs.ServiceProcess, int]:
    ha_port = procs.free_port()
    p = procs.start(
        "services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
        "--commitlog-segment-size", str(SEGMENT), "--ha-port", str(ha_port), *extra,
    )  # fmt: skip
    return p, ha_port


@pytest.fixture
def master(tmp_path, request):
    extra = getattr(request, "param", ())
    p, port = _start(tmp_path / "store", *extra)
    yield p, port, tmp_path / "store"
    p.stop()


def _stub(p) -> commitlog_pb2_grpc.CommitLogStub:
    return commitlog_pb2_grpc.CommitLogStub(channel(p.address))


def _msg(i: int = 0) -> common_pb2.Message:
    return common_pb2.Message(topic="Orders", queue_id=i % 4, body=bytes([65 + i % 26]) * BODY,
                              keys=f"order-{i}")  # fmt: skip


def _put(stub, n: int, start: int = 0) -> commitlog_pb2.PutBatchResponse:
    return stub.PutBatch(commitlog_pb2.PutBatchRequest(
        messages=[_msg(start + i) for i in range(n)]), timeout=30)  # fmt: skip


def _max(stub) -> int:
    return stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset


def _log_bytes(store: Path, start: int, end: int) -> bytes:
    """The master's segment-file bytes in [start, end), read from disk."""
    out = bytearray()
    at = start
    while at < end:
        first = at - at % SEGMENT
        with open(store / "commitlog" / f"{first:020d}", "rb") as f:
            f.seek(at - first)
            chunk = f.read(min(end, first + SEGMENT) - at)
        out += chunk
        at += len(chunk)
    return bytes(out)


def _check_frames(slave: PeerSlave) -> None:
    for offset, size in slave.frames:
        assert 0 < size <= MAX_FRAME
        assert offset % SEGMENT + size <= SEGMENT, f"frame at {offset} crosses a file end"


def _replication(stub) -> commitlog_pb2.ReplicationStatus:
    return stub.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10).replication


def _wait_slaves(stub, n: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while len(_replication(stub).slaves) != n:
        assert time.monotonic() < deadline, f"the writer never had {n} slave(s)"
        time.sleep(0.02)


def test_frames_are_the_segment_bytes_from_a_file_start(master):
    p, port, store = master
    stub = _stub(p)
    _put(stub, 200)  # ~200 KiB: four files
    end = _max(stub)
    assert end > 3 * SEGMENT
    slave = PeerSlave("127.0.0.1", port, first_report=SEGMENT)
    try:
        slave.run_until(end, timeout=30)
        _put(stub, 30, 200)  # followed live, across the next file end
        for k in range(6):  # 6 MiB not read: the socket fills, the transport holds the rest
            _put(stub, 1000, 230 + 1000 * k)
        later = _max(stub)
        slave.run_until(later, timeout=30)
        assert slave.max_offset == later
        assert bytes(slave.bytes) == _log_bytes(store, SEGMENT, later)
        _check_frames(slave)
        assert any(off % SEGMENT + size == SEGMENT for off, size in slave.frames)  # blanks too
    finally:
        slave.close()


def test_an_empty_slave_starts_at_the_last_file(master, tmp_path):
    p, port, store = master
    stub = _stub(p)
    _put(stub, 200)
    end = _max(stub)
    slave = PeerSlave("127.0.0.1", port, first_report=0, directory=str(tmp_path / "slave"),
                      file_size=SEGMENT)  # fmt: skip
    try:
        slave.run_until(end, timeout=30)
        assert slave.start == end - end % SEGMENT
        assert slave.frames[0][0] == slave.start
        assert bytes(slave.bytes) == _log_bytes(store, slave.start, end)
        _check_frames(slave)
        got = (tmp_path / "slave" / f"{slave.start:020d}").read_bytes()[: end % SEGMENT]
        assert got == _log_bytes(store, slave.start, end)
        st = _replication(stub)
        assert st.role == "async_master" and len(st.slaves) == 1
        deadline = time.monotonic() + 10  # its acknowledgement is read by the writer
        while _replication(stub).slaves[0].acked_offset != end:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert _replication(stub).slaves[0].lag_bytes == 0
    finally:
        slave.close()


def test_nothing_is_sent_before_the_first_report_then_a_heartbeat_when_idle(master):
    p, port, _store = master
    stub = _stub(p)
    _put(stub, 5)
    end = _max(stub)
    slave = PeerSlave("127.0.0.1", port, report_on_connect=False)
    try:
        with pytest.raises(TimeoutError):
            slave.run_until(1, timeout=1.0)
        assert slave.frames == [] and slave.heartbeats == []
        slave.report(0)
        slave.run_until(end, timeout=20)
        assert slave.wait_heartbeat(timeout=20) == end  # [next offset][0] after 5 s idle
    finally:
        slave.close()


@pytest.mark.parametrize("master", [
    ("--role", "sync_master", "--slave-timeout", "0.5"),
    ("--role", "sync_master", "--slave-timeout", "0.5", "--flush", "sync"),  # durable, then a slave
], indirect=True)  # fmt: skip
def test_sync_master_statuses(master):
    p, port, _store = master
    stub = _stub(p)
    # no slave: stored, SLAVE_NOT_AVAILABLE at once
    r = _put(stub, 2)
    assert [x.status for x in r.results] == [commitlog_pb2.SLAVE_NOT_AVAILABLE] * 2
    assert len(stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
        offsets=[r.results[0].phy_offset]), timeout=10).records) == 1  # fmt: skip
    single = stub.Put(commitlog_pb2.PutRequest(message=_msg(3)), timeout=10)
    assert single.status == commitlog_pb2.SLAVE_NOT_AVAILABLE

    slave = PeerSlave("127.0.0.1", port, first_report=0)
    slave.follow()
    try:
        _wait_slaves(stub, 1)
        # a slave that acknowledges: PUT_OK, on every kind of result
        r = _put(stub, 3, 10)
        assert [x.status for x in r.results] == [commitlog_pb2.PUT_OK] * 3
        cols = stub.PutBatch(commitlog_pb2.PutBatchRequest(
            messages=[_msg(20)], columnar_results=True, offsets_only=True), timeout=10)
        assert cols.columns.status == commitlog_pb2.PUT_OK  # fmt: skip
        assert slave.wait_for(_max(stub), timeout=10)

        # a slave that stops acknowledging: FLUSH_SLAVE_TIMEOUT after --slave-timeout, stored
        slave.acking = False
        t0 = time.monotonic()
        r = _put(stub, 1, 30)
        assert r.results[0].status == commitlog_pb2.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - t0 >= 0.5
        assert len(stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(
            offsets=[r.results[0].phy_offset]), timeout=10).records) == 1  # fmt: skip
    finally:
        slave.close()  # as a killed slave: its socket closed
    # the slave is gone: SLAVE_NOT_AVAILABLE again
    _wait_slaves(stub, 0)
    assert _put(stub, 1, 40).results[0].status == commitlog_pb2.SLAVE_NOT_AVAILABLE


def test_async_master_is_always_put_ok(master):
    p, port, _store = master
    stub = _stub(p)
    assert _put(stub, 2).results[0].status == commitlog_pb2.PUT_OK
    slave = PeerSlave("127.0.0.1", port, first_report=0, acking=False)
    try:
        _wait_slaves(stub, 1)
        assert _put(stub, 2, 2).results[1].status == commitlog_pb2.PUT_OK
    finally:
        slave.close()


@pytest.mark.parametrize("master", [("--min-sync-replicas", "1")], indirect=True)
def test_min_sync_replicas_refuses_before_writing(master):
    p, port, _store = master
    stub = _stub(p)
    with pytest.raises(grpc.RpcError) as e:
        _put(stub, 1)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "--min-sync-replicas" in e.value.details()
    assert _max(stub) == 0  # nothing written
    slave = PeerSlave("127.0.0.1", port, first_report=0)
    slave.follow()
    try:
        deadline = time.monotonic() + 20
        while _replication(stub).in_sync < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert _put(stub, 1).results[0].status == commitlog_pb2.PUT_OK
    finally:
        slave.close()


def _refused(p, port: int, first: int, why: str, source: str | None = None) -> None:
    slave = PeerSlave("127.0.0.1", port, first_report=first, source=source)
    try:
        assert slave.wait_closed(timeout=20), "the writer kept a divergent slave"
        assert slave.frames == [] and slave.heartbeats == [] and not slave.bytes
    finally:
        slave.close()
    deadline = time.monotonic() + 10
    while not any("refused slave" in line and why in line for line in p.lines):
        assert time.monotonic() < deadline, "no log line says why the slave was refused"
        time.sleep(0.02)


def test_divergent_first_reports_are_refused(tmp_path):
    mport = procs.free_port()
    p, port = _start(tmp_path / "store", "--metrics-port", str(mport))
    try:
        stub = _stub(p)
        r = _put(stub, 3)
        end = _max(stub)
        _refused(p, port, end + 100, "beyond this master's end")
        # inside a record, never sent to this host (a slave of another history): refused
        _refused(p, port, r.results[1].phy_offset + 10, "inside a record")
        st = _replication(stub)
        assert st.refused_divergent == 2 and st.refused_below_min == 0
        said = [line for line in p.lines if "refused" in line or "disconnected" in line]
        assert len(said) == 2 and all("wipe the slave's store" in line for line in said)
        assert "has sent 127.0.0.1 nothing since it started" in said[1]
        text = _scrape(mport)
        assert _sample(text, 'rmqstore_writer_slaves_refused_total{reason="divergent"}') == 2
        assert _sample(text, 'rmqstore_writer_slaves_refused_total{reason="below_min"}') == 0
        # a first report at a record start is served from there
        slave = PeerSlave("127.0.0.1", port, first_report=r.results[1].phy_offset)
        try:
            slave.run_until(end, timeout=20)
            assert slave.frames[0][0] == r.results[1].phy_offset
        finally:
            slave.close()
    finally:
        p.stop()


@pytest.mark.parametrize("master", [("--role", "sync_master")], indirect=True)
def test_a_slave_resuming_inside_a_record_is_served_from_there(master):
    """RocketMQ's slave appends whole frames, which end anywhere in a record (at most 32 KiB
    each), and reconnecting without a restart reports the end of what it holds: the master
    serves its raw bytes from exactly there, because it sent that slave's host those bytes;
    a report inside a record beyond what it sent that host, or from another host, is
    refused."""
    p, port, store = master
    stub = _stub(p)
    r = _put(stub, 40)  # ~40 KiB in one file: the first frame ends inside a record
    end = _max(stub)
    starts = {x.phy_offset for x in r.results}
    first = PeerSlave("127.0.0.1", port, first_report=0, max_frames=1)
    try:
        assert first.wait_closed(timeout=20)  # its connection breaks after one frame
    finally:
        first.close()
    inside = first.max_offset
    assert first.frames == [(0, MAX_FRAME)] and inside not in starts and inside < end
    _wait_slaves(stub, 0)
    sent = end  # the master wrote it all to the connection; the slave applied one frame
    r = _put(stub, 10, 40)  # no slave now: SLAVE_NOT_AVAILABLE, stored
    assert {x.status for x in r.results} == {commitlog_pb2.SLAVE_NOT_AVAILABLE}
    end = _max(stub)
    later = r.results[1].phy_offset + 10  # inside a record never sent to 127.0.0.1
    _refused(p, port, later, f"has sent 127.0.0.1 up to {sent}")
    # what was sent to 127.0.0.1 does not vouch for another host
    _refused(p, port, inside, "has sent 127.0.0.2 nothing", source="127.0.0.2")
    assert _replication(stub).refused_divergent == 2

    slave = PeerSlave("127.0.0.1", port, first_report=inside, report_on_connect=False)
    try:
        slave.report(inside)  # RocketMQ's slave reports some time after connecting
        slave.run_until(end, timeout=20)
        assert slave.frames[0][0] == inside
        assert bytes(first.bytes) + bytes(slave.bytes) == _log_bytes(store, 0, end)
        slave.follow()
        assert [x.status for x in _put(stub, 2, 50).results] == [commitlog_pb2.PUT_OK] * 2
        assert slave.wait_for(_max(stub), timeout=10)
        assert bytes(slave.bytes) == _log_bytes(store, inside, _max(stub))
    finally:
        slave.close()
    assert _replication(stub).refused_divergent == 2
    assert any(f"resumes at offset {inside}, inside a record" in line for line in p.lines)


@pytest.mark.parametrize("reading", [True, False])
def test_a_later_report_beyond_the_end_drops_the_slave_at_once(master, reading):
    """Dropped for a report beyond the end: the connection closed and the slave no longer
    counted at once, also while megabytes wait unsent to a slave that stopped reading (a
    close that waited for it to read them would keep it counted for ever)."""
    p, port, _store = master
    stub = _stub(p)
    _put(stub, 2)
    slave = PeerSlave("127.0.0.1", port, first_report=0)
    try:
        slave.run_until(_max(stub), timeout=20)
        if not reading:
            slave.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            for k in range(8):  # ~8 MiB the slave never reads
                _put(stub, 1000, 10 + 1000 * k)
        slave.report(_max(stub) + 1_000_000)
        _wait_slaves(stub, 0)
        if reading:
            assert slave.wait_closed(timeout=20)
    finally:
        slave.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _sample(text: str, name: str) -> float:
    """The value of the one sample ``name`` (with its labels) in a scrape."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}")


def test_replication_metrics(tmp_path):
    mport = procs.free_port()
    p, port = _start(tmp_path / "store", "--role", "sync_master", "--slave-timeout", "0.3",
                     "--metrics-port", str(mport))  # fmt: skip
    try:
        stub = _stub(p)
        _put(stub, 2)  # SLAVE_NOT_AVAILABLE
        slave = PeerSlave("127.0.0.1", port, first_report=0)
        slave.follow()
        try:
            _wait_slaves(stub, 1)
            _put(stub, 3, 2)  # PUT_OK
            end = _max(stub)
            assert slave.wait_for(end, timeout=10)
            text = _scrape(mport)
            assert _sample(text, 'rmqstore_writer_role{role="sync_master"}') == 1
            assert _sample(text, 'rmqstore_writer_role{role="async_master"}') == 0
            assert _sample(text, 'rmqstore_writer_put_status_total{status="PUT_OK"}') == 3
            assert _sample(
                text, 'rmqstore_writer_put_status_total{status="SLAVE_NOT_AVAILABLE"}') == 2
            assert _sample(text, "rmqstore_writer_slaves") == 1
            assert _sample(text, "rmqstore_writer_sync_replica_wait_seconds_count") == 1
            lag = [x for x in text.splitlines() if x.startswith("rmqstore_writer_slave_lag_bytes{")]
            assert len(lag) == 1 and float(lag[0].rsplit(" ", 1)[1]) >= 0
        finally:
            slave.close()
    finally:
        p.stop()


def test_a_first_report_below_the_oldest_file_is_refused(tmp_path):
    p, port = _start(tmp_path / "store", "--retention-hours", "0", "--delete-when", "always",
                     "--retention-check-seconds", "0.2")  # fmt: skip
    try:
        stub = _stub(p)
        _put(stub, 300)  # five files; retention deletes all but the one being written
        for builder in ("consume-queue", "index"):  # once the builders have them
            stub.Ack(commitlog_pb2.AckRequest(subscriber=builder, durable_offset=_max(stub)),
                     timeout=10)  # fmt: skip
        deadline = time.monotonic() + 30
        while stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).min_offset < \
                2 * SEGMENT:  # fmt: skip
            assert time.monotonic() < deadline, "retention deleted nothing"
            time.sleep(0.05)
        _refused(p, port, SEGMENT, "below this master's oldest file")
        st = _replication(stub)
        assert (st.refused_below_min, st.refused_divergent) == (1, 0)
    finally:
        p.stop()


@pytest.mark.parametrize("master", [("--role", "sync_master", "--slave-timeout", "0.3",
                                     "--ha-idle-seconds", "2")], indirect=True)  # fmt: skip
def test_a_silent_slave_is_dropped_after_the_idle_time(master):
    """As a frozen slave (SIGSTOP): FLUSH_SLAVE_TIMEOUT while connected, then, once the
    master has read nothing from it for ``--ha-idle-seconds`` (RocketMQ's 20 s by default,
    ``test_the_idle_time_is_rocketmqs_by_default``) and dropped it, SLAVE_NOT_AVAILABLE."""
    p, port, _store = master
    stub = _stub(p)
    slave = PeerSlave("127.0.0.1", port, first_report=0, acking=False)
    try:
        _wait_slaves(stub, 1)
        assert _put(stub, 1).results[0].status == commitlog_pb2.FLUSH_SLAVE_TIMEOUT
        assert slave.wait_closed(timeout=60), "the writer kept a slave silent for 60 s"
    finally:
        slave.close()
    _wait_slaves(stub, 0)
    assert _put(stub, 1, 1).results[0].status == commitlog_pb2.SLAVE_NOT_AVAILABLE
    assert any("nothing read for 2 s" in line for line in p.lines)


def test_the_idle_time_is_rocketmqs_by_default():
    parser = argparse.ArgumentParser()
    add_replication_flags(parser)
    assert parser.parse_args([]).ha_idle_seconds == WriterConfig.ha_idle_s == 20.0


@pytest.mark.parametrize("master", [("--role", "sync_master", "--slave-timeout", "3")],
                         indirect=True)  # fmt: skip
def test_pipelined_streams_wait_for_the_slave_without_holding_each_other_up(master):
    """The load generator's PutStreams (4 batches in flight, 2 producers) under sync_master:
    every batch PUT_OK once the slave has it; the slave ends with the master's bytes."""
    p, port, store = master
    stub = _stub(p)
    slave = PeerSlave("127.0.0.1", port, first_report=0)
    slave.follow()
    try:
        _wait_slaves(stub, 1)
        out = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "put", "--commitlog", p.address,
             "--topic", "Load", "--count", "3000", "--body-size", "200", "--producers", "2"],
            cwd=procs.ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.rstrip().endswith("; status PUT_OK 3000"), out.stdout
        end = _max(stub)
        assert slave.wait_for(end, timeout=10)
        assert bytes(slave.bytes) == _log_bytes(store, slave.start, end)
    finally:
        slave.close()


def test_an_ha_port_in_use_is_a_startup_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "services.commitlog", "--store", str(tmp_path / "store"),
             "--listen", "127.0.0.1:0", "--ha-port", str(port)],
            cwd=procs.ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert r.returncode != 0
    assert f"cannot listen on the HA port 127.0.0.1:{port}" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "store" / "abort").exists()  # the store was closed cleanly
