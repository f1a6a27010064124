"""The consume-queue reader the front ends share: units across segments, the end of the data in a
preallocated segment, a segment started after the reader last looked, and the first unit
whose record retention kept."""

from rmqstore.formats import consume_queue as cq
from rmqstore.layout import StoreLayout
from rmqstore.queue_files import QueueFiles
from rmqstore.segments import segment_name

PER_FILE = 4  # units per segment


def _segment(store, first_unit: int, units: list[tuple[int, int, int]]):
    qdir = StoreLayout.of(store).queue_dir("T", 0)
    qdir.mkdir(parents=True, exist_ok=True)
    data = b"".join(cq.encode(cq.CqUnit(*u)) for u in units)
    data += b"\0" * (PER_FILE * cq.UNIT_SIZE - len(data))  # preallocated
    (qdir / segment_name(first_unit * cq.UNIT_SIZE)).write_bytes(data)


def test_reads_across_segments_and_sees_a_new_segment(tmp_path):
    _segment(tmp_path, 0, [(100 * i, 50, i) for i in range(4)])
    _segment(tmp_path, 4, [(400, 50, 4)])
    files = QueueFiles(tmp_path)
    units = files.read("T", 0, 2, 10)
    assert [(u.queue_offset, u.phy_offset, u.tags_code) for u in units] == [
        (2, 200, 2), (3, 300, 3), (4, 400, 4)]  # fmt: skip
    assert files.read("T", 0, 5, 10) == []  # the end of the data
    assert (files.min_offset("T", 0), files.max_offset("T", 0)) == (0, 5)
    _segment(tmp_path, 4, [(400, 50, 4), (500, 50, 5), (600, 50, 6), (700, 50, 7)])
    _segment(tmp_path, 8, [(800, 50, 8)])  # started after the reader's last listing
    assert [u.queue_offset for u in files.read("T", 0, 5, 10)] == [5, 6, 7, 8]
    assert files.read("T", 1, 0, 10) == [] and files.max_offset("T", 1) == 0  # no such queue


def test_max_offset_at_every_fill_of_the_last_segment(tmp_path):
    files = QueueFiles(tmp_path)
    _segment(tmp_path, 0, [(100 * i, 50, i) for i in range(4)])
    for n in range(PER_FILE + 1):  # the last segment empty (just started) .. full
        _segment(tmp_path, 4, [(100 * i, 50, i) for i in range(4, 4 + n)])
        assert files.max_offset("T", 0) == 4 + n


def test_written_looks_at_one_unit_in_whichever_segment_holds_it(tmp_path):
    files = QueueFiles(tmp_path)
    assert not files.written("T", 0, 0)  # no files
    _segment(tmp_path, 0, [(100 * i, 50, i) for i in range(4)])
    assert files.written("T", 0, 3) and not files.written("T", 0, 4)
    _segment(tmp_path, 4, [(400, 50, 4)])  # started after the last listing
    assert files.written("T", 0, 4) and not files.written("T", 0, 5)


def test_first_present_is_the_first_unit_whose_record_retention_kept(tmp_path):
    files = QueueFiles(tmp_path)
    assert files.first_present("T", 0, 1000) == 0  # no such queue
    pre_blank = (0, 0x7FFFFFFF, 0)
    _segment(tmp_path, 0, [pre_blank, (100, 50, 1), (200, 50, 2), (300, 50, 3)])
    _segment(tmp_path, 4, [(400, 50, 4), (500, 50, 5)])
    # each commitlog minimum against the offsets an exhaustive look finds
    units = [(o, 100 * o) for o in range(1, 6)]
    for low in (0, 1, 100, 101, 250, 300, 301, 400, 450, 500, 501, 10_000):
        expect = next((o for o, phy in units if phy >= low), 6) if low else 0
        assert files.first_present("T", 0, low) == expect, low
    (StoreLayout.of(tmp_path).queue_dir("T", 0) / segment_name(0)).unlink()  # its builder's
    assert files.first_present("T", 0, 450) == 5


def test_max_offset_follows_growth_and_a_cut_after_the_end_it_saw(tmp_path):
    files = QueueFiles(tmp_path)
    _segment(tmp_path, 0, [(100, 50, 0), (200, 50, 1)])
    assert files.max_offset("T", 0) == 2
    _segment(tmp_path, 0, [(100 * i, 50, i) for i in range(1, 4)])  # grew
    assert files.max_offset("T", 0) == 3 and files.max_offset("T", 0) == 3
    _segment(tmp_path, 0, [(100, 50, 0)])  # cut after recovery
    assert files.max_offset("T", 0) == 1
    _segment(tmp_path, 0, [])  # cut to nothing
    assert files.max_offset("T", 0) == 0
