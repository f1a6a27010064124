"""The engine in process: what its gRPC face relies on."""

import pytest

from rmqstore.errors import ResourceExhaustedError
from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine


@pytest.fixture
def engine(tmp_path):
    e = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=1 << 20))
    yield e
    e.close()


def test_read_refuses_an_answer_over_its_byte_limit(engine):
    results = engine.put(
        [common_pb2.Message(topic="T", body=bytes(1000), keys=f"k{i}") for i in range(10)]
    )
    offsets = [r.phy_offset for r in results]
    sizes = sum(r.size for r in results)
    assert [len(b) for b in engine.read(offsets, max_bytes=sizes)] == [r.size for r in results]
    with pytest.raises(ResourceExhaustedError, match="10 records are more than"):
        engine.read(offsets, max_bytes=sizes - 1)
