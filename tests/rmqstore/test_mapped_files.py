"""Read-only mappings follow the files: replaced or grown files are mapped again."""

import os

import pytest

from rmqstore.mapped_files import MappedFiles


def test_mappings_follow_the_files(tmp_path):
    files = MappedFiles(lambda _path, mm: bytes(mm[:4]), min_size=4)
    a = tmp_path / "a"
    assert files.get(a) is None  # missing
    a.write_bytes(b"ab")
    assert files.get(a) is None  # shorter than min_size: still being created
    a.write_bytes(b"abcd")
    first = files.get(a)
    assert first == b"abcd" and files.get(a) is first  # cached while unchanged
    with open(a, "ab") as f:
        f.write(b"ef")
    assert files.get(a) is not first  # grown: mapped again
    new = tmp_path / "new"
    new.write_bytes(b"wxyz")
    os.replace(new, a)  # replaced under its name
    assert files.get(a) == b"wxyz"
    files.forget_except([])
    assert not files._maps
    files.close()


def test_a_view_that_refuses_the_file_leaves_nothing_mapped(tmp_path):
    def refuse(path, mm):
        raise ValueError(f"{path.name} has the wrong size")

    files = MappedFiles(refuse)
    (tmp_path / "x").write_bytes(b"1234")
    with pytest.raises(ValueError, match="wrong size"):
        files.get(tmp_path / "x")
    assert not files._maps
