"""Atomic, durable replacement of small files."""

from rmqstore.durable import fsync_dir, replace_file


def test_replace_file_creates_and_replaces_without_leftovers(tmp_path):
    target = tmp_path / "state" / "progress"
    replace_file(target, b"first")
    replace_file(target, b"second, longer")
    assert target.read_bytes() == b"second, longer"
    assert sorted(p.name for p in target.parent.iterdir()) == ["progress"]
    fsync_dir(target.parent)  # a directory can be synced on its own too
