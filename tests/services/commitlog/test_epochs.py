"""Writer epochs: a new one per unclean start; builders learn where to cut."""

from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.epochs import Epochs
from tests import procs


def test_history_and_cut_offsets(tmp_path):
    e = Epochs(tmp_path / "epochs")
    assert e.current == 0 and e.cut_offset_since(0) == -1
    assert e.begin(0) == 1 and e.begin(500) == 2 and e.begin(300) == 3
    again = Epochs(tmp_path / "epochs")  # durable
    assert again.current == 3
    assert again.cut_offset_since(3) == -1
    assert again.cut_offset_since(2) == 300
    assert again.cut_offset_since(1) == 300  # the lowest start of every missed epoch
    assert again.cut_offset_since(0) == 0


def test_only_unclean_starts_begin_an_epoch(tmp_path):
    cfg = WriterConfig(store=tmp_path / "s", segment_size=1 << 20)
    e = CommitLogEngine(cfg)
    assert e.epochs.current == 1  # a new store
    e.put([common_pb2.Message(topic="T", body=b"x")])
    e.close()
    e = CommitLogEngine(cfg)
    assert e.epochs.current == 1  # after a clean stop: the same epoch
    end = e.max_offset
    e.close()
    w = procs.start("services.commitlog", "--store", str(cfg.store), "--listen", "127.0.0.1:0",
                    "--commitlog-segment-size", str(cfg.segment_size))
    w.kill()  # an unclean stop: the abort file stays
    e = CommitLogEngine(cfg)
    try:
        assert e.epochs.current == 2 and e.epochs.cut_offset_since(1) == end
        assert e.epochs.cut_offset_since(2) == -1
    finally:
        e.close()
