"""Cluster-wide lookups merged from fake brokers, checked against an oracle: every match of
every broker, newest first, once, in pages of exactly the limit."""

import base64
import json
import random

import grpc
import pytest

from rmqstore import metrics
from rmqstore.cluster_members import Peer
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats.hosts import parse_host
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.v1 import common_pb2, query_pb2
from services.query.cluster_lookup import ClusterLookup, decode_cursor
from services.query.metrics import QueryObserver
from services.query.servicer import QueryServicer
from tests.aio import run


class Unreachable(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                         "connection refused")  # fmt: skip


class FakeBroker:
    """One broker's matches, newest (highest physical offset) first; answers at most ``cap``
    per page (as a query budget cuts a page short)."""

    def __init__(self, name: str, times: list[int], cap: int = 10**9) -> None:
        self.peer = Peer(name, f"{name}:1", f"10.0.0.{len(name)}:10911")
        self.cap = cap
        self.down = False
        phy = 0
        msgs = []
        for t in sorted(times):
            msgs.append(common_pb2.StoredMessage(store_timestamp=t, phy_offset=phy,
                                                 topic="T", keys="k"))  # fmt: skip
            phy += 100
        self.messages = msgs[::-1]

    def by_key(self, req: query_pb2.QueryByKeyRequest) -> query_pb2.QueryByKeyResponse:
        start = int(req.cursor) if req.cursor else 0
        rest = [(i, m) for i, m in enumerate(self.messages)
                if i >= start and (not req.below_phy_offset or m.phy_offset < req.below_phy_offset)]
        page = rest[:min(req.max_results, self.cap)]
        resp = query_pb2.QueryByKeyResponse(messages=[m for _, m in page])
        if len(rest) > len(page):
            resp.truncated = True
            resp.cursor = str(rest[len(page)][0])
        return resp


def _cluster(brokers: list[FakeBroker]) -> ClusterLookup:
    by_name = {b.peer.name: b for b in brokers}

    async def members():
        return sorted(b.peer for b in brokers), []

    async def ask(peer, request, timeout):
        broker = by_name[peer.name]
        if broker.down:
            raise Unreachable()
        if isinstance(request, query_pb2.QueryByKeyRequest):
            return broker.by_key(request)
        return query_pb2.QueryByIdResponse(
            messages=[m for m in broker.messages if m.unique_key == request.id])

    return ClusterLookup(members, ask)


def _oracle(brokers: list[FakeBroker]) -> list[tuple[str, int]]:
    every = [(b.peer.name, m) for b in brokers for m in b.messages]
    every.sort(key=lambda x: (-x[1].store_timestamp, x[0], -x[1].phy_offset))
    return [(name, m.phy_offset) for name, m in every]


def _pages(lookup: ClusterLookup, limit: int):
    cursor = ""
    while True:
        req = query_pb2.QueryByKeyRequest(topic="T", key="k", max_results=limit, cursor=cursor,
                                          scope=query_pb2.SCOPE_CLUSTER)  # fmt: skip
        answer = run(lookup.by_key(req, 5.0))
        yield answer
        if not answer.truncated:
            return
        cursor = answer.cursor


@pytest.mark.parametrize("limit", [1, 3, 7, 64])
@pytest.mark.parametrize("cap", [10**9, 2])
@pytest.mark.parametrize("seed", [1, 2])
def test_pages_are_the_global_order_once(limit, cap, seed):
    rnd = random.Random(seed)
    brokers = [FakeBroker(n, [rnd.randrange(0, 40) for _ in range(rnd.randrange(0, 25))], cap)
               for n in ("a", "bb", "ccc")]  # fmt: skip
    expected = _oracle(brokers)
    got = []
    pages = list(_pages(_cluster(brokers), limit))
    for page in pages:
        assert not page.partial
        assert len(page.messages) <= limit
        got += [(b, m.phy_offset) for b, m in zip(page.brokers, page.messages, strict=True)]
    assert got == expected
    if cap > limit:  # no broker cuts a page short: every page but the last is full
        assert all(len(p.messages) == limit for p in pages[:-1])


def test_an_unreachable_broker_makes_the_answer_partial_and_is_named():
    brokers = [FakeBroker(n, list(range(10))) for n in ("a", "bb", "ccc")]
    brokers[1].down = True
    pages = list(_pages(_cluster(brokers), 4))
    for page in pages:
        assert page.partial
        status = {a.peer.name: a.status for a in page.statuses}
        assert status == {"a": query_pb2.ANSWER_OK, "bb": query_pb2.ANSWER_UNREACHABLE,
                          "ccc": query_pb2.ANSWER_OK}  # fmt: skip
    got = [(b, m.phy_offset) for p in pages for b, m in zip(p.brokers, p.messages, strict=True)]
    assert got == _oracle([brokers[0], brokers[2]])


def test_a_broker_back_on_a_later_page_goes_on_from_its_position():
    brokers = [FakeBroker(n, list(range(6))) for n in ("a", "bb")]
    lookup = _cluster(brokers)
    req = query_pb2.QueryByKeyRequest(topic="T", key="k", max_results=4,
                                      scope=query_pb2.SCOPE_CLUSTER)  # fmt: skip
    brokers[1].down = True
    first = run(lookup.by_key(req, 5.0))
    assert first.partial and first.truncated
    state = decode_cursor(first.cursor, bytes.fromhex(_qhash(first.cursor)))
    assert state["bb"] == ["", 0]  # not answered: asked again from its start


def _qhash(cursor: str) -> str:
    return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["q"]


def test_a_cursor_of_another_query_is_refused():
    brokers = [FakeBroker(n, list(range(6))) for n in ("a", "bb")]
    lookup = _cluster(brokers)
    first = run(lookup.by_key(query_pb2.QueryByKeyRequest(
        topic="T", key="k", max_results=2, scope=query_pb2.SCOPE_CLUSTER), 5.0))
    other = query_pb2.QueryByKeyRequest(topic="T", key="other", max_results=2,
                                        cursor=first.cursor, scope=query_pb2.SCOPE_CLUSTER)
    with pytest.raises(InvalidArgumentError):
        run(lookup.by_key(other, 5.0))


def _recording(lookup: ClusterLookup) -> tuple[ClusterLookup, list[str]]:
    """``lookup`` noting the name of every broker it asks."""
    asked: list[str] = []
    inner = lookup.ask

    async def ask(peer, request, timeout):
        asked.append(peer.name)
        return await inner(peer, request, timeout)

    lookup.ask = ask
    return lookup, asked


def test_an_offset_id_goes_only_to_the_broker_it_names():
    brokers = [FakeBroker(n, [1]) for n in ("a", "bb", "ccc")]
    host = parse_host(brokers[2].peer.store_host)
    msg_id = offset_msg_id(host.ip, host.port, 0)
    lookup, asked = _recording(_cluster(brokers))
    answer = run(lookup.by_id(query_pb2.QueryByIdRequest(id=msg_id), 5.0))
    assert asked == ["ccc"]
    assert {a.peer.name: a.status for a in answer.statuses}["a"] == query_pb2.ANSWER_NOT_ASKED


def test_an_offset_id_of_a_former_store_host_goes_to_the_broker_that_had_it():
    brokers = [FakeBroker(n, [1]) for n in ("a", "bb", "ccc")]
    old = "10.9.9.9:10911"  # broker bb's address before it moved
    brokers[1].peer = Peer("bb", "bb:1", "10.0.0.2:10911", (old, "10.0.0.2:10911"))
    host = parse_host(old)
    lookup, asked = _recording(_cluster(brokers))
    run(lookup.by_id(query_pb2.QueryByIdRequest(id=offset_msg_id(host.ip, host.port, 0)), 5.0))
    assert asked == ["bb"]
    # a host two members had (a store copied): every member is asked
    brokers[2].peer = Peer("ccc", "ccc:1", "10.0.0.3:10911", (old, "10.0.0.3:10911"))
    asked.clear()
    run(lookup.by_id(query_pb2.QueryByIdRequest(id=offset_msg_id(host.ip, host.port, 0)), 5.0))
    assert sorted(asked) == ["a", "bb", "ccc"]


def test_a_unique_key_on_several_brokers_is_found_on_all():
    brokers = [FakeBroker(n, [5, 6]) for n in ("a", "bb", "ccc")]
    for b in brokers[:2]:
        b.messages[0].unique_key = "AC11000100002A9F0000000000000001"
    answer = run(_cluster(brokers).by_id(
        query_pb2.QueryByIdRequest(id="AC11000100002A9F0000000000000001"), 5.0))
    assert sorted(answer.brokers) == ["a", "bb"]
    assert not answer.partial


def test_a_partial_answer_is_counted_as_partial():
    brokers = [FakeBroker(n, list(range(3))) for n in ("a", "bb")]
    brokers[1].down = True
    registry = metrics.new_registry("query")
    servicer = QueryServicer(None, None, None, QueryObserver(registry), _cluster(brokers))
    req = query_pb2.QueryByKeyRequest(topic="T", key="k", scope=query_pb2.SCOPE_CLUSTER)
    resp = run(servicer.QueryByKey(req, None))
    assert resp.partial and len(resp.messages) == 3
    assert registry.get_sample_value(
        "rmqstore_query_requests_total", {"kind": "key", "outcome": "partial"}) == 1


def test_a_malformed_id_is_refused_once_not_per_broker():
    brokers = [FakeBroker(n, [1]) for n in ("a", "bb")]
    with pytest.raises(InvalidArgumentError):
        run(_cluster(brokers).by_id(query_pb2.QueryByIdRequest(id="not-an-id"), 5.0))
