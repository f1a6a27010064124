"""``rmqstore rebuild | export | find`` through the CLI entry point (in process, so they
share the test session's Spark)."""

import base64
import json
from pathlib import Path

import pytest

from pipelines.synthetic import mixed_messages, write_commitlog
from services.cli.main import main
from tests.pipelines.oracle import read_tree, sequential_build

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("cli") / "store"
    return root, write_commitlog(root, mixed_messages(300), segment_size=16 * 1024)


def test_rebuild_command(spark, store, tmp_path: Path, capsys):
    root, written = store
    out = tmp_path / "out"
    rc = main(["rebuild", "--store", str(root), "--out", str(out), "--index-slots", "16",
               "--index-entries", "120", "--cq-entries-per-file", "12", "--json"])
    captured = capsys.readouterr()
    assert rc == 0
    report = json.loads(captured.out)
    assert report["records"] == len(written) and report["segments"] >= 2
    assert "rebuild: segments" in captured.err  # progress, at least the final line
    expected = sequential_build(root / "commitlog", 12, 16, 120)
    assert read_tree(out) == expected
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped
    # a second run into the same output is refused with a clear message and exit code
    rc = main(["rebuild", "--store", str(root), "--out", str(out), "--quiet"])
    assert rc == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: rebuild: output ") and "already has" in line
    assert read_tree(out) == expected


def test_find_command_prints_json_lines(spark, store, capsys, tmp_path: Path):
    root, written = store
    rc = main(["find", "--store", str(root), "--topic", "Topic2", "--key", "BB", "--json",
               "--limit", "1000"])
    assert rc == 0
    captured = capsys.readouterr()
    lines = [json.loads(x) for x in captured.out.splitlines()]
    expected = [w for w in written if w.message.topic == "Topic2"
                and "BB" in w.message.properties.get("KEYS", "").split(" ")]
    assert f"{len(expected)} of {len(written)} records match, {len(expected)} printed" in (
        captured.err)
    assert not list(tmp_path.iterdir())
    # --limit bounds what is printed; --out keeps every match as JSON lines
    out = tmp_path / "found"
    rc = main(["find", "--store", str(root), "--topic", "Topic2", "--key", "BB", "--json",
               "--limit", "2", "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert [json.loads(x)["phyOffset"] for x in captured.out.splitlines()] == [
        w.phy_offset for w in expected[:2]]
    kept = [json.loads(x) for p in sorted(out.glob("part-*.jsonl")) for x in p.open()]
    assert [m["phyOffset"] for m in kept] == [w.phy_offset for w in expected]
    assert f"all of them in {out}" in captured.err
    # nothing found: exit code 1
    assert main(["find", "--store", str(root), "--key", "no-such-key"]) == 1
    assert [m["phyOffset"] for m in lines] == [w.phy_offset for w in expected]
    assert [m["uniqKey"] for m in lines] == [w.message.properties["UNIQ_KEY"] for w in expected]
    for m, w in zip(lines, expected, strict=True):  # text when UTF-8, else base64
        body = (m["body"].encode() if m["bodyEncoding"] == "text"
                else base64.b64decode(m["body"]))
        assert body == w.message.body
        assert m["bodyEncoding"] == ("base64" if max(body) > 127 else "text")


def test_export_command(spark, store, tmp_path: Path, capsys):
    root, written = store
    out = tmp_path / "parquet"
    assert main(["export", "--store", str(root), "--out", str(out), "--quiet"]) == 0
    assert f"exported {len(written)} records" in capsys.readouterr().out
    assert spark.read.parquet(str(out)).count() == len(written)
    again = tmp_path / "again"
    assert main(["export", "--store", str(root), "--out", str(again), "--quiet", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == len(written) and report["corruptions"] == []
    assert report["bytes"] == sum(w.size for w in written) and report["mib_per_s"] > 0


def test_find_without_criteria_is_refused(store, capsys):
    root, _ = store
    assert main(["find", "--store", str(root)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: find: ") and "needs a topic, a key or a time range" in line


def test_failed_job_names_the_task_error_and_writes_nothing(spark, tmp_path: Path, capsys):
    from pipelines.synthetic import Message

    messages = list(mixed_messages(20))
    messages[7] = Message("bad/topic", 0, b"x", {}, 0, messages[7].store_timestamp)
    root = tmp_path / "store"
    write_commitlog(root, messages, segment_size=16 * 1024)
    out = tmp_path / "out"
    assert main(["rebuild", "--store", str(root), "--out", str(out), "--quiet"]) == 3
    [line] = capsys.readouterr().err.splitlines()  # one line: the task's error, whole
    assert line == (
        "error: rebuild failed, nothing was written: writing consumequeue/bad/topic/0/"
        f"{0:020d} of {out}: InvalidArgumentError: topic 'bad/topic' has characters outside "
        "[A-Za-z0-9_%|-]")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]



def test_export_and_find_across_two_brokers(spark, store, tmp_path: Path, capsys):
    root_a, written_a = store
    root_b = tmp_path / "b"
    written_b = write_commitlog(root_b, mixed_messages(40, topics=2), segment_size=8 * 1024)
    stores = f"a={root_a},b={root_b}"
    out = tmp_path / "parquet"
    assert main(["export", "--store", stores, "--out", str(out), "--quiet"]) == 0
    assert (f"exported {len(written_a) + len(written_b)} records ("
            in (line := capsys.readouterr().out))
    assert f"per broker: a {len(written_a)}, b {len(written_b)})" in line
    counts = spark.read.parquet(str(out)).groupBy("broker").count().collect()
    assert sorted((r["broker"], r["count"]) for r in counts) == [
        ("a", len(written_a)), ("b", len(written_b))]
    # order-7 is in both: each match with its broker, as JSON and as text
    expected = [(b, w.phy_offset) for b, ws in (("a", written_a), ("b", written_b))
                for w in ws if "order-7" in w.message.properties.get("KEYS", "").split(" ")]
    assert main(["find", "--store", stores, "--key", "order-7", "--json"]) == 0
    captured = capsys.readouterr()
    assert [(m["broker"], m["phyOffset"]) for m in map(json.loads, captured.out.splitlines())
            ] == expected and len(expected) == 2  # fmt: skip
    assert f"2 of {len(written_a) + len(written_b)} records match" in captured.err
    assert main(["find", "--store", stores, "--key", "order-7"]) == 0
    assert [tuple(x.split("\t")[:2]) for x in capsys.readouterr().out.splitlines()] == [
        (b, str(o)) for b, o in expected]
