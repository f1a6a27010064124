"""Every benchmark runs, at its smallest scale, as ``make bench`` runs it.

A scenario that a change breaks fails here, not in the next full run. At this scale the
figures mean nothing; what is checked is that each benchmark ran every scenario, that the
checks the benchmarks make of the answers they get held, and that each figure is a number a
benchmark can give.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py"))


def _is_rate(column: str) -> bool:
    return "/s" in column or column.endswith("_per_s")


def test_every_benchmark_module_is_found():
    assert {"builders", "pipeline", "put", "query", "rebuild", "recovery"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_benchmark_runs_at_smoke_scale(name, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--results", str(tmp_path), name],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    assert f"\n## {name} (" in run.stdout  # its table, not "FAILED"
    speeds = json.loads((tmp_path / "machine.json").read_text())
    assert [s["scenario"] for s in speeds] == [f"before {name}", "after the last"]
    assert "\n## machine speed\n" in run.stdout
    rows = json.loads((tmp_path / f"{name}.json").read_text())
    assert rows
    for row in rows:
        scenario = row.get("scenario")
        assert isinstance(scenario, str) and scenario, row
        for column, value in row.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            assert math.isfinite(value) and value >= 0, (scenario, column, value)
            if _is_rate(column):
                assert value > 0, (scenario, column, value)
