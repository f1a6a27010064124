"""``topics``: one ConfigMap every broker's writer reads at start (``--topics-file``), in the
format the writer loads."""

import json
from pathlib import Path

import pytest

from services.commitlog import declared_topics
from services.commitlog.declared_topics import Declared
from tests.helm.conftest import RELEASE, broker_sts, by_kind, named, render
from tests.helm.test_chart import _lint
from tests.helm.test_replication import _exec_line, _fake_python

FULLNAME = f"{RELEASE}-rmqstore"
BROKERS = [f"{FULLNAME}-broker-{i}" for i in range(3)]
TOPICS = [{"name": "Orders", "queues": 8},
          {"name": "Payments", "queues": 4, "perm": 6, "type": "FIFO"}]  # fmt: skip
VALUES = {"brokers": 3, "replication": {"slaves": 1}, "topics": TOPICS}
PATH = "/etc/rmqstore/topics/topics.json"


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render(VALUES)


def _containers(sts: dict) -> dict[str, dict]:
    return {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}


def test_the_config_map_holds_the_topics_as_the_writer_reads_them(
    objects: list[dict], tmp_path: Path
) -> None:
    cm = named(objects, "ConfigMap", f"{FULLNAME}-topics")
    path = tmp_path / "topics.json"
    path.write_text(cm["data"]["topics.json"])
    assert declared_topics.load(path) == [Declared("Orders", 8),
                                          Declared("Payments", 4, 6, "FIFO")]  # fmt: skip


def test_every_pod_of_every_broker_starts_its_writer_with_the_topics(
    objects: list[dict], tmp_path: Path
) -> None:
    """The master creates them; a slave's writer is given them too (it takes its master's)."""
    bin_dir = _fake_python(tmp_path)
    for name in BROKERS:
        sts = named(objects, "StatefulSet", name)
        pod = sts["spec"]["template"]["spec"]
        [volume] = [v for v in pod["volumes"] if v["name"] == "topics"]
        assert volume["configMap"]["name"] == f"{FULLNAME}-topics"
        for container in _containers(sts).values():
            mounts = {m["name"]: m for m in container["volumeMounts"]}
            assert ("topics" in mounts) == (container["name"] == "commitlog")
        writer = _containers(sts)["commitlog"]
        assert {"name": "topics", "mountPath": str(Path(PATH).parent), "readOnly": True} in \
            writer["volumeMounts"]
        for pod_name in (f"{name}-0", f"{name}-1"):
            line = _exec_line(writer, pod_name, bin_dir)
            assert line[line.index("--topics-file") + 1] == PATH


def test_a_change_of_topics_restarts_the_brokers_and_none_leaves_them_as_before(
    objects: list[dict], default_objects: list[dict]
) -> None:
    """The pods restart (one at a time) when the topics change: the writers create the new
    ones at start. Without topics nothing is rendered for them."""
    more = render({**VALUES, "topics": [*TOPICS, {"name": "Audit", "queues": 1}]})
    for name in BROKERS:
        assert named(more, "StatefulSet", name)["spec"]["template"] != \
            named(objects, "StatefulSet", name)["spec"]["template"]
    assert not [c for c in by_kind(default_objects, "ConfigMap")
                if c["metadata"]["name"].endswith("-topics")]  # fmt: skip
    writer = _containers(broker_sts(default_objects))["commitlog"]
    assert "--topics-file" not in writer["args"]
    assert "topics" not in {m["name"] for m in writer["volumeMounts"]}


@pytest.mark.parametrize("topic", [
    {"name": "Orders"},
    {"name": "Bad/Name", "queues": 1},
    {"name": "Orders", "queues": 0},
    {"name": "Orders", "queues": 1, "perm": 5},
    {"name": "Orders", "queues": 1, "type": "LITE"},
    {"name": "Orders", "queue": 1},
], ids=["no-queues", "bad-name", "zero-queues", "bad-perm", "bad-type",
        "misspelt-key"])  # fmt: skip
def test_lint_refuses_bad_topics(topic: dict) -> None:
    assert "/topics/0" in "".join(_lint({"topics": [topic]})["errors"])


def test_lint_is_clean_with_topics() -> None:
    report = _lint(VALUES)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values, reason", [
    ({"topics": [{"name": "Wide", "queues": 16}]}, "Wide has 16 queues, more than"),
    ({"topics": TOPICS, "readOnly": True}, "a readOnly store takes none"),
], ids=["queues-over-limit", "read-only"])  # fmt: skip
def test_what_no_writer_could_create_is_refused(values: dict, reason: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=reason):
        render(values)
    wide = render({"topics": [{"name": "Wide", "queues": 16}],
                   "commitlog": {"queuesPerTopic": 16}})  # fmt: skip
    assert json.loads(named(wide, "ConfigMap", f"{FULLNAME}-topics")["data"]["topics.json"]) == [
        {"name": "Wide", "queues": 16}]  # the writers' own limit raised with it
