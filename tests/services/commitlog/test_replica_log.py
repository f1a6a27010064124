"""A slave in this process (engine + HA client) against the spec-written peer master."""

import socket
import struct
from pathlib import Path

import pytest

from rmqstore.errors import NotMasterError
from rmqstore.formats import commitlog
from rmqstore.v1 import common_pb2
from services.commitlog import replica_log
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.ha_slave import HaSlave
from services.commitlog.replica_log import Diverged, ReplicaLog
from tests.ha_peer import PeerMaster
from tests.services.commitlog.replicas import SEGMENT, files, source_store, wait_for


def slave_engine(root: Path, port: int) -> CommitLogEngine:
    return CommitLogEngine(WriterConfig(
        store=root, segment_size=SEGMENT, role="slave", ha_master=f"127.0.0.1:{port}",
        ha_retry_s=0.05, ha_idle_s=20))  # fmt: skip


@pytest.fixture
def source(tmp_path) -> tuple[Path, int]:
    root = tmp_path / "master"
    return root, source_store(root, 600)


def follow(engine: CommitLogEngine) -> HaSlave:
    slave = HaSlave(engine, heartbeat_s=0.2)
    slave.start()
    return slave


@pytest.mark.parametrize("frame", [32 * 1024, 997])
def test_a_slave_copies_the_whole_log_byte_for_byte(tmp_path, source, frame):
    """Started while the master is in its first file, it gets everything; 997-byte frames
    split nearly every record, and each is published only once whole."""
    root, end = source
    peer = PeerMaster(root / "commitlog", SEGMENT, max_frame=frame, end=20_000)
    e = slave_engine(tmp_path / "slave", peer.port)
    slave = follow(e)
    try:
        # the slave reports the end of the whole records it wrote: a record is cut at 20,000
        wait_for(lambda: peer.acked > 19_000, 30, "the slave to acknowledge")
        assert peer.acked == e.max_offset < 20_000
        assert peer.first_reports == [0]  # reported at once, empty
        peer.set_end(end)
        assert peer.wait_acked(end, 60)
        wait_for(lambda: e.max_offset == end, 10, "the last record published")
        master = CommitLogEngine(WriterConfig(store=root, segment_size=SEGMENT))
        try:  # the queue offsets a promoted slave would go on from
            assert e.queue_table == master.queue_table
        finally:
            master.close()
        assert e.read([0])[0] == (root / "commitlog" / f"{0:020d}").read_bytes()[: len(
            e.read([0])[0])]  # fmt: skip
    finally:
        slave.close()
        e.close()
        peer.close()
    assert files(tmp_path / "slave" / "commitlog") == files(root / "commitlog")


def test_an_empty_slave_starts_at_the_masters_last_file(tmp_path, source):
    root, end = source
    peer = PeerMaster(root / "commitlog", SEGMENT)
    e = slave_engine(tmp_path / "slave", peer.port)
    slave = follow(e)
    try:
        assert peer.wait_acked(end, 60)
        first = end - end % SEGMENT
        assert e.min_offset == first
        assert e.max_offset == end
    finally:
        slave.close()
        e.close()
        peer.close()
    mine = files(tmp_path / "slave" / "commitlog")
    assert list(mine) == [f"{first:020d}"]
    assert mine[f"{first:020d}"] == files(root / "commitlog")[f"{first:020d}"]


def test_a_slave_refuses_puts_naming_its_master(tmp_path):
    e = slave_engine(tmp_path / "slave", 10912)
    try:
        with pytest.raises(NotMasterError, match="slave of 127.0.0.1:10912; send puts to the"):
            e.put([common_pb2.Message(topic="T", body=b"x")])
    finally:
        e.close()


def test_a_slave_ahead_of_another_history_appends_nothing(tmp_path, source, caplog):
    """Spec §6: the slave holds the first 30,000 bytes of one history; a new master's own
    log has no record starting there. Nothing is appended, one line says why, the slave
    keeps retrying."""
    root, _ = source
    peer = PeerMaster(root / "commitlog", SEGMENT, end=30_000)
    e = slave_engine(tmp_path / "slave", peer.port)
    slave = follow(e)
    try:
        wait_for(lambda: peer.acked > 29_000, 30, "the slave to acknowledge")
    finally:
        slave.close()
        peer.close()
    mine = e.max_offset
    before = files(tmp_path / "slave" / "commitlog")
    e.close()
    other = tmp_path / "other"
    source_store(other, 400, tag="other-history", body=517)
    peer = PeerMaster(other / "commitlog", SEGMENT)
    e = slave_engine(tmp_path / "slave", peer.port)
    assert e.max_offset == mine
    slave = follow(e)
    try:
        wait_for(lambda: peer.connections >= 2, 30, "the slave to retry")
        assert "another history" in slave.diverged or "no record begins" in slave.diverged
        assert peer.first_reports[0] == mine
        assert e.max_offset == mine and slave.written == mine
    finally:
        slave.close()
        e.close()
        peer.close()
    assert files(tmp_path / "slave" / "commitlog") == before
    assert "nothing was appended" in caplog.text


def test_a_slave_ahead_of_an_empty_master_refuses_its_new_history(tmp_path, source):
    """Spec §6, the hazard itself: the master is wiped; the slave reports its old end, the
    master (RocketMQ does not check) waits, then sends its new bytes from there. They begin
    no record of this store's history: refused, nothing appended."""
    root, _ = source
    peer = PeerMaster(root / "commitlog", SEGMENT, end=70_000)
    e = slave_engine(tmp_path / "slave", peer.port)
    slave = follow(e)
    try:
        wait_for(lambda: peer.acked > 69_000, 30, "the slave to acknowledge")
    finally:
        slave.close()
        peer.close()
    mine, before = e.max_offset, files(tmp_path / "slave" / "commitlog")
    e.close()
    wiped = tmp_path / "wiped" / "commitlog"
    wiped.mkdir(parents=True)
    peer = PeerMaster(wiped, SEGMENT, heartbeat_s=0.1)
    assert peer.end == 0
    e = slave_engine(tmp_path / "slave", peer.port)
    slave = follow(e)
    try:
        wait_for(lambda: peer.first_reports == [mine], 30, "the slave's first report")
        new_end = source_store(tmp_path / "wiped", 500, tag="after-the-wipe", body=433)
        assert new_end > mine
        peer.set_end(new_end)
        wait_for(lambda: slave.diverged, 30, "the slave to refuse the new history")
        assert e.max_offset == mine and slave.written == mine
    finally:
        slave.close()
        e.close()
        peer.close()
    assert files(tmp_path / "slave" / "commitlog") == before


def test_a_slave_drops_a_silent_master_and_reconnects(tmp_path):
    """A master that accepts and then says nothing (no frames, no heartbeats)."""
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    peer = PeerMaster(quiet, SEGMENT, heartbeat_s=3600)
    e = CommitLogEngine(WriterConfig(
        store=tmp_path / "slave", segment_size=SEGMENT, role="slave",
        ha_master=f"127.0.0.1:{peer.port}", ha_retry_s=0.05, ha_idle_s=0.3))  # fmt: skip
    slave = follow(e)
    try:
        wait_for(lambda: peer.connections >= 2, 30, "the slave to give up and reconnect")
        assert "sent nothing for 0.3 s" in slave.last_error
    finally:
        slave.close()
        e.close()
        peer.close()


def test_a_frame_off_the_slaves_end_closes_the_connection(tmp_path):
    """RocketMQ's rule: a frame whose offset is not the slave's end ends the connection;
    the slave reconnects and reports its end again. A raw master sends one such frame."""
    root = tmp_path / "master"
    source_store(root, 50)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        e = slave_engine(tmp_path / "slave", port)
        slave = follow(e)
        try:
            conn, _ = server.accept()
            with conn:
                assert struct.unpack(">q", conn.recv(8)) == (0,)  # at once, empty
                first = (root / "commitlog" / f"{0:020d}").read_bytes()[:5000]
                conn.sendall(struct.pack(">qi", 0, 5000) + first)
                wait_for(lambda: e.max_offset > 4000, 30, "the first frame to be applied")
                written = e.max_offset
                conn.sendall(struct.pack(">qi", 6000, 10) + bytes(10))  # not at 5000
                conn.settimeout(30)
                got = b""
                while chunk := conn.recv(64):
                    got += chunk
                assert struct.unpack(">q", got[-8:]) == (written,)
            again, _ = server.accept()
            with again:
                assert struct.unpack(">q", again.recv(8)) == (written,)
                assert "offset 6000" in slave.last_error  # while this one is open
        finally:
            slave.close()
            e.close()


def test_frames_taken_together_across_file_ends_are_written_file_by_file(tmp_path, source):
    """Frames that arrive together are checked and written together: here every frame of
    the source (each end-of-file record and the next file's first records among them) in
    one go, and a record split between the last two frames taken."""
    root, end = source
    data = b"".join((root / "commitlog" / f"{start:020d}").read_bytes()
                    for start in range(0, end, SEGMENT))  # fmt: skip
    e = slave_engine(tmp_path / "slave", 1)
    try:
        log = ReplicaLog(e)
        offset = 0
        while offset < end - 100:
            n = min(end - 100, offset - offset % SEGMENT + SEGMENT, offset + 32 * 1024) - offset
            log.take(offset, data[offset : offset + n])
            offset += n
        written = log.flush()
        assert written < end - 100 == log.received  # a record waits for its last 100 bytes
        log.take(end - 100, data[end - 100 : end])
        assert log.flush() == end == e.max_offset
    finally:
        e.close()
    assert files(tmp_path / "slave" / "commitlog") == files(root / "commitlog")


def test_a_slave_reports_its_end_as_a_heartbeat(tmp_path, source):
    """Nothing to copy: the slave still reports every heartbeat interval (5 s; here 0.1 s),
    so a master keeps it as connected."""
    root, end = source
    peer = PeerMaster(root / "commitlog", SEGMENT, end=20_000, heartbeat_s=3600)
    e = slave_engine(tmp_path / "slave", peer.port)
    slave = HaSlave(e, heartbeat_s=0.1)
    slave.start()
    try:
        wait_for(lambda: peer.acked > 19_000, 30, "the slave to acknowledge")
        reports = peer.reports
        wait_for(lambda: peer.reports >= reports + 3, 30, "three heartbeat reports")
        assert peer.acked == e.max_offset and peer.connections == 1
    finally:
        slave.close()
        e.close()
        peer.close()


@pytest.mark.parametrize("flip, why", [
    (commitlog.HEAD_SIZE + 60, "does not check out"),  # a body byte: its CRC fails
    (commitlog.PHYSICAL_OFFSET_AT + 7, "another history"),  # the stored offset
    (commitlog.MAGIC_AT, "no record begins"),
])  # fmt: skip
@pytest.mark.parametrize("one_by_one", [True, False])
def test_a_record_that_does_not_check_out_is_not_written(
    tmp_path, source, flip, why, one_by_one, monkeypatch
):
    """Bytes damaged on the way (or from another history) are refused with nothing of the
    record written; the records before it are. Checked record by record (a few records at
    once) or as columns (many)."""
    monkeypatch.setattr(replica_log, "_SMALL", 1000 if one_by_one else 0)
    root, _ = source
    data = bytearray((root / "commitlog" / f"{0:020d}").read_bytes()[:20_000])
    size = commitlog.peek(data, 0).total_size
    second = size + commitlog.peek(data, size).total_size  # the third record starts here
    data[second + flip] ^= 0xFF
    e = slave_engine(tmp_path / "slave", 1)
    try:
        log = ReplicaLog(e)
        with pytest.raises(Diverged, match=why):
            log.apply(0, data)
        assert e.max_offset == log.written == 0  # checked before anything is written
        log.apply(0, data[:second])
        assert e.max_offset == second
        with pytest.raises(Diverged, match=why):
            log.apply(second, data[second:])
        assert e.max_offset == second == log.received
        assert e.read([0, size]) == [bytes(data[:size]), bytes(data[size:second])]
    finally:
        e.close()
