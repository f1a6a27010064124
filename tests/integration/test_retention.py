"""Retention through real processes: a tiny retention time deletes old commitlog segments, then
the builders delete the consume-queue and index files below the new minimum, while puts, pulls
and key queries go on; reads below the minimum answer OFFSET_TOO_SMALL / not found."""

import random
import threading
import time

import grpc
import pytest

from rmqstore.formats import consume_queue as cq
from rmqstore.formats import index_file as ixf
from rmqstore.segments import parse_segment_name
from rmqstore.v1 import commitlog_pb2, common_pb2, query_pb2
from tests.reliability.cluster import INDEX_ENTRIES, INDEX_SLOTS, SEGMENT, Cluster, wait_until

RETENTION_S = 2.0
WRITER = ("--retention-hours", str(RETENTION_S / 3600), "--delete-when", "always",
          "--retention-check-seconds", "0.2")  # fmt: skip
TOPIC = "R"


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "store", flush="async", writer_extra=WRITER).start_all()
    yield c
    c.stop_all()


def _put(cluster: Cluster, prefix: str, n: int, rng: random.Random) -> list:
    msgs = [common_pb2.Message(topic=TOPIC, queue_id=i % 2, body=rng.randbytes(1000),
                               keys=f"{prefix}-{i}") for i in range(n)]  # fmt: skip
    resp = cluster.writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=10)
    return [(m.keys, r) for m, r in zip(msgs, resp.results, strict=True)]


class Traffic(threading.Thread):
    """Puts, pulls and key queries until stopped; anything unexpected is kept."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster, self.stop = cluster, threading.Event()
        self.sent: list = []
        self.problems: list[str] = []
        self.rounds = 0
        self.removing = 0

    def run(self) -> None:
        rng = random.Random(1)
        query = self.cluster.query
        while not self.stop.wait(0.02):
            try:
                self.sent += _put(self.cluster, f"new{self.rounds}", 4, rng)
                pull = query.Pull(query_pb2.PullRequest(topic=TOPIC, queue_id=0, offset=0,
                                                        max_messages=4), timeout=10)  # fmt: skip
                if pull.status == query_pb2.OFFSET_TOO_SMALL:
                    pull = query.Pull(query_pb2.PullRequest(
                        topic=TOPIC, queue_id=0, offset=pull.next_offset, max_messages=4),
                        timeout=10)  # fmt: skip
                if pull.status == query_pb2.MESSAGE_WAS_REMOVING:
                    self.removing += 1  # deleted between the query's look and its read
                elif pull.status != query_pb2.FOUND:
                    self.problems.append(f"pull from the minimum: {pull.status}")
                key = f"old{rng.randrange(30)}-{rng.randrange(100)}"  # found, or not (deleted)
                resp = query.QueryByKey(query_pb2.QueryByKeyRequest(topic=TOPIC, key=key),
                                        timeout=10)  # fmt: skip
                if len(resp.messages) > 1:
                    self.problems.append(f"{key} found {len(resp.messages)} times")
            except grpc.RpcError as e:
                self.problems.append(f"{e.code()}: {e.details()}")  # type: ignore[attr-defined]
            self.rounds += 1


def _files_below(store, low: int) -> list[str]:
    """Consume-queue and index files (never a queue's last, nor the newest index) that only
    point below ``low``."""
    out = []
    for qdir in sorted((store / "consumequeue" / TOPIC).iterdir()):
        files = sorted(p for p in qdir.iterdir() if parse_segment_name(p.name) is not None)
        for p in files[:-1]:
            last = cq.decode(p.read_bytes()[-cq.UNIT_SIZE:])
            if last.commitlog_offset < low:
                out.append(str(p))
    index = sorted((store / "index").iterdir())
    for p in index[:-1]:
        header = ixf.IndexFile(p.read_bytes(), INDEX_SLOTS, INDEX_ENTRIES).header
        if header.end_phy_offset < low:
            out.append(str(p))
    return out


def test_old_segments_and_their_files_go_while_traffic_goes_on(cluster):
    rng = random.Random(0)
    old = []
    for b in range(30):  # 3,000 messages of ~1.1 KiB: about three 1 MiB segments
        old += _put(cluster, f"old{b}", 100, rng)
    traffic = Traffic(cluster)
    traffic.start()
    try:
        low = wait_until(lambda: (o := cluster.offsets().min_offset) >= 2 * SEGMENT and o, 60,
                         "retention to delete two segments")  # fmt: skip
        wait_until(lambda: not _files_below(cluster.store, low), 30,
                   "the builders to delete their files below the minimum")  # fmt: skip
    finally:
        traffic.stop.set()
        traffic.join(30)
    assert traffic.rounds > 10 and not traffic.problems, traffic.problems[:5]
    assert traffic.removing < traffic.rounds / 4
    offsets = cluster.offsets()
    now_ms = time.time() * 1000
    # nothing newer than the retention time went: every recent message is still there
    recent = [(k, r) for k, r in traffic.sent if r.store_timestamp > now_ms - RETENTION_S * 1000]
    assert recent and all(r.phy_offset >= offsets.min_offset for _k, r in recent)
    for key, _r in recent[-20:]:
        resp = cluster.query.QueryByKey(query_pb2.QueryByKeyRequest(topic=TOPIC, key=key),
                                        timeout=30)  # fmt: skip
        assert len(resp.messages) == 1, key
    # below the minimum: a clear answer, not an error
    pull = cluster.query.Pull(query_pb2.PullRequest(topic=TOPIC, queue_id=0, offset=0),
                              timeout=10)  # fmt: skip
    assert pull.status == query_pb2.OFFSET_TOO_SMALL and pull.min_offset > 0
    gone = cluster.query.QueryByKey(query_pb2.QueryByKeyRequest(topic=TOPIC, key="old0-0"),
                                    timeout=30)  # fmt: skip
    assert len(gone.messages) == 0
    for mid in (old[0][1].msg_id, old[0][1].unique_key):  # by id: not found, not an error
        try:
            resp = cluster.query.QueryById(query_pb2.QueryByIdRequest(id=mid, topic=TOPIC),
                                           timeout=30)  # fmt: skip
            assert len(resp.messages) == 0
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, (e.code(), e.details())
    with pytest.raises(grpc.RpcError) as err:
        cluster.writer.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[0]), timeout=10)
    assert "minimum offset" in err.value.details()
    segments = sorted((cluster.store / "commitlog").iterdir())
    assert parse_segment_name(segments[0].name) == offsets.min_offset
    status = cluster.writer.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10).retention
    assert status.deleted_segments >= 2 and status.min_offset == offsets.min_offset
