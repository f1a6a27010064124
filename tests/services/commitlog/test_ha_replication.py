"""The master's replication state on its own (no sockets): which status a put gets, and when
its future settles."""

import asyncio
from types import SimpleNamespace

import pytest

from services.commitlog.ha_master import (
    FLUSH_SLAVE_TIMEOUT,
    PUT_OK,
    SLAVE_NOT_AVAILABLE,
    NotEnoughReplicasError,
    Replication,
    SlaveLink,
)
from tests.aio import run

MIB = 1 << 20


def _replication(role: str = "sync_master", **kw) -> Replication:
    engine = SimpleNamespace(max_offset=0, min_offset=0, config=SimpleNamespace(segment_size=MIB))
    return Replication(engine, role, **kw)


def _link(r: Replication, acked: int = -1) -> SlaveLink:
    link = SlaveLink("127.0.0.1:1")
    link.acked = acked
    r.slaves.add(link)
    return link


def test_async_master_is_put_ok_whatever_the_slaves():
    r = _replication("async_master")
    assert r.replicated(100) == PUT_OK
    _link(r)
    assert r.replicated(200) == PUT_OK


def test_sync_master_without_a_slave_or_with_one_too_far_behind():
    async def body():
        r = _replication(fallbehind_max=10 * MIB)
        assert r.replicated(100) == SLAVE_NOT_AVAILABLE
        link = _link(r, 0)
        r.acknowledge(link, 1000)
        r.engine.max_offset = 1000 + 10 * MIB
        assert r.replicated(1000 + 10 * MIB) == SLAVE_NOT_AVAILABLE  # 10 MiB behind: too far
        assert r.in_sync() == 0
        assert r.replicated(999) == PUT_OK  # acknowledged already

    run(body())


def test_acks_settle_waiting_puts_in_order_and_never_go_down():
    async def body():
        r = _replication(slave_timeout_s=30)
        waited: list[float] = []
        r.waited = waited.append
        a, b = _link(r, 0), _link(r, 0)
        first, second = r.replicated(100), r.replicated(200)
        assert isinstance(first, asyncio.Future) and isinstance(second, asyncio.Future)
        r.acknowledge(a, 150)
        assert first.done() and first.result() == PUT_OK and not second.done()
        r.acknowledge(b, 120)  # another slave behind: the acknowledged offset stays
        assert r.acked == 150 and not second.done()
        r.acknowledge(b, 200)  # any one slave is enough
        assert second.result() == PUT_OK and len(waited) == 2

    run(body())


def test_no_ack_within_the_slave_timeout():
    async def body():
        r = _replication(slave_timeout_s=0.05)
        _link(r, 0)
        fut = r.replicated(100)
        assert isinstance(fut, asyncio.Future)
        assert await asyncio.wait_for(fut, 10) == FLUSH_SLAVE_TIMEOUT

    run(body())


def test_min_sync_replicas_counts_reporting_slaves_close_enough():
    r = _replication("async_master", min_sync_replicas=2)
    with pytest.raises(NotEnoughReplicasError, match="0 slave"):
        r.check_put()
    _link(r, 0)
    _link(r)  # connected, no report yet: not in sync
    with pytest.raises(NotEnoughReplicasError, match="1 slave"):
        r.check_put()
    _link(r, 0)
    r.check_put()
