"""The query services of a cluster asking each other over their long-lived peer streams: real
processes (a name server; per broker a writer and a query service on its own store), and a
peer of an older version, without the stream, asked over unary calls."""

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from rmqstore.cluster_members import Peer
from rmqstore.server import channel
from rmqstore.v1 import common_pb2, query_pb2, query_pb2_grpc
from services.query.peer_streams import PeerStreams
from tests import procs
from tests.services.query.store_builder import build_store

pytestmark = pytest.mark.integration
SLOTS, ENTRIES = 64, 256
MEMBERS_S = 60.0  # the members are read from the name server every 5 s
NAMES = ("broker-a", "broker-b")


@dataclass
class Broker:
    name: str
    store: Path
    port: int
    writer: procs.ServiceProcess
    query: procs.ServiceProcess | None = None


def _start_query(b: Broker, namesrv: str) -> None:
    b.query = procs.start("services.query", "--store", str(b.store), "--commitlog",
                          b.writer.address, "--listen", f"127.0.0.1:{b.port}",
                          "--index-slots", str(SLOTS), "--index-entries", str(ENTRIES),
                          "--namesrv", namesrv, "--broker-name", b.name,
                          "--cluster-name", "PeerStreams")  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[procs.ServiceProcess, list[Broker]]]:
    namesrv = procs.start("services.namesrv", "--listen", "127.0.0.1:0")
    brokers: list[Broker] = []
    try:
        for i, name in enumerate(NAMES):
            messages = [{"topic": "T", "queue_id": 0, "keys": "k",
                         "store_timestamp": 1000 + 10 * j + i} for j in range(5)]  # fmt: skip
            store = tmp_path / name
            build_store(store, messages, SLOTS, ENTRIES)
            writer = procs.start("services.commitlog", "--store", str(store), "--listen",
                                 "127.0.0.1:0", "--commitlog-segment-size",
                                 str(4 * 1024 * 1024))  # fmt: skip
            brokers.append(Broker(name, store, procs.free_port(), writer))
            _start_query(brokers[-1], namesrv.address)
        yield namesrv, brokers
    finally:
        for b in brokers:
            if b.query is not None:
                b.query.stop()
            b.writer.stop()
        namesrv.stop()


def _stub(b: Broker) -> query_pb2_grpc.QueryStub:
    assert b.query is not None
    return query_pb2_grpc.QueryStub(channel(b.query.address))


def _ask(stub: query_pb2_grpc.QueryStub) -> query_pb2.QueryByKeyResponse:
    return stub.QueryByKey(query_pb2.QueryByKeyRequest(topic="T", key="k", max_results=100,
                                                       scope=query_pb2.SCOPE_CLUSTER),
                           timeout=60)  # fmt: skip


def _statuses(answer: query_pb2.QueryByKeyResponse) -> dict[str, int]:
    return {s.broker_name: s.answer for s in answer.brokers}


def _bytes_waiting(port: int) -> int:
    """Bytes received and not yet read on the connections to local ``port`` (gRPC listens
    on IPv6 sockets, 127.0.0.1 v4-mapped; a line: local address, state 01 established, then
    tx_queue:rx_queue)."""
    waiting = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            _sl, local, _remote, state, queues = line.split()[:5]
            if local.endswith(f":{port:04X}") and state == "01":
                waiting += int(queues.split(":")[1], 16)
    return waiting


def _until_all_ok(stub: query_pb2_grpc.QueryStub) -> query_pb2.QueryByKeyResponse:
    deadline = time.monotonic() + MEMBERS_S
    while True:
        answer = _ask(stub)
        if set(_statuses(answer).items()) == {(n, query_pb2.ANSWER_OK) for n in NAMES}:
            return answer
        assert time.monotonic() < deadline, f"the brokers did not find each other: {answer}"
        time.sleep(0.2)


def test_the_peer_stream_answers_each_request_and_refuses_one_without_closing(cluster):
    _namesrv, brokers = cluster
    stub = _stub(brokers[1])
    good = query_pb2.PeerRequest(by_key=query_pb2.QueryByKeyRequest(topic="T", key="k"))
    bad = query_pb2.PeerRequest(by_key=query_pb2.QueryByKeyRequest(
        topic="T", key="k", begin_timestamp=-1))  # fmt: skip
    by_id = query_pb2.PeerRequest(by_id=query_pb2.QueryByIdRequest(id="nothing-like-it"))
    replies = list(stub.PeerStream(iter([good, bad, good, by_id]), timeout=30))
    assert [r.WhichOneof("reply") for r in replies] == ["by_key", None, "by_key", None]
    unary = stub.QueryByKey(good.by_key, timeout=30)
    assert replies[0].by_key == replies[2].by_key == unary
    assert len(unary.messages) == 5
    assert replies[1].status_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "negative" in replies[1].error
    with pytest.raises(grpc.RpcError) as e:  # as the unary call refuses it
        stub.QueryById(by_id.by_id, timeout=30)
    assert replies[3].status_code == e.value.code().value[0] != 0
    assert replies[3].error == e.value.details()


def test_a_peer_killed_mid_lookup_is_unreachable_and_answers_again_once_back(cluster):
    namesrv, brokers = cluster
    a, b = brokers
    stub = _stub(a)
    first = _until_all_ok(stub)
    assert len(first.messages) == 10 and not first.partial
    assert b.query is not None
    b.query.proc.send_signal(signal.SIGSTOP)  # the next lookup waits on it...
    procs.wait_stopped(b.query.proc.pid)
    answers: list[query_pb2.QueryByKeyResponse] = []
    asking = threading.Thread(target=lambda: answers.append(_ask(stub)))
    asking.start()
    deadline = time.monotonic() + 30
    while not _bytes_waiting(b.port):  # the lookup reached the frozen peer's socket
        assert time.monotonic() < deadline, "the lookup never reached the frozen peer"
        time.sleep(0.01)
    b.query.proc.kill()  # ...and it dies under that lookup
    b.query.proc.wait(10)
    asking.join(60)
    assert answers, "the lookup did not end"
    answer = answers[0]
    assert answer.partial
    assert _statuses(answer) == {"broker-a": query_pb2.ANSWER_OK,
                                 "broker-b": query_pb2.ANSWER_UNREACHABLE}  # fmt: skip
    assert set(answer.message_brokers) == {"broker-a"} and len(answer.messages) == 5
    again = _ask(stub)  # no stream left to it: unreachable at once
    assert _statuses(again)["broker-b"] == query_pb2.ANSWER_UNREACHABLE
    _start_query(b, namesrv.address)  # back at the same address
    back = _until_all_ok(stub)
    assert len(back.messages) == 10 and not back.partial


def test_a_peer_restarted_while_idle_answers_the_first_lookup_after(cluster):
    namesrv, brokers = cluster
    a, b = brokers
    stub = _stub(a)
    _until_all_ok(stub)  # a's stream to b is open, idle
    assert b.query is not None
    b.query.stop()
    _start_query(b, namesrv.address)
    assert len(_stub(b).QueryByKey(query_pb2.QueryByKeyRequest(topic="T", key="k"),
                                   timeout=30).messages) == 5  # fmt: skip
    answer = _ask(stub)  # over a new stream: the old one ended with b's restart
    assert not answer.partial, answer
    assert len(answer.messages) == 10


def test_a_stalled_peer_is_a_timeout_within_the_deadline_and_answers_again_after(cluster):
    _namesrv, brokers = cluster
    a, b = brokers
    stub = _stub(a)
    _until_all_ok(stub)
    assert b.query is not None
    b.query.proc.send_signal(signal.SIGSTOP)
    try:
        procs.wait_stopped(b.query.proc.pid)
        answer = stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic="T", key="k", max_results=100, scope=query_pb2.SCOPE_CLUSTER), timeout=2)
    finally:
        b.query.proc.send_signal(signal.SIGCONT)
    assert answer.partial, _statuses(answer)
    assert _statuses(answer) == {"broker-a": query_pb2.ANSWER_OK,
                                 "broker-b": query_pb2.ANSWER_TIMEOUT}  # fmt: skip
    assert len(answer.messages) == 5
    pages, cursor = [], ""  # another query: the late answer of b must not be taken for its
    while True:
        page = stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic="T", key="k", max_results=2, cursor=cursor, scope=query_pb2.SCOPE_CLUSTER),
            timeout=60)  # fmt: skip
        assert not page.partial and len(page.messages) <= 2
        pages.append(page)
        if not page.truncated:
            break
        cursor = page.cursor
    got = [(b, m.store_timestamp) for p in pages
           for b, m in zip(p.message_brokers, p.messages, strict=True)]  # fmt: skip
    assert got == [(NAMES[t % 10], t) for t in sorted(
        (1000 + 10 * j + i for i in range(2) for j in range(5)), reverse=True)]


def test_concurrent_lookups_each_get_their_own_answers(cluster):
    """Up to three times as many lookups at once as a peer has streams (those past them go
    over unary calls): each gets its own answer, none partial."""
    _namesrv, brokers = cluster
    stub = _stub(brokers[0])
    _until_all_ok(stub)
    every = [m.store_timestamp for m in _ask(stub).messages]
    results: dict[int, list[int]] = {}

    def ask(limit: int) -> None:
        answer = stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic="T", key="k", max_results=limit, scope=query_pb2.SCOPE_CLUSTER), timeout=60)
        assert not answer.partial, answer.brokers
        results[limit] = [m.store_timestamp for m in answer.messages]

    threads = [threading.Thread(target=ask, args=(limit,)) for limit in range(1, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == {limit: every[:limit] for limit in range(1, 13)}


class _OlderPeer:
    """A peer of a version before ``PeerStream``: the method is not registered, so gRPC itself
    answers it UNIMPLEMENTED (as it answers any unknown method); lookups over unary
    ``QueryByKey`` (one message per call, keyed by the call's number). (A servicer that
    inherits the generated ``PeerStream`` raises NotImplementedError in it, which a busy
    server has answered INTERNAL instead.)"""

    def __init__(self) -> None:
        self.calls = 0

    async def QueryByKey(self, request, context):  # noqa: N802 (gRPC's name)
        self.calls += 1
        return query_pb2.QueryByKeyResponse(messages=[common_pb2.StoredMessage(
            topic=request.topic, unique_key=f"{request.key}-{self.calls}")])  # fmt: skip

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler("rmqstore.v1.Query", {
            "QueryByKey": grpc.unary_unary_rpc_method_handler(
                self.QueryByKey, request_deserializer=query_pb2.QueryByKeyRequest.FromString,
                response_serializer=query_pb2.QueryByKeyResponse.SerializeToString),
        })  # fmt: skip


def test_a_peer_without_the_stream_is_asked_over_unary_calls():
    async def check() -> None:
        older = _OlderPeer()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((older.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        streams = PeerStreams(grpc.aio.insecure_channel)
        try:
            peer = Peer("older", f"127.0.0.1:{port}")
            ask = query_pb2.QueryByKeyRequest(topic="T", key="k")
            first = await streams.ask(peer, ask, 10)  # the stream refused: asked again unary
            second = await streams.ask(peer, ask, 10)  # unary at once, no stream tried
            got = [m.unique_key for m in (*first.messages, *second.messages)]
            assert got == ["k-1", "k-2"]
            assert older.calls == 2
            link = streams.links[peer.address]
            assert not link.open and link.unary_until > time.monotonic()
        finally:
            await streams.close()
            await server.stop(None)

    asyncio.run(check())
