"""Rebuild RocketMQ's own golden store from its commitlog and compare with its files."""

import shutil
from pathlib import Path

import pytest

from pipelines.rebuild.job import RebuildSettings, rebuild
from tests.pipelines.oracle import read_tree
from tests.pipelines.rebuild.golden_compare import (
    GOLDEN_INDEX_NAMES,
    assert_consume_queues_equal,
    assert_equals_sequential_build,
    assert_index_files_equal,
    golden_settings,
)

pytestmark = [pytest.mark.spark, pytest.mark.golden]


@pytest.fixture(scope="module")
def settings(golden_expected) -> RebuildSettings:
    return golden_settings(golden_expected)


@pytest.fixture(scope="module")
def rebuilt(spark, golden_store, settings, tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("golden-rebuild") / "out"
    report = rebuild(spark, golden_store, out, settings)
    return out, report


def test_consume_queues_equal_rocketmq_byte_for_byte(rebuilt, golden_store):
    out, report = rebuilt
    assert_consume_queues_equal(out, golden_store)
    assert report.corruptions == [] and report.notes == []
    assert report.records == 200


def test_index_files_equal_rocketmq_entry_by_entry(rebuilt, golden_store, settings,
                                                   golden_expected):
    out, report = rebuilt
    assert len(golden_expected["files"]["index"]) == 2
    assert_index_files_equal(out, golden_store, settings)
    assert report.index_files == GOLDEN_INDEX_NAMES


def test_rebuild_equals_a_sequential_build(rebuilt, golden_store, settings):
    assert_equals_sequential_build(rebuilt[0], golden_store, settings)


def test_rebuild_into_the_store_root_after_deleting_its_files(spark, golden_store, settings,
                                                              tmp_path):
    store = tmp_path / "store"
    shutil.copytree(golden_store / "commitlog", store / "commitlog")
    report = rebuild(spark, store, store, settings)
    assert report.cq_files == 27
    golden = read_tree(golden_store, ("consumequeue",))
    assert read_tree(store, ("consumequeue",)) == golden
    assert sorted(p.name for p in store.iterdir()) == ["commitlog", "consumequeue", "index",
                                                       "rmqstore"]  # fmt: skip
    assert [p.name for p in (store / "rmqstore").iterdir()] == ["index.topics"]
    # every topic with a consume queue has keys here (the golden store has no half-only topic)
    assert {p.name for p in (store / "consumequeue").iterdir()} <= set(
        (store / "rmqstore" / "index.topics").read_text().split())
