"""Shared fixtures. The golden RocketMQ store (written by RocketMQ 4.9.8) ships in tests/golden."""

import json
from pathlib import Path

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
