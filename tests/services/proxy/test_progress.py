"""Consumer progress: the committed offset moves over the settled prefix only, and what is
flushed to config/ comes back after a restart — never ahead of what was settled; one proxy
per store writes it."""

import subprocess
import sys

import pytest

from rmqstore.formats import consumer_offsets, subscription_groups
from rmqstore.formats.javahash import java_hash
from services.proxy.deliver import TagFilter
from services.proxy.progress import Flight, ProgressFiles, QueueProgress
from tests import procs


def test_committed_moves_over_the_settled_prefix_only():
    p = QueueProgress(committed=10, next=15)
    assert not p.settle(12) and p.committed == 10
    assert not p.settle(11) and p.committed == 10
    assert p.settle(10) and p.committed == 13
    assert not p.settle(5) and p.committed == 13  # below committed: nothing moves
    assert p.settled == set()


def test_flushed_state_comes_back_with_versions(tmp_path):
    files = ProgressFiles(tmp_path)
    p = QueueProgress(committed=3, next=8, settled={4, 6})
    p.inflight = {3: Flight(2, 1000, 77), 5: Flight(1, 2000, 78), 7: Flight(1, 3000, 79)}
    offsets = consumer_offsets.OffsetTable()
    files.save({("g", "T"): {0: p, 1: QueueProgress(5, 5)}}, offsets)
    state, _ = files.load()
    back = state[("g", "T")]
    assert (back[0].committed, back[0].next, back[0].settled) == (3, 8, {4, 6})
    assert {o: (f.attempt, f.visible_at, f.version) for o, f in back[0].inflight.items()} == {
        3: (2, 1000, 77), 5: (1, 2000, 78), 7: (1, 3000, 79)}  # fmt: skip
    assert (back[1].committed, back[1].next, back[1].inflight) == (5, 5, {})
    text = (tmp_path / "config" / "consumerOffset.json").read_text()
    assert '"T@g":{0:3,1:5\n' in text  # RocketMQ's format


def test_offsets_older_than_the_inflight_file_are_handed_out_again_not_skipped(tmp_path):
    files = ProgressFiles(tmp_path)
    old = consumer_offsets.render(consumer_offsets.OffsetTable({("T", "g"): {0: 0}}))
    p = QueueProgress(committed=3, next=5)
    p.inflight = {3: Flight(1, 500, 9), 4: Flight(1, 500, 10)}
    files.save({("g", "T"): {0: p}}, consumer_offsets.OffsetTable())
    (tmp_path / "config" / "consumerOffset.json").write_text(old)  # a crash between the writes
    state, _ = files.load()
    q = state[("g", "T")][0]
    assert q.committed == 0 and q.next == 5
    assert sorted(q.inflight) == [0, 1, 2, 3, 4]  # 0..2 again (lost track), none skipped
    assert all(q.inflight[o].lost_track for o in (0, 1, 2))


def test_a_rocketmq_offset_file_alone_resumes_at_its_offsets(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"T@g":{0:42,1:7\n\t\t}\n\t}\n}')  # fmt: skip
    state, offsets = ProgressFiles(tmp_path).load()
    assert {q: (p.committed, p.next) for q, p in state[("g", "T")].items()} == {
        0: (42, 42), 1: (7, 7)}  # fmt: skip
    assert offsets.offsets[("T", "g")] == {0: 42, 1: 7}


def test_tag_filters():
    assert TagFilter("*").matches("x") and TagFilter("").matches("") and TagFilter(" * ").all
    f = TagFilter("a||b")
    assert f.matches("a") and f.matches("b") and not f.matches("c") and not f.matches("")
    assert f.maybe(java_hash("a")) and not f.maybe(java_hash("c"))


def test_an_older_render_finishing_late_is_not_written_over_a_newer_one(tmp_path):
    """The periodic flush writes in a thread; a flush on the loop (a reset, the stop) may
    write a later state first: the older one must not replace it."""
    files = ProgressFiles(tmp_path)
    offsets = consumer_offsets.OffsetTable()
    older = files.render({("g", "T"): {0: QueueProgress(3, 3)}}, offsets)
    newer = files.render({("g", "T"): {0: QueueProgress(9, 9)}}, offsets)
    files.write(newer)
    files.write(older)
    state, _ = files.load()
    assert state[("g", "T")][0].committed == 9


@pytest.mark.integration
def test_a_second_proxy_on_the_same_store_is_refused_with_one_line(tmp_path):
    store = tmp_path / "store"
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", str(4 << 20))  # fmt: skip
    proxy_args = ("--listen", "127.0.0.1:0", "--commitlog", writer.address, "--store", str(store))
    try:
        first = procs.start("services.proxy", *proxy_args)
        try:
            second = subprocess.run([sys.executable, "-m", "services.proxy", *proxy_args],
                                    cwd=procs.ROOT, capture_output=True, text=True,
                                    timeout=120)  # fmt: skip
            assert second.returncode == 2, (second.stdout, second.stderr)
            assert second.stderr.splitlines() == [
                f"error: another proxy already keeps the consumer progress of store {store} "
                f"({store / 'rmqstore' / 'proxy.lock'} is locked): one proxy per store"
            ], second.stderr
        finally:
            assert first.stop() == 0
        procs.start("services.proxy", *proxy_args).stop()  # the lock went with the first
    finally:
        writer.stop()


def test_the_masters_copied_progress_is_taken_in_at_start_never_going_back(tmp_path):
    """A node that was a slave: its writer copied the master's offsets and groups into
    rmqstore/replica-config/; the proxy starts from the higher offset of each queue."""
    files = ProgressFiles(tmp_path)
    files.save({("g", "T"): {0: QueueProgress(7, 7), 1: QueueProgress(2, 2)}},
               consumer_offsets.OffsetTable())  # fmt: skip
    replica = tmp_path / "rmqstore" / "replica-config"
    replica.mkdir(parents=True)
    (replica / "consumerOffset.json").write_text(consumer_offsets.render(
        consumer_offsets.OffsetTable({("T", "g"): {0: 5, 1: 9}, ("U", "h"): {3: 4}})))
    groups = subscription_groups.GroupTable({"h": subscription_groups.GroupConfig("h", 5)})
    (replica / "subscriptionGroup.json").write_text(subscription_groups.render(groups))
    state, _ = files.load()
    assert {q: p.committed for q, p in state[("g", "T")].items()} == {0: 7, 1: 9}
    assert state[("h", "U")][3].committed == 4
    assert files.load_groups().groups["h"].retry_max_times == 5
