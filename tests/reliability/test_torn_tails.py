"""Torn and corrupt commitlog tails, across every service.

A store is written by the real services, everything is SIGKILLed, the last record on disk is
damaged in one of several ways, and the services start again. Recovery must end the
commitlog at the last good record, the builders must cut consume-queue units and index
entries that point past it, and no query may return the lost record, while every record
before it is still found. Writing then resumes at the cut, and the new records are found too
(also when they are written before the builders come back).
"""

import os
import time

import grpc
import pytest

from rmqstore.formats import commitlog
from rmqstore.segments import segment_name
from rmqstore.v1 import commitlog_pb2, common_pb2, query_pb2
from tests.reliability.cluster import SEGMENT, Cluster, Sent, verify

pytestmark = pytest.mark.integration
TOPIC = "Torn"


def put_batches(cluster: Cluster, batches: int, size: int, tag: str) -> list[Sent]:
    sent = []
    for b in range(batches):
        msgs = [common_pb2.Message(topic=TOPIC, queue_id=i % 2, tags="TagA",
                                   body=f"{tag}-{b}-{i}".encode() * (i + 1),
                                   keys=f"{tag}-{b}-{i} {tag}-g{b}")
                for i in range(size)]
        resp = cluster.writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=10)
        for m, r in zip(msgs, resp.results, strict=True):
            key, group = m.keys.split(" ")
            sent.append(Sent(key, group, m.tags, m.body, r))
    return sent


def _flip(path, at: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


def _zero(path, at: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(length))


def _properties_at(raw: bytes) -> int:
    """Position of the properties inside an encoded record (after its length field)."""
    rec = commitlog.decode(raw)
    return len(raw) - len(rec.properties.encode())


def damage(store, kind: str, last: Sent, raw: bytes) -> int:
    """Damage the store; return the commitlog end recovery must find."""
    seg = store / "commitlog" / segment_name(last.result.phy_offset - last.result.phy_offset
                                             % SEGMENT)
    pos = last.result.phy_offset % SEGMENT
    size = last.result.size
    cut = last.result.phy_offset
    if kind == "torn-write":  # half the record reached the disk, the rest is zeros
        _zero(seg, pos + size // 2, SEGMENT - pos - size // 2)
    elif kind == "file-truncated-mid-record":
        os.truncate(seg, pos + size // 2)
    elif kind == "body-flipped":  # the body CRC no longer matches
        _flip(seg, pos + raw.index(last.body) + len(last.body) // 2)
    elif kind == "size-flipped":  # the size no longer adds up with the fields
        _flip(seg, pos + commitlog.TOTAL_SIZE_AT + 3, 0x10)
    elif kind == "magic-flipped":
        _flip(seg, pos + commitlog.MAGIC_AT + 2)
    elif kind == "properties-flipped":  # no longer UTF-8
        _flip(seg, pos + _properties_at(raw) + 3)
    elif kind == "tail-zeroed":
        _zero(seg, pos, SEGMENT - pos)
    elif kind == "stray-preallocated-segment":  # an empty file after a gap: removed, no cut
        (store / "commitlog" / segment_name(3 * SEGMENT)).write_bytes(bytes(SEGMENT))
        cut = last.result.phy_offset + size
    else:
        raise AssertionError(kind)
    return cut


KINDS = ["torn-write", "body-flipped", "size-flipped",
         "magic-flipped", "properties-flipped", "tail-zeroed", "stray-preallocated-segment"]


def _lost_is_gone(cluster: Cluster, lost: Sent) -> list[str]:
    """No query returns the lost record; its queue ends where it was."""
    q = cluster.query
    issues = []
    r = lost.result
    resp = q.Pull(query_pb2.PullRequest(topic=TOPIC, queue_id=r.queue_id,
                                        offset=r.queue_offset), timeout=10)
    if any(m.phy_offset == r.phy_offset and m.body == lost.body for m in resp.messages):
        issues.append(f"pull at {r.queue_offset} returns the lost record")
    for key in (lost.key, r.unique_key):
        got = q.QueryByKey(query_pb2.QueryByKeyRequest(topic=TOPIC, key=key), timeout=10)
        if got.messages:
            issues.append(f"key {key} returns {len(got.messages)} records")
    for mid in (r.msg_id, r.unique_key):
        got = q.QueryById(query_pb2.QueryByIdRequest(id=mid, topic=TOPIC), timeout=10)
        if any(m.body == lost.body for m in got.messages):
            issues.append(f"id {mid} returns the lost record")
    return issues


def crash_and_damage(cluster: Cluster, kind: str, last: Sent, kill_query: bool) -> int:
    """SIGKILL the writer and builders (and the query service), damage, restart the writer."""
    raw = cluster.writer.ReadRecords(commitlog_pb2.ReadRecordsRequest(
        offsets=[last.result.phy_offset]), timeout=5).records[0]
    for name in ("query", "index", "consume-queue", "writer"):
        if name != "query" or kill_query:
            cluster.kill(name)
    cut = damage(cluster.store, kind, last, raw)
    cluster.start("writer")
    return cut


def test_damaged_tails_are_cut_everywhere(tmp_path):
    """One store, one round per kind of damage: each round appends, crashes, damages the
    last record and restarts; every record of every round that was not damaged stays found,
    every damaged one is gone from every query. The query service is killed with the others
    in odd rounds and stays up (reading files cut under it) in even rounds."""
    cluster = Cluster(tmp_path / "store").start_all()
    survivors: list[Sent] = []
    lost: list[Sent] = []
    issues: list[str] = []
    try:
        for n, kind in enumerate(KINDS):
            sent = put_batches(cluster, 3, 12, f"r{n}")
            end = cluster.wait_caught_up()
            last = sent[-1]
            cut = crash_and_damage(cluster, kind, last, kill_query=n % 2 == 1)
            recovered = cluster.offsets().max_offset
            stray = (cluster.store / "commitlog" / segment_name(3 * SEGMENT)).exists()
            if recovered != cut or stray:
                issues.append(f"{kind}: recovered to {recovered}, expected {cut}; stray "
                              f"segment left: {stray}")
            cluster.start_many(["consume-queue", "index"] + (["query"] if n % 2 else []))
            cluster.wait_caught_up()
            if cut == end:
                survivors += sent
            else:
                survivors += sent[:-1]
                lost.append(last)
            want = max(s.result.queue_offset for s in survivors
                       if s.result.queue_id == last.result.queue_id) + 1
            # the builder records a cut before it zeroes the units: caught up by its progress,
            # the queue may still end one unit later for a moment
            deadline = time.monotonic() + 30
            while True:
                try:
                    qo = cluster.query.QueueOffsets(query_pb2.QueueOffsetsRequest(
                        topic=TOPIC, queue_id=last.result.queue_id), timeout=5).max_offset
                except grpc.RpcError as e:  # a restarted query service still connecting
                    if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                        raise
                    qo = -1
                if qo == want or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if qo != want:
                issues.append(f"{kind}: queue {last.result.queue_id} ends at {qo}, want {want}")
            found = verify(cluster, survivors if n == len(KINDS) - 1 else sent[:-1])
            round_issues = found.problems + [
                f"{kind}: {i}" for s in lost for i in _lost_is_gone(cluster, s)]
            print(f"round {n} {kind}: commitlog end {end} -> recovered {recovered} "
                  f"(expected {cut}), {found.checked} survivors checked, {len(lost)} lost so "
                  f"far, issues {len(round_issues)}")
            issues += round_issues
        assert set(cluster.stop_all().values()) == {0}
    finally:
        cluster.stop_all()
    print(f"torn tails: {len(KINDS)} kinds of damage, {len(survivors)} records kept, "
          f"{len(lost)} cut, issues {len(issues)}")
    assert not issues, "\n".join(issues[:30])


def test_last_segment_truncated_mid_record(tmp_path):
    cluster = Cluster(tmp_path / "store", with_query=False).start_all()
    try:
        sent = put_batches(cluster, 2, 12, "t")
        cluster.wait_caught_up()
        cut = crash_and_damage(cluster, "file-truncated-mid-record", sent[-1], False)
        recovered = cluster.offsets().max_offset
        print(f"file truncated mid-record: recovered to {recovered}, expected {cut}")
        assert recovered == cut
    finally:
        cluster.stop_all()


def test_writes_before_the_builders_return_do_not_mix_with_stale_entries(tmp_path):
    kind = "torn-write"
    """The builders are down while the writer cuts its tail and accepts new records at the
    cut: their stale entries for the lost record must not survive next to the new ones."""
    store = tmp_path / "store"
    cluster = Cluster(store).start_all()
    try:
        sent = put_batches(cluster, 3, 15, "a")
        cluster.wait_caught_up()
        last = sent[-1]
        cut = crash_and_damage(cluster, kind, last, True)
        assert cluster.offsets().max_offset == cut
        more = put_batches(cluster, 2, 15, "b")  # lands on and past the lost record's bytes
        cluster.start_many(["consume-queue", "index", "query"])
        end = cluster.wait_caught_up(timeout=5)
        found = verify(cluster, sent[:-1] + more)
        issues = found.problems + _lost_is_gone(cluster, last)
        print(f"{kind}, new writes before the builders returned: end {end}, "
              f"{found.checked} checked, issues {len(issues)}")
        assert not issues, "\n".join(issues[:20])
    finally:
        cluster.stop_all()
