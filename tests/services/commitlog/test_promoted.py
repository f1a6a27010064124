"""A promotion outlives the writer's process (real writers on loopback): restarted with its
slave's command line, a promoted writer comes back as the master it was made, until it is
started with ``--demote``."""

import pytest

from rmqstore.layout import StoreLayout
from rmqstore.v1 import commitlog_pb2
from services.commitlog import promoted
from tests.services.commitlog.nodes import Node, admin
from tests.services.commitlog.replicas import wait_for

pytestmark = pytest.mark.integration


def _role(node: Node) -> str:
    return node.stub().GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10).replication.role


def _restart(node: Node, *flags: str) -> None:
    assert node.writer is not None
    node.writer.stop()
    node.start(*flags, builders=False)


def test_a_promoted_slave_restarts_as_master_until_demoted(tmp_path):
    a, b = Node(tmp_path, "a"), Node(tmp_path, "b")
    try:
        a.start("--role", "async_master", builders=False)
        b.slave_of(a, builders=False)
        a.wait_slaves(1)
        a.put(0, 5)
        wait_for(lambda: b.max_offset() == a.max_offset(), 30, "the slave to catch up")
        a.stop()
        done = admin("promote", "--commitlog", b.address, "--role", "sync_master")
        assert done.returncode == 0, done
        kept = promoted.recorded(StoreLayout.of(b.store))
        assert kept == promoted.Promoted("sync_master", b.ha_port, a.ha, 1)

        # restarted as its pod would be: with the slave's command line
        _restart(b, "--role", "slave", "--ha-master", a.ha, "--ha-master-commitlog", a.address)
        assert _role(b) == "sync_master"
        assert any("this store was promoted to sync_master" in line for line in b.writer.lines)
        assert b.put(10).results[0].status == commitlog_pb2.SLAVE_NOT_AVAILABLE  # stored

        # the way back: a slave again, and it stays one
        _restart(b, "--role", "slave", "--ha-master", a.ha, "--demote")
        assert _role(b) == "slave"
        assert promoted.recorded(StoreLayout.of(b.store)) is None
        _restart(b, "--role", "slave", "--ha-master", a.ha)
        assert _role(b) == "slave"
    finally:
        a.stop()
        b.stop()


def test_demote_goes_with_a_slave(tmp_path):
    a = Node(tmp_path, "a")
    with pytest.raises(RuntimeError, match="--demote goes with --role slave"):
        a.start("--role", "async_master", "--demote", builders=False)
