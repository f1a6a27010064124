"""Shared fixtures. The golden RocketMQ store is read in place from ../shared/golden."""

import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden"


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    if not (GOLDEN / "expected.json").is_file():
        pytest.skip(
            f"golden RocketMQ store not found at {GOLDEN} (it ships beside the repo for "
            "developers and CI, not in a user's clone)"
        )
    return GOLDEN


@pytest.fixture(scope="session")
def golden_expected(golden_dir: Path) -> dict:
    return json.loads((golden_dir / "expected.json").read_text())


@pytest.fixture(scope="session")
def golden_store(golden_dir: Path) -> Path:
    return golden_dir / "store"
