"""The rebuild off a single JVM, through the ``rmqstore`` command: on ``local-cluster`` (two
worker processes) and on a standalone master with two workers, each in its own working
directory. The golden commitlog is given as a path relative to the command's directory, the
executors' Python only through ``spark.pyspark.python``; the output must equal RocketMQ's
files."""

import json
import os
from pathlib import Path

import pytest

from tests.pipelines.rebuild.golden_compare import (
    assert_golden_rebuild,
    golden_settings,
    settings_args,
)
from tests.pipelines.spark_cluster import (
    REPO,
    local_cluster_work_dirs,
    python_conf,
    run_rmqstore,
    standalone_cluster,
)

pytestmark = [pytest.mark.spark, pytest.mark.golden]


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as url:
        yield url


def _relative(golden_store: Path) -> str:
    path = os.path.relpath(golden_store, REPO)
    assert not os.path.isabs(path)
    return path


def _rebuild(master_url: str, golden_store: Path, golden_expected: dict, out: Path) -> dict:
    settings = golden_settings(golden_expected)
    done = run_rmqstore(["rebuild", "--master", master_url, "--store", _relative(golden_store),
                         "--out", str(out), *settings_args(settings), *python_conf(),
                         "--json", "--quiet"], cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_golden_rebuild(out, golden_store, settings)
    return json.loads(done.stdout)


def test_rebuild_on_local_cluster(golden_store, golden_expected, tmp_path: Path):
    with local_cluster_work_dirs():
        report = _rebuild("local-cluster[2,1,1024]", golden_store, golden_expected,
                          tmp_path / "out")
    assert report["records"] == 200 and report["ranges"] == 3


def test_rebuild_on_a_standalone_cluster(master, golden_store, golden_expected,
                                         tmp_path: Path):
    report = _rebuild(master, golden_store, golden_expected, tmp_path / "out")
    assert report["records"] == 200


def test_find_on_a_cluster_needs_an_output_directory(golden_store):
    done = run_rmqstore(["find", "--master", "spark://127.0.0.1:7077", "--store",
                         _relative(golden_store), "--topic", "TopicA"], cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: find on a cluster needs --out: a directory every executor sees")
