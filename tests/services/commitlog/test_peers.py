"""A master that finds a newer master among its ``--ha-peers`` starts as its slave
(``peers.py``): the decision alone, then real writers on loopback."""

import pytest

from rmqstore import quarantine
from rmqstore.layout import StoreLayout
from rmqstore.v1 import commitlog_pb2
from services.commitlog.peers import Peer, PeerConflict, newer_master, parse
from services.commitlog.terms import Terms
from tests.services.commitlog.nodes import Node, admin
from tests.services.commitlog.replicas import wait_for
from tests.services.commitlog.test_ha_nodes import assert_identical


def _peer(n: int, role: str, term: int, ha_port: int = 10912) -> Peer:
    return Peer(f"pod-{n}.headless:8100", role, term, ha_port)


def test_a_master_of_a_later_term_is_followed_at_its_ha_port():
    got = newer_master(0, [_peer(1, "sync_master", 1), _peer(2, "slave", 1)])
    assert got == _peer(1, "sync_master", 1)
    assert got.ha_address == "pod-1.headless:10912"
    assert Peer("[::1]:8100", "async_master", 3, 8106).ha_address == "[::1]:8106"


def test_the_same_term_an_earlier_one_or_only_slaves_start_a_master():
    assert newer_master(1, [_peer(1, "sync_master", 1)]) is None
    assert newer_master(2, [_peer(1, "async_master", 1)]) is None
    assert newer_master(0, [_peer(1, "slave", 5), _peer(2, "slave", 5)]) is None
    assert newer_master(0, []) is None  # alone, or no peer answered


def test_a_store_never_a_master_follows_any_master():
    assert newer_master(-1, [_peer(1, "async_master", 0)]) == _peer(1, "async_master", 0)


def test_the_latest_of_several_newer_masters_wins():
    peers = [_peer(1, "sync_master", 1), _peer(2, "sync_master", 3), _peer(3, "slave", 3)]
    assert newer_master(0, peers) == _peer(2, "sync_master", 3)


def test_two_masters_of_the_latest_term_refuse_the_start():
    peers = [_peer(1, "sync_master", 2), _peer(2, "async_master", 2), _peer(3, "x", 1)]
    with pytest.raises(PeerConflict, match="pod-1.headless:8100 and pod-2.headless:8100 are "
                                           "all masters of master term 2"):  # fmt: skip
        newer_master(0, peers)


def test_a_newer_master_without_an_ha_port_refuses_the_start():
    with pytest.raises(PeerConflict, match="takes no slaves"):
        newer_master(0, [_peer(1, "sync_master", 1, ha_port=0)])


def test_peer_addresses_are_checked():
    assert parse(" a:1, b:2 ,") == ["a:1", "b:2"]
    assert parse("") == []
    with pytest.raises(ValueError, match="not 'b'"):
        parse("a:1,b")


def _role(node: Node) -> str:
    return node.replication().role


@pytest.mark.integration
def test_a_former_master_restarted_as_a_master_follows_the_promoted_slave(tmp_path):
    """Master a, slave b; a stores a tail b never had, both stop, b is promoted. a restarted
    with its master command line and ``--ha-peers b`` comes up as b's slave, its tail in the
    quarantine, and ends identical to b; restarted so again (it now shares b's term), it
    stays b's slave."""
    a, b = Node(tmp_path, "a"), Node(tmp_path, "b")
    master_line = ("--role", "sync_master", "--ha-peers", b.address)
    try:
        a.start(*master_line)  # b is not running yet: skipped, a starts as the master
        assert _role(a) == "sync_master"
        b.slave_of(a, "--ha-peers", a.address)  # a slave ignores its peers
        a.wait_slaves(1)
        acked = [r for i in range(0, 100, 10) for r in a.put(i, 10).results]
        assert {r.status for r in acked} == {commitlog_pb2.PUT_OK}

        b.kill_writer()
        wait_for(lambda: not a.replication().slaves, 30, "the master to see the kill")
        tail = a.put(1000, 10).results
        assert {r.status for r in tail} == {commitlog_pb2.SLAVE_NOT_AVAILABLE}
        a_end = a.max_offset()
        a.kill_writer()
        b.slave_of(a)
        done = admin("promote", "--commitlog", b.address, "--role", "sync_master", "--json")
        assert done.returncode == 0, done
        start = acked[-1].phy_offset + acked[-1].size
        assert b.put(2000, 5).results[0].status == commitlog_pb2.SLAVE_NOT_AVAILABLE

        a.start(*master_line)
        assert _role(a) == "slave"
        assert a.writer is not None
        said = [line for line in a.writer.lines if "starting as its slave" in line]
        assert len(said) == 1 and f"HA 127.0.0.1:{b.ha_port}" in said[0], a.writer.lines
        assert "promote it back" in said[0]
        b.wait_slaves(1)
        new = [r for i in range(3000, 3100, 10) for r in b.put(i, 10).results]
        assert {r.status for r in new} == {commitlog_pb2.PUT_OK}
        assert_identical(b, a)
        kept = quarantine.ranges(StoreLayout.of(a.store))
        assert kept and kept[0].offset == start and kept[-1].end == a_end
        held = b"".join(quarantine.path_of(StoreLayout.of(a.store), r).read_bytes()
                        for r in kept)  # fmt: skip
        for r in tail:  # the messages no producer was told were replicated
            assert r.unique_key.encode() in held

        a.writer.stop()  # a shares b's term now, but was never its master
        terms = Terms(StoreLayout.of(a.store).progress("commitlog-terms"))
        assert terms.current == 1 and terms.mastered == 0
        a.start(*master_line, builders=False)
        assert _role(a) == "slave"
        b.wait_slaves(1)
        assert b.put(4000).results[0].status == commitlog_pb2.PUT_OK
    finally:
        a.stop()
        b.stop()
