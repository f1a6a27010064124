"""Queries while the real builders write: writer, consume-queue and index builders, query.

Small consume-queue files and index files make the builders roll files while the query
service reads them; every answer seen on the way must be correct for the data visible so far
(a subset of what was put, exact filter, newest first), and the final answers exact.
"""

import time

import grpc
import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs

pytestmark = pytest.mark.integration
SLOTS, ENTRIES, CQ_UNITS = 7, 60, 50


@pytest.fixture
def live(tmp_path):
    store = tmp_path / "store"
    started = []
    try:
        writer = procs.start("services.commitlog", "--store", str(store), "--listen",
                             "127.0.0.1:0", "--commitlog-segment-size", str(256 * 1024),
                             "--queues-per-topic", "2")
        started.append(writer)
        common = ["--store", str(store), "--commitlog", writer.address, "--listen",
                  "127.0.0.1:0", "--flush-interval-ms", "50"]
        started.append(procs.start("services.indexer", "consume-queue", *common,
                                   "--cq-entries-per-file", str(CQ_UNITS)))
        started.append(procs.start("services.indexer", "index", *common,
                                   "--index-slots", str(SLOTS), "--index-entries", str(ENTRIES)))
        query = procs.start("services.query", "--store", str(store), "--commitlog",
                            writer.address, "--listen", "127.0.0.1:0",
                            "--index-slots", str(SLOTS), "--index-entries", str(ENTRIES))
        started.append(query)
        yield (commitlog_pb2_grpc.CommitLogStub(channel(writer.address)),
               query_pb2_grpc.QueryStub(channel(query.address)))
    finally:
        for p in reversed(started):
            p.stop()


def _check_answer(resp, key: str, put: dict[int, common_pb2.Message]) -> list[int]:
    offs = [m.phy_offset for m in resp.messages]
    assert offs == sorted(offs, reverse=True)
    for m in resp.messages:
        assert m.phy_offset in put and m.topic == "Live"
        assert key in m.keys.split(" ") or m.unique_key == key
    return offs


def _poll(fn, deadline_s: float = 60.0):
    deadline = time.monotonic() + deadline_s
    while True:
        out = fn()
        if out is not None:
            return out
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached before the deadline")
        time.sleep(0.05)  # polling a condition, not waiting for a fixed time


def test_queries_while_builders_write(live):
    writer, query = live
    put: dict[int, common_pb2.Message] = {}
    by_key: dict[str, list[int]] = {}
    results = []
    topic_seen = False
    for batch in range(12):
        msgs = [common_pb2.Message(topic="Live", body=f"m{batch}-{i}".encode(),
                                   keys=f"live-{i % 5} b{batch}", tags=f"T{i % 3}")
                for i in range(25)]
        resp = writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=30)
        for m, r in zip(msgs, resp.results, strict=True):
            put[r.phy_offset] = m
            results.append(r)
            for k in m.keys.split(" "):
                by_key.setdefault(k, []).append(r.phy_offset)
        for k in ("live-0", "live-3", f"b{batch}"):
            try:
                got = query.QueryByKey(query_pb2.QueryByKeyRequest(topic="Live", key=k,
                                                                   max_results=1000), timeout=10)
            except grpc.RpcError as e:
                # until the consume-queue builder has made the topic's directory, the files
                # hold no such topic; once they did, they always do
                assert e.code() == grpc.StatusCode.NOT_FOUND and not topic_seen, e
                continue
            topic_seen = True
            _check_answer(got, k, put)

    def all_found():
        for k, offs in by_key.items():
            got = query.QueryByKey(query_pb2.QueryByKeyRequest(topic="Live", key=k,
                                                               max_results=1000), timeout=10)
            if _check_answer(got, k, put) != sorted(offs, reverse=True):
                return None
        return True

    _poll(all_found)
    for r in results[::37]:
        (m,) = query.QueryById(query_pb2.QueryByIdRequest(id=r.msg_id), timeout=10).messages
        assert m.phy_offset == r.phy_offset
        (m,) = query.QueryById(query_pb2.QueryByIdRequest(id=r.unique_key), timeout=10).messages
        assert m.phy_offset == r.phy_offset
    for qid in sorted({r.queue_id for r in results}):
        want = [r.phy_offset for r in results if r.queue_id == qid]
        count = len(want)

        def queue_built(qid: int = qid, n: int = count) -> bool | None:
            try:
                resp = query.QueueOffsets(query_pb2.QueueOffsetsRequest(topic="Live",
                                                                        queue_id=qid), timeout=10)
            except grpc.RpcError:
                return None
            return True if resp.max_offset == n else None

        _poll(queue_built)
        got, offset = [], 0
        while True:
            resp = query.Pull(query_pb2.PullRequest(topic="Live", queue_id=qid, offset=offset,
                                                    max_messages=32), timeout=10)
            if resp.status == query_pb2.OFFSET_OVERFLOW_ONE:
                break
            assert resp.status == query_pb2.FOUND
            got.extend(m.phy_offset for m in resp.messages)
            offset = resp.next_offset
        assert got == want
