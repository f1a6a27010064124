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
