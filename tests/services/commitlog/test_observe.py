"""WriterObserver: a put's messages counted per topic."""

import pytest
from prometheus_client import CollectorRegistry

from rmqstore.formats.hosts import parse_host
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.observe import WriterObserver
from services.commitlog.stored import Stored


@pytest.fixture
def observed(tmp_path):
    engine = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=1 << 20))
    registry = CollectorRegistry()
    yield WriterObserver(engine, registry), registry
    engine.close()


def _stored(topics: list[str]) -> Stored:
    n = len(topics)
    host = parse_host("127.0.0.1:10911")
    return Stored(host, list(range(n)), [0] * n, [1] * n, 1, topics, [0] * n, ["u"] * n)


@pytest.mark.parametrize(
    "batches, counts",
    [
        ([["A"] * 3], {"A": 3}),
        ([["A", "B", "A"], ["B"]], {"A": 2, "B": 2}),
        ([["B", "A", "A"], ["A", "A"]], {"A": 4, "B": 1}),
        ([[]], {}),
    ],
)
def test_puts_counted_per_topic(observed, batches, counts):
    observer, registry = observed
    for topics in batches:
        observer.puts(_stored(topics), 0.001)
    for topic in ("A", "B"):
        got = registry.get_sample_value(
            "rmqstore_writer_puts_total", {"topic": topic, "status": "ok"}
        )
        assert (got or 0) == counts.get(topic, 0)
