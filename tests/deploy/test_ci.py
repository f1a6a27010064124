"""The CI entry point runs ``make test``, whose output lists every skipped test with its
reason (pytest's ``-ra`` in the project's options), so a skip cannot go unnoticed."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_make_test():
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines[-1] == "make test"


def test_make_test_prints_each_skip_with_its_reason(tmp_path: Path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import pytest\n\n"
        "def test_runs():\n    pass\n\n"
        "def test_needs_a_gpu():\n    pytest.skip('no GPU on this machine')\n")
    done = subprocess.run(
        ["make", "--no-print-directory", "test",
         f"PYTEST_ARGS=-c {ROOT / 'pyproject.toml'} --rootdir {tmp_path} -p no:cacheprovider "
         f"{probe}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "short test summary info" in done.stdout
    assert "test_probe.py:7: no GPU on this machine" in done.stdout, done.stdout
    assert "SKIPPED [1] " in done.stdout
