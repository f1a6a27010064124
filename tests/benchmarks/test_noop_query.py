"""The query benchmarks' ceiling: ``benchmarks.noop_query`` answers with the answer it was
given, and reads that answer's records from the real writer only when told to."""

import re
import urllib.request

import grpc
import pytest

from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs

pytestmark = pytest.mark.integration


def _records_read(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    found = re.search(r'^rmqstore_writer_read_records_total\{status="ok"\} (\S+)$', text, re.M)
    return float(found[1]) if found else 0.0


def test_answers_with_its_answer_after_reading_its_records(tmp_path):
    port = procs.free_port()
    writer = procs.start("services.commitlog", "--store", str(tmp_path / "store"),
                         "--listen", "127.0.0.1:0", "--metrics-port", str(port))
    try:
        with channel(writer.address) as ch:
            put = commitlog_pb2_grpc.CommitLogStub(ch).PutBatch(commitlog_pb2.PutBatchRequest(
                messages=[common_pb2.Message(topic="Orders", queue_id=0, body=b"x" * i)
                          for i in range(1, 4)]))
        answer = query_pb2.PullResponse(next_offset=3, messages=[
            common_pb2.StoredMessage(topic="Orders", phy_offset=r.phy_offset, body=b"x")
            for r in put.results])
        path = tmp_path / "answer.bin"
        path.write_bytes(answer.SerializeToString())
        for extra, reads in ((["--commitlog", writer.address], 3), ([], 0)):
            noop = procs.start("benchmarks.noop_query", "--method", "Pull",
                               "--response", str(path), *extra)
            try:
                with channel(noop.address) as ch:
                    stub = query_pb2_grpc.QueryStub(ch)
                    before = _records_read(port)
                    for _ in range(2):
                        assert stub.Pull(query_pb2.PullRequest(topic="Orders")) == answer
                    # the writer counts a read before it answers it
                    assert _records_read(port) == before + 2 * reads
                    with pytest.raises(grpc.RpcError) as e:
                        stub.QueryByKey(query_pb2.QueryByKeyRequest(topic="Orders", key="k"))
                    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
            finally:
                noop.stop()
    finally:
        writer.stop()
