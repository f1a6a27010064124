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


def test_a_listed_directory_of_segments_is_mapped_in_start_order(tmp_path):
    """Files named by their start offsets, in start order; others skipped; one too short is
    not mapped (the listing is then not complete); files no longer listed are forgotten."""
    from rmqstore.listing import Listing
    from rmqstore.mapped_files import map_listed_segments
    from rmqstore.segments import segment_name

    for start, size in ((2048, 8), (0, 8), (1024, 0)):
        (tmp_path / segment_name(start)).write_bytes(b"x" * size)
    (tmp_path / "notes.txt").write_bytes(b"not a segment")
    files = MappedFiles(lambda _p, mm: bytes(mm[:1]), min_size=1)
    listing = Listing(str(tmp_path))
    listing.refresh()
    mapped, paths, complete = map_listed_segments(files, listing, [])
    assert [start for start, _ in mapped] == [0, 2048] and not complete
    assert [p.rsplit("/", 1)[1] for p in paths] == [segment_name(s) for s in (0, 1024, 2048)]
    (tmp_path / segment_name(2048)).unlink()
    (tmp_path / segment_name(1024)).write_bytes(b"y" * 8)
    listing.names = sorted(p.name for p in tmp_path.iterdir())
    mapped, paths2, complete = map_listed_segments(files, listing, paths)
    assert [(s, v) for s, v in mapped] == [(0, b"x"), (1024, b"y")] and complete
    assert len(paths2) == 2 and str(tmp_path / segment_name(2048)) not in files._maps
