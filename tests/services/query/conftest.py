"""Fixtures of the query-service tests: the golden store in process and behind real services."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.query.app import QueryApp
from tests import procs
from tests.services.query.segment_source import SegmentRecordSource
from tests.services.query.store_builder import copy_store

GOLDEN_SEGMENT_SIZE = 65536
GOLDEN_INDEX_SLOTS = 100  # RocketMQ wrote the golden index with maxHashSlotNum=100
GOLDEN_INDEX_ENTRIES = 400  # and maxIndexNum=400


@pytest.fixture
def golden_source(golden_store: Path):
    src = SegmentRecordSource(golden_store / "commitlog", GOLDEN_SEGMENT_SIZE)
    yield src
    src.close()


@pytest.fixture
def golden_app(golden_store: Path, golden_source: SegmentRecordSource) -> Iterator[QueryApp]:
    """The lookups over the golden store read in place (index and queues are only read)."""
    app = QueryApp.build(golden_store, golden_source, GOLDEN_INDEX_SLOTS, GOLDEN_INDEX_ENTRIES)
    yield app
    app.catalog.close()


@pytest.fixture(scope="module")
def golden_services(golden_store: Path, tmp_path_factory: pytest.TempPathFactory):
    """A copy of the golden store served by the real writer and the real query service."""
    store = copy_store(golden_store, tmp_path_factory.mktemp("golden") / "store")
    writer = procs.start(
        "services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
        "--commitlog-segment-size", str(GOLDEN_SEGMENT_SIZE),
        "--no-delivery",  # the golden store as RocketMQ left it (its delayed ones are due)
    )
    try:
        query = procs.start(
            "services.query", "--store", str(store), "--commitlog", writer.address,
            "--listen", "127.0.0.1:0", "--index-slots", str(GOLDEN_INDEX_SLOTS),
            "--index-entries", str(GOLDEN_INDEX_ENTRIES),
        )
    except BaseException:
        writer.stop()
        raise
    yield store, writer, query
    query.stop()
    writer.stop()
