"""Shared fixtures. The golden RocketMQ store (written by RocketMQ 4.9.8) ships in tests/golden."""

import json
import os
from pathlib import Path

# gRPC's C core (1.80 and later) restarts its poller in a child forked while channels are busy,
# and that child can crash before it execs (grpc/grpc#43055): PySpark forks its JVM gateway
# with a preexec_fn from test processes that have used gRPC. Before any test imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN


@pytest.fixture(scope="session")
def golden_expected(golden_dir: Path) -> dict:
    return json.loads((golden_dir / "expected.json").read_text())


@pytest.fixture(scope="session")
def golden_store(golden_dir: Path) -> Path:
    return golden_dir / "store"


# The files that take longest (``pytest --durations=0``, summed per file), started first: with
# two workers taking whole files (``--dist loadfile``), a long file started last leaves the
# other worker idle at the end of the run. The Makefile passes ``--no-loadscope-reorder``:
# without it xdist orders files by their number of tests and ignores this order.
SLOW_FIRST = (
    "tests/pipelines/rebuild/test_cluster.py",
    "tests/benchmarks/test_smoke.py",
    "tests/services/proxy/test_consume_bounds.py",
    "tests/services/remoting/test_ali_ons_consumer.py",
    "tests/services/proxy/test_consumers.py",
    "tests/services/commitlog/test_ha_nodes.py",
    "tests/pipelines/test_spark.py",
    "tests/services/proxy/test_redelivery.py",
    "tests/deploy/test_package.py",
    "tests/services/commitlog/test_ha_slave.py",
    "tests/services/remoting/test_ali_ons.py",
    "tests/integration/test_cluster.py",
    "tests/reliability/test_crash_loop.py",
    "tests/services/proxy/test_recovery.py",
    "tests/services/remoting/test_kill9.py",
    "tests/reliability/test_torn_tails.py",
    "tests/services/commitlog/test_service.py",
    "tests/services/commitlog/test_ha_master.py",
    "tests/integration/test_prometheus.py",
    "tests/services/proxy/test_switchover.py",
    "tests/services/cli/test_bad_input.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
