"""A consumer group whose offset is outside its queue's bounds, through real processes
(``rmqstore serve``, the official Python SimpleConsumer, ``rmqstore consume`` and
``rmqstore group describe``):

* below: retention deleted the commitlog segments its next messages were in, while the
  consume-queue file pointing at them stays; the group is moved up to the first message
  still stored, counts what it skipped (a FIFO group's message in flight too), and
  receives again (a new group starts there; a pull below it is answered with that offset,
  and counted);
* above: the commitlog was cut at a damaged record on restart, so the queue ends below the
  group's committed offset; the offset is corrected to the queue's end and the messages
  that take those offsets again are delivered."""

import json
import subprocess
import sys
import urllib.request

import pytest

from rmqstore.formats import consume_queue as cq
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs
from tests.services.proxy.conftest import Serve, client_env
from tests.services.proxy.test_consumers import Run, _until, committed, metric, send

pytestmark = pytest.mark.integration
SEGMENT = 1 << 20
RETENTION = ("--commitlog-segment-size", str(SEGMENT), "--retention-hours", str(2 / 3600),
             "--delete-when", "always", "--retention-check-seconds", "0.2")  # fmt: skip


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=procs.ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def describe(serve: Serve, group: str) -> dict:
    r = cli("group", "describe", group, "--proxy", serve.proxy, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _put(writer, topic: str, bodies: list[str], queues: int) -> list:
    msgs = [common_pb2.Message(topic=topic, queue_id=i % queues, body=b.encode(), keys=f"k{i}")
            for i, b in enumerate(bodies)]  # fmt: skip
    return list(writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=30).results)


def _query_metric(serve: Serve, name: str) -> float:
    with urllib.request.urlopen(f"http://{serve.address(11)}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name + " "))


def _explain(run: Run, got: set, want: set, serve: Serve) -> str:
    short = lambda bodies: sorted(b[:10] for b in bodies)[:20]  # noqa: E731
    return (f"acked {len(got)} of {len(want)}; missing {short(want - got)}; unexpected "
            f"{short(got - want)}; stderr {''.join(run.err)[-2000:]}; serve: "
            f"{''.join(serve.lines[-30:])[-4000:]}")


def test_a_group_behind_retention_skips_what_is_gone_and_receives_again(tmp_path, client_runtimes):
    env = client_env(tmp_path / "home")
    serve = Serve(tmp_path / "store", *RETENTION, "--queues-per-topic", "2")
    try:
        writer = commitlog_pb2_grpc.CommitLogStub(channel(serve.address(0)))
        r = cli("topic", "create", "Old", "--queues", "2", "--commitlog", serve.address(0))
        assert r.returncode == 0, r.stderr
        put = _put(writer, "Old", ["first"], 2)
        # the group exists (at offset 0 of both queues) before anything is deleted
        r = cli("group", "reset", "Behind", "--topic", "Old", "--to-offset", "0",
                "--proxy", serve.proxy)  # fmt: skip
        assert r.returncode == 0, r.stderr
        old = [f"old-{i}-" + "x" * 1000 for i in range(1500)]  # ~1.6 segments
        for at in range(0, len(old), 300):
            put += _put(writer, "Old", old[at : at + 300], 2)
        bodies = ["first", *old]
        # retention deletes the first segment; the queues' files, partly below it, stay
        low = _until("the first segment deleted", lambda: writer.GetOffsets(
            commitlog_pb2.GetOffsetsRequest(), timeout=10).min_offset)  # fmt: skip
        assert low % SEGMENT == 0
        assert sorted(p.name for p in (serve.store / "consumequeue" / "Old" / "0").iterdir()) == [
            "00000000000000000000"]  # fmt: skip
        gone = {b for b, r in zip(bodies, put, strict=True) if r.phy_offset < low}
        kept = set(bodies) - gone
        assert gone and kept
        new = set(send(env, serve, "Old", 3, prefix="new").values())

        behind = Run(env, "simple", serve.proxy, "Behind", "Old", str(len(kept) + 3))
        code = behind.wait()
        got = {e["body"] for e in behind.of("acked")}
        assert (code, got) == (0, kept | new), _explain(behind, got, kept | new, serve)
        assert metric(serve, "rmqstore_consumer_skipped_messages_total", "Behind", "Old") == len(
            gone)  # fmt: skip
        d = describe(serve, "Behind")
        old_queues = [q for q in d["queues"] if q["topic"] == "Old"]
        assert sum(q["skipped"] for q in old_queues) == len(gone)
        assert sum(q["lag"] for q in old_queues) == 0
        text = cli("group", "describe", "Behind", "--proxy", serve.proxy)
        assert text.returncode == 0 and f"skipped {len(gone)}" in text.stdout, text.stdout

        # a new group consuming from the first message starts at the first one still stored
        fresh = Run(env, "simple", serve.proxy, "Fresh", "Old", str(len(kept) + 3))
        code = fresh.wait()
        got = {e["body"] for e in fresh.of("acked")}
        assert (code, got) == (0, kept | new), _explain(fresh, got, kept | new, serve)
        assert sum(q["skipped"] for q in describe(serve, "Fresh")["queues"]) == 0
        # a pull below the first message still stored is moved up to it, and counted
        first_kept = min(r.queue_offset for r in put if r.queue_id == 1 and r.phy_offset >= low)
        query = query_pb2_grpc.QueryStub(channel(serve.address(1)))
        pull = query.Pull(query_pb2.PullRequest(topic="Old", queue_id=1, offset=0), timeout=30)
        assert (pull.status, pull.next_offset) == (query_pb2.OFFSET_TOO_SMALL, first_kept)
        pull = query.Pull(query_pb2.PullRequest(topic="Old", queue_id=1, offset=first_kept,
                                                max_messages=1), timeout=30)  # fmt: skip
        assert pull.status == query_pb2.FOUND and pull.messages[0].body.decode() in kept
        assert _query_metric(serve, "rmqstore_query_pull_skipped_offsets_total") == first_kept
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])


def test_a_fifo_groups_message_in_flight_that_retention_deleted_is_skipped(tmp_path):
    serve = Serve(tmp_path / "store", *RETENTION, "--fifo-group", "F")
    try:
        writer = commitlog_pb2_grpc.CommitLogStub(channel(serve.address(0)))
        r = cli("topic", "create", "Fi", "--queues", "1", "--commitlog", serve.address(0))
        assert r.returncode == 0, r.stderr
        put = _put(writer, "Fi", ["first"], 1)
        # handed out and never acknowledged: a FIFO group delivers it again, in place, at the
        # next receive after its invisible time (1 s), and nothing else of its queue before
        r = cli("consume", "--proxy", serve.proxy, "--group", "F", "--topic", "Fi", "--json",
                "--no-ack", "--invisible", "1", "--count", "1")  # fmt: skip
        assert r.returncode == 0 and json.loads(r.stdout)["body"] == "first", r.stderr
        old = [f"old-{i}-" + "x" * 100_000 for i in range(16)]  # ~1.6 segments
        for body in old:
            put += _put(writer, "Fi", [body], 1)
        low = _until("the first segment deleted", lambda: writer.GetOffsets(
            commitlog_pb2.GetOffsetsRequest(), timeout=10).min_offset)  # fmt: skip
        bodies = ["first", *old]
        gone = [b for b, r in zip(bodies, put, strict=True) if r.phy_offset < low]
        kept = [b for b, r in zip(bodies, put, strict=True) if r.phy_offset >= low]
        assert "first" in gone and kept
        got = cli("consume", "--proxy", serve.proxy, "--group", "F", "--topic", "Fi", "--json",
                  "--wait", "3")  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert [json.loads(line)["body"] for line in got.stdout.splitlines()] == kept  # in order
        (q,) = [q for q in describe(serve, "F")["queues"] if q["topic"] == "Fi"]
        assert (q["skipped"], q["committedOffset"], q["lag"]) == (len(gone), len(bodies), 0)
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])


def test_a_group_beyond_a_cut_queue_end_is_corrected_and_gets_new_messages(
    tmp_path, client_runtimes
):
    env = client_env(tmp_path / "home")
    store = tmp_path / "store"
    serve = Serve(store, "--queues-per-topic", "1")
    try:
        send(env, serve, "Cut", 5, prefix="before")
        r = Run(env, "simple", serve.proxy, "G", "Cut", "5")
        assert r.wait() == 0, r.explain()
        _until("the group's offset flushed", lambda: committed(store, "Cut", "G") == 5)
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])
    # the third message's bytes never reached the disk (async flush, power loss): recovery
    # cuts the commitlog there, and the consume-queue builder its queue
    unit = cq.decode((store / "consumequeue" / "Cut" / "0" / "00000000000000000000").read_bytes(),
                     2 * cq.UNIT_SIZE)  # fmt: skip
    segment = sorted((store / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:
        f.seek(unit.commitlog_offset)
        f.write(bytes(unit.size))
    serve = Serve(store, "--queues-per-topic", "1")
    try:
        # no consumer needed: the proxy corrects the offset (2, the queue's end) on its own
        corrected = lambda: [  # noqa: E731
            (q["committedOffset"], q["maxOffset"], q["lag"])
            for q in describe(serve, "G")["queues"] if q["topic"] == "Cut"
        ] == [(2, 2, 0)]  # fmt: skip
        _until("the offset corrected", corrected)
        new = send(env, serve, "Cut", 3, prefix="after")
        got = cli("consume", "--proxy", serve.proxy, "--group", "G", "--topic", "Cut", "--json",
                  "--wait", "5", "--count", "3")  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert {json.loads(line)["body"] for line in got.stdout.splitlines()} == set(new.values())
        assert metric(serve, "rmqstore_consumer_offset_corrections_total", "G", "Cut") == 1
        (q,) = [q for q in describe(serve, "G")["queues"] if q["topic"] == "Cut"]
        assert (q["committedOffset"], q["maxOffset"], q["lag"]) == (5, 5, 0)
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])
    logged = [line for line in serve.lines if "beyond the queue's end" in line]
    assert len(logged) == 1, logged
