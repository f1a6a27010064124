"""``--topics-file``: the declared topics a writer creates at start; checked whole first, never
changing a topic the store has."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rmqstore.startup import START_FAILED
from services.commitlog import declared_topics
from services.commitlog.declared_topics import Declared
from services.commitlog.topics import TopicStore
from tests import procs


def _file(tmp_path: Path, topics: object, name: str = "topics.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(topics))
    return path


def test_load_reads_every_field(tmp_path):
    path = _file(tmp_path, [{"name": "Orders", "queues": 8},
                            {"name": "Pay", "queues": 2, "perm": 4, "type": "FIFO"}])  # fmt: skip
    assert declared_topics.load(path) == [Declared("Orders", 8), Declared("Pay", 2, 4, "FIFO")]
    assert declared_topics.load(_file(tmp_path, [], "none.json")) == []


@pytest.mark.parametrize(("doc", "reason"), [
    ("{", "not JSON"),
    ({"name": "Orders", "queues": 8}, "a JSON list of topics"),
    (["Orders"], "topic 1: not an object"),
    ([{"name": "A", "queues": 1}, {"queues": 8}], "topic 2: name must be a string"),
    ([{"name": "Orders"}], "topic 1 ('Orders'): queues is missing"),
    ([{"name": "Orders", "queues": "8"}], "queues must be a whole number"),
    ([{"name": "Orders", "queues": True}], "queues must be a whole number"),
    ([{"name": "Orders", "queues": 0}], "queues must be at least 1"),
    ([{"name": "Orders", "queues": 8, "perm": 0}], "perm 0 lets nobody"),
    ([{"name": "Orders", "queues": 8, "type": 1}], "type must be a string"),
    ([{"name": "Orders", "queue": 8}], "unknown key 'queue'"),
    ([{"name": "A", "queues": 1}, {"name": "A", "queues": 2}], "'A' is declared twice"),
], ids=["not-json", "not-a-list", "not-an-object", "no-name", "no-queues", "string-queues",
        "bool-queues", "zero-queues", "zero-perm", "bad-type-kind", "misspelt-key",
        "twice"])  # fmt: skip
def test_load_refuses_a_bad_file_naming_the_entry(tmp_path, doc, reason):
    path = tmp_path / "topics.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ValueError, match=str(path)) as caught:
        declared_topics.load(path)
    assert reason in str(caught.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        declared_topics.load(tmp_path / "nope.json")


def test_apply_creates_what_is_missing_and_changes_nothing_else(tmp_path):
    store = TopicStore(tmp_path, max_queues=8)
    store.create("Orders", 2)
    done = declared_topics.apply(store, [Declared("Orders", 8, 4, "FIFO"), Declared("New", 3)])
    assert [(t.name, created) for t, created in done] == [("Orders", False), ("New", True)]
    orders = TopicStore(tmp_path, 8).get("Orders")
    assert (orders.write_queue_nums, orders.perm, orders.message_type) == (2, 6, "MIXED")
    assert TopicStore(tmp_path, 8).get("New").read_queue_nums == 3


@pytest.mark.parametrize("bad", [Declared("a/b", 1), Declared("Wide", 9), Declared("T", 1, 8),
                                 Declared("T", 1, 6, "LITE")],
                         ids=["name", "queues", "perm", "type"])  # fmt: skip
def test_one_bad_entry_creates_nothing(tmp_path, bad):
    store = TopicStore(tmp_path, max_queues=8)
    with pytest.raises(ValueError, match=f"topic {bad.name!r}"):
        declared_topics.apply(store, [Declared("First", 1), bad, Declared("Last", 1)])
    assert not (tmp_path / "config" / "topics.json").exists()


def _listed(address: str) -> list[tuple]:
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "topic", "list", "--json",
                          "--commitlog", address], cwd=procs.ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [(t["topicName"], t["writeQueueNums"], t["perm"], t["messageType"])
            for t in map(json.loads, out.stdout.splitlines())]  # fmt: skip


def _writer(store: Path, *args: str) -> procs.ServiceProcess:
    return procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                       "--commitlog-segment-size", "65536", *args)  # fmt: skip


@pytest.mark.integration
def test_a_writer_creates_the_declared_topics_at_every_start(tmp_path):
    """Created at start; a restart with a changed file adds the new topic and leaves the
    others as they are (queues not shrunk, a dropped topic kept)."""
    store = tmp_path / "store"
    first = _file(tmp_path, [{"name": "Orders", "queues": 4},
                             {"name": "Pay", "queues": 2, "type": "fifo", "perm": 6}])  # fmt: skip
    w = _writer(store, "--topics-file", str(first))
    try:
        assert _listed(w.address) == [("Orders", 4, 6, "MIXED"), ("Pay", 2, 6, "FIFO")]
    finally:
        assert w.stop() == 0
    second = _file(tmp_path, [{"name": "Orders", "queues": 1, "perm": 4},
                              {"name": "Audit", "queues": 8}], "second.json")  # fmt: skip
    for _ in range(2):  # and again with the same file: nothing changes
        w = _writer(store, "--topics-file", str(second))
        try:
            assert _listed(w.address) == [
                ("Audit", 8, 6, "MIXED"), ("Orders", 4, 6, "MIXED"), ("Pay", 2, 6, "FIFO")]
        finally:
            assert w.stop() == 0
    assert json.loads((store / "config" / "topics.json").read_text())["dataVersion"][
        "counter"] == 3  # fmt: skip


def _refused(store: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.commitlog", "--store", str(store),
                           "--listen", "127.0.0.1:0", *args], cwd=procs.ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.integration
def test_a_writer_with_a_bad_entry_does_not_start_and_creates_nothing(tmp_path):
    store = tmp_path / "store"
    path = _file(tmp_path, [{"name": "Good", "queues": 1}, {"name": "Bad/Name", "queues": 1}])
    out = _refused(store, "--topics-file", str(path))
    assert out.returncode == START_FAILED
    assert "--topics-file: topic 'Bad/Name': bad topic name" in out.stderr
    assert "no topic was created" in out.stderr
    assert not (store / "config" / "topics.json").exists()
    wide = _file(tmp_path, [{"name": "Wide", "queues": 16}], "wide.json")
    out = _refused(store, "--topics-file", str(wide), "--queues-per-topic", "8")
    assert out.returncode == START_FAILED and "outside 1..8" in out.stderr
    read_only = _refused(store, "--topics-file", str(wide), "--read-only")
    assert read_only.returncode == START_FAILED
    assert "a --read-only store takes none" in read_only.stderr


@pytest.mark.integration
def test_a_slave_leaves_its_topics_to_its_master(tmp_path):
    """A slave checks the file but creates nothing: its topics.json is its master's copy."""
    path = _file(tmp_path, [{"name": "Orders", "queues": 4}])
    w = _writer(tmp_path / "store", "--topics-file", str(path), "--role", "slave",
                "--ha-master", f"127.0.0.1:{procs.free_port()}")  # fmt: skip
    try:
        assert _listed(w.address) == []
    finally:
        w.stop()
    assert any("a slave takes its master's topics" in line for line in w.lines)
    bad = _file(tmp_path, [{"name": "Orders"}], "bad.json")
    out = _refused(tmp_path / "store", "--topics-file", str(bad), "--role", "slave",
                   "--ha-master", f"127.0.0.1:{procs.free_port()}")  # fmt: skip
    assert out.returncode == START_FAILED and "queues is missing" in out.stderr
