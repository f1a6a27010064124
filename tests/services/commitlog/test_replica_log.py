"""A slave in this process (engine + HA client) against the spec-written peer master."""

from pathlib import Path

import pytest

from rmqstore.errors import NotMasterError
from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.ha_slave import HaSlave
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
