"""Records read from commitlog segment files by (offset, size), decoded or as bytes: found
across segments, one made after the first read included; None where the files do not hold
that record whole."""

from rmqstore.commitlog_reads import CommitlogReads
from rmqstore.formats import commitlog
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name

SEGMENT = 4096


def _record(i: int, at: int) -> bytes:
    return commitlog.encode(
        commitlog.Record("T", 0, f"body {i}".encode(), queue_offset=i, physical_offset=at)
    )


def _segment(store, start: int, records: list[bytes]) -> list[tuple[int, int]]:
    """Write a preallocated segment holding ``records``; their (offset, size)."""
    data, where = b"", []
    for raw in records:
        where.append((start + len(data), len(raw)))
        data += raw
    d = StoreLayout.of(store).commitlog_dir
    d.mkdir(parents=True, exist_ok=True)
    (d / segment_name(start)).write_bytes(data + bytes(SEGMENT - len(data)))
    return where


def test_reads_records_and_refuses_what_is_not_there(tmp_path):
    reads = CommitlogReads(tmp_path)
    assert reads.records([(0, 100)]) == [None]  # no commitlog yet
    first = _segment(tmp_path, 0, [_record(0, 0), _record(1, len(_record(0, 0)))])
    got = reads.records(first)
    assert [r.body for r in got if r is not None] == [b"body 0", b"body 1"]
    # a segment made after the listing is found; a record that is not there yet is None
    second = _segment(tmp_path, SEGMENT, [_record(2, SEGMENT)])
    beyond = (second[0][0] + second[0][1], 90)  # zeros: the writer has not written it
    got = reads.records([second[0], beyond, first[1]])
    assert got[0] is not None and got[0].body == b"body 2"
    assert got[1] is None
    assert got[2] is not None and got[2].queue_offset == 1
    # a wrong size or an offset inside a record: not that record
    assert reads.records([(first[1][0], first[1][1] + 1), (first[1][0] + 4, 60)]) == [None, None]
    # retention removed the first segment: its records are None, the second's still read
    (StoreLayout.of(tmp_path).commitlog_dir / segment_name(0)).unlink()
    got = reads.records([first[0], second[0]])
    assert got[0] is None and got[1] is not None
