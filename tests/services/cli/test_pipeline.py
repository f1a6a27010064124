"""``rmqstore export | find | rebuild`` refuse a bad ``--store`` before any Spark session
starts: one ``error:`` line, exit code 2, nothing written (their jobs are tested with Spark in
``tests/pipelines/test_cli.py``)."""

from pathlib import Path

import pytest

import pipelines.spark
from pipelines.synthetic import mixed_messages, write_commitlog
from services.cli.main import main


@pytest.fixture
def no_spark(monkeypatch):
    """Any Spark session asked for fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(pipelines.spark, "SessionScope", refuse)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "a"
    write_commitlog(root, mixed_messages(3), segment_size=8 * 1024)
    return root


@pytest.mark.parametrize("command", [
    ["export", "--out", "{out}"],
    ["find", "--key", "k", "--out", "{out}"],
])
@pytest.mark.parametrize("value, words", [
    ("a={a},a={a}", "export: broker name 'a' is given twice"),
    ("a={a},b={a}", "stores of a and b are the same commitlog"),
    ("a={a},b={missing}", "store of b: {missing} is not a directory"),
    ("a={a},b c={a}", "broker name 'b c' must be 1-127 characters of [A-Za-z0-9_.-]"),
    ("a={a};b={a}", "store of a: {a};b={a} is not a directory"),
    ("{missing}", "{missing} is neither a store root nor a commitlog directory"),
])  # fmt: skip
def test_bad_stores_are_refused_before_spark(no_spark, store, tmp_path: Path, capsys,
                                             command, value, words):
    names = dict(a=store, missing=tmp_path / "missing", out=tmp_path / "out")
    args = [command[0], "--store", value.format(**names),
            *(x.format(**names) for x in command[1:])]
    assert main(args) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {command[0]}: ")
    assert words.format(**names).removeprefix("export: ") in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_rebuild_takes_one_store(no_spark, store, tmp_path: Path, capsys):
    assert main(["rebuild", "--store", f"a={store}", "--out", str(tmp_path / "out")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == "error: rebuild reads one store: --store PATH, not NAME=PATH"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
