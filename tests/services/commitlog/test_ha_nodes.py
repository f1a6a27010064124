"""Two rmqstore nodes on loopback (writer and builders each, real processes): a slave ends
identical to its master; put statuses with a real rmqstore slave killed, frozen and thawed
(spec rocketmq-ha.md §5); a switchover with ``rmqstore admin promote`` and the former
master rejoining as the new master's slave, its unreplicated tail moved into the quarantine;
the slave's copy of its master's config/."""

import json
import signal

import pytest

from rmqstore import durable, quarantine
from rmqstore.formats import consumer_offsets
from rmqstore.layout import StoreLayout
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, topics_pb2, topics_pb2_grpc
from tests.services.commitlog.nodes import Node, admin
from tests.services.commitlog.replicas import files, wait_for
from tests.services.indexer.helpers import tree_bytes

pytestmark = pytest.mark.integration


def assert_identical(a: Node, b: Node) -> None:
    """Same commit-log bytes, consume-queue files and index files, once both built it all."""
    end = a.max_offset()
    wait_for(lambda: b.max_offset() == end, 90, f"the slave to reach {end}")
    a.wait_built(end)
    b.wait_built(end)
    assert files(a.store / "commitlog") == files(b.store / "commitlog")
    for d in ("consumequeue", "index"):
        ours = tree_bytes(a.store / d)
        assert ours and ours == tree_bytes(b.store / d), d


def test_a_slave_ends_identical_to_its_master(tmp_path):
    """Puts of three topics over four queues, with keys, over several commit-log files:
    the slave's commit log, consume queues and index are the master's, byte for byte."""
    master, slave = Node(tmp_path, "a"), Node(tmp_path, "b")
    try:
        master.master()
        slave.slave_of(master)
        master.wait_slaves(1)
        statuses = set()
        for i in range(0, 600, 20):
            r = master.put(i, 20)
            statuses |= {x.status for x in r.results}
        assert statuses == {0}  # PUT_OK: the slave held each batch before the answer
        assert master.max_offset() > 4 * 64 * 1024
        assert_identical(master, slave)
    finally:
        slave.stop()
        master.stop()


def test_put_statuses_with_a_real_slave_killed_frozen_and_thawed(tmp_path):
    """No slave: SLAVE_NOT_AVAILABLE. ``kill -9`` of the slave: SLAVE_NOT_AVAILABLE once the
    master saw the connection end. SIGSTOP: FLUSH_SLAVE_TIMEOUT until the master drops the
    silent slave (``--ha-idle-seconds``, 3 s here), then SLAVE_NOT_AVAILABLE. SIGCONT: PUT_OK
    again."""
    master, slave = Node(tmp_path, "a"), Node(tmp_path, "b")
    n = 0

    def put() -> str:
        nonlocal n
        n += 1
        return master.status(n)

    try:
        master.master("--slave-timeout", "0.5", "--ha-idle-seconds", "3", builders=False)
        assert put() == "SLAVE_NOT_AVAILABLE"
        slave.slave_of(master, builders=False)
        master.wait_slaves(1)
        assert put() == "PUT_OK"

        slave.kill_writer()
        wait_for(lambda: not master.replication().slaves, 30, "the master to see the kill")
        assert put() == "SLAVE_NOT_AVAILABLE"

        slave.slave_of(master, builders=False)
        master.wait_slaves(1)
        assert put() == "PUT_OK"

        slave.signal(signal.SIGSTOP)
        frozen = []
        wait_for(lambda: frozen.append(put()) or frozen[-1] == "SLAVE_NOT_AVAILABLE", 90,
                 "the master to drop the frozen slave")  # fmt: skip
        assert set(frozen[:-1]) == {"FLUSH_SLAVE_TIMEOUT"}, frozen
        assert len(frozen) > 1

        slave.signal(signal.SIGCONT)
        thawed = []
        wait_for(lambda: thawed.append(put()) or thawed[-1] == "PUT_OK", 60,
                 "PUT_OK after SIGCONT")  # fmt: skip
        assert set(thawed[:-1]) <= {"SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT"}
        end = master.max_offset()
        wait_for(lambda: slave.max_offset() == end, 60, "the thawed slave to catch up")
    finally:
        slave.stop()
        master.stop()


def test_switchover_and_the_former_master_rejoins_as_a_slave(tmp_path):
    """A sync_master and its slave; ``admin promote`` is refused while the master answers.
    The slave dies, the master stores a tail no slave acknowledged, then dies too; the slave
    restarts and is promoted: it takes puts and every PUT_OK message is on it. The former
    master, started as its slave, moves its tail into the quarantine, follows, and ends
    identical (commit log, consume queues, index)."""
    a, b = Node(tmp_path, "a"), Node(tmp_path, "b")
    try:
        a.master()
        b.slave_of(a)
        a.wait_slaves(1)
        acked = [r for i in range(0, 200, 10) for r in a.put(i, 10).results]
        assert {r.status for r in acked} == {0}

        refused = admin("promote", "--commitlog", b.address)
        assert refused.returncode == 1, refused
        assert f"the master {a.ha} still answers on its HA port" in refused.stderr
        not_slave = admin("promote", "--commitlog", a.address)
        assert not_slave.returncode == 1 and "only a slave can be promoted" in not_slave.stderr

        b.kill_writer()
        wait_for(lambda: not a.replication().slaves, 30, "the master to see the kill")
        tail = a.put(1000, 10).results
        assert {r.status for r in tail} == {2}  # SLAVE_NOT_AVAILABLE: on the master only
        a_end = a.max_offset()
        a.kill_writer()

        b.slave_of(a)  # its master is down: it starts, and waits for it
        promoted = admin("promote", "--commitlog", b.address, "--role", "sync_master",
                         "--json")  # fmt: skip
        assert promoted.returncode == 0, promoted
        got = json.loads(promoted.stdout)
        start = got["startOffset"]
        assert got["term"] == 1 and got["haPort"] == b.ha_port and got["formerMaster"] == a.ha
        assert start == acked[-1].phy_offset + acked[-1].size < a_end
        status = b.stub().GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10)
        assert status.replication.role == "sync_master"
        assert status.delivery.enabled and status.retention.retention_hours > 0  # both run now
        assert b.put(2000).results[0].status == 2  # no slave yet: SLAVE_NOT_AVAILABLE

        a.slave_of(b)  # the former master rejoins
        b.wait_slaves(1)
        kept = quarantine.ranges(StoreLayout.of(a.store))
        # one range per commit-log file, each to its last byte that is not zero
        assert kept and kept[0].offset == start and kept[-1].end == a_end
        assert all("parts from this store's at" in r.reason for r in kept)
        new = [r for i in range(3000, 3100, 10) for r in b.put(i, 10).results]
        assert {r.status for r in new} == {0}
        assert_identical(b, a)
        held = b"".join(quarantine.path_of(StoreLayout.of(a.store), r).read_bytes() for r in kept)
        for r in tail:  # the unreplicated messages' records are kept, byte for byte
            assert r.unique_key.encode() in held
    finally:
        a.stop()
        b.stop()


def test_a_slave_copies_its_masters_config(tmp_path):
    """Every ``--config-copy-seconds`` the slave's writer takes the master's topics and delay
    offsets into its config/, and keeps the master's consumer offsets (as its proxy saved
    them) in rmqstore/replica-config/ for its own proxy."""
    master, slave = Node(tmp_path, "a"), Node(tmp_path, "b")
    try:
        master.master(builders=False)
        topics_pb2_grpc.TopicsStub(channel(master.address)).CreateTopic(
            topics_pb2.CreateTopicRequest(name="Orders", queue_nums=2), timeout=10)
        offsets = consumer_offsets.OffsetTable({("Orders", "billing"): {0: 12, 1: 3}})
        # as the master's proxy saves them
        durable.replace_file(master.store / "config" / "consumerOffset.json",
                             consumer_offsets.render(offsets).encode())  # fmt: skip
        slave.slave_of(master, "--config-copy-seconds", "0.2", builders=False)
        copied = StoreLayout.of(slave.store).replica_config_dir / "consumerOffset.json"
        wait_for(copied.exists, 60, "the master's consumer offsets on the slave")
        assert consumer_offsets.parse(copied.read_text()).offsets == offsets.offsets
        topics = topics_pb2_grpc.TopicsStub(channel(slave.address))
        got = topics.GetTopic(topics_pb2.GetTopicRequest(name="Orders"), timeout=10)
        assert got.write_queue_nums == 2
    finally:
        slave.stop()
        master.stop()


def test_a_slave_refuses_to_follow_a_writer_that_is_a_slave_itself(tmp_path):
    """``--ha-master-commitlog`` naming a slave (a promoted node restarted unchanged, pointing
    at its former master): the writer refuses to start, saying why."""
    a, b, c = Node(tmp_path, "a"), Node(tmp_path, "b"), Node(tmp_path, "c")
    try:
        a.master(builders=False)
        b.slave_of(a, builders=False)
        with pytest.raises(RuntimeError, match="is a slave, not a master"):
            c.slave_of(b, builders=False)
    finally:
        for n in (c, b, a):
            n.stop()
