"""Members of a cluster through a real name server: each announces itself, each reads all;
a name server that goes away leaves the members last read."""

import pytest

from rmqstore.cluster_members import Peer, PeerBook
from tests import procs
from tests.aio import run

pytestmark = pytest.mark.integration


def test_members_announce_themselves_and_read_each_other() -> None:
    namesrv = procs.start("services.namesrv", "--listen", "127.0.0.1:0")
    a = PeerBook([namesrv.address], "query", "C", Peer("a", "127.0.0.1:1", "10.0.0.1:10911"))
    b = PeerBook([namesrv.address], "query", "C", Peer("b", "127.0.0.1:2", "10.0.0.2:10911"),
                 fresh_s=0.0)  # reads the name server every time
    other = PeerBook([namesrv.address], "query", "Other", Peer("x", "127.0.0.1:3"))
    try:
        assert run(a.announce()) and run(b.announce()) and run(other.announce())
        peers, failed = run(a.peers())
        assert peers == [a.me, b.me] and failed == []  # not the other cluster's
        assert run(b.peers()) == ([a.me, b.me], [])
        namesrv.stop()
        peers, failed = run(b.peers())  # nobody answers: the members last read
        assert peers == [a.me, b.me] and failed == [namesrv.address]
    finally:
        namesrv.stop()
        for book in (a, b, other):
            run(book.close())


def test_a_member_announces_the_store_hosts_its_store_had() -> None:
    namesrv = procs.start("services.namesrv", "--listen", "127.0.0.1:0")
    history = ["10.0.0.7:10911"]
    a = PeerBook([namesrv.address], "query", "C", Peer("a", "127.0.0.1:1", "10.0.0.1:10911"),
                 store_hosts=lambda: list(history))  # fmt: skip
    b = PeerBook([namesrv.address], "query", "C", Peer("b", "127.0.0.1:2"), fresh_s=0.0)
    try:
        assert run(a.announce())
        peers, _ = run(b.peers())
        assert peers[0] == Peer("a", "127.0.0.1:1", "10.0.0.1:10911", ("10.0.0.7:10911",))
        history.append("10.0.0.1:10911")  # read again at each announcement
        assert run(a.announce())
        peers, _ = run(b.peers())
        assert peers[0].store_hosts == ("10.0.0.7:10911", "10.0.0.1:10911")
    finally:
        namesrv.stop()
        for book in (a, b):
            run(book.close())
