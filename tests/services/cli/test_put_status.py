"""``rmqstore put`` shows each put's replica status: one put (text and ``--json``), ``put
--file`` acknowledgements, and the load generator's count per status."""

import json
import subprocess
import sys

import pytest

from tests import procs

pytestmark = pytest.mark.integration


@pytest.fixture
def sync_master(tmp_path):
    """A sync_master with no slave: every put is stored and answered SLAVE_NOT_AVAILABLE."""
    p = procs.start(
        "services.commitlog", "--store", str(tmp_path / "store"), "--listen", "127.0.0.1:0",
        "--commitlog-segment-size", "65536", "--role", "sync_master",
        "--ha-port", str(procs.free_port()),
    )  # fmt: skip
    yield p
    p.stop()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=procs.ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_put_prints_the_status(sync_master, tmp_path):
    at = ("--commitlog", sync_master.address)
    out = _cli("put", *at, "--topic", "Orders", "--body", "hi")
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith(" status=SLAVE_NOT_AVAILABLE")
    out = _cli("put", *at, "--topic", "Orders", "--body", "hi", "--json")
    assert json.loads(out.stdout)["status"] == "SLAVE_NOT_AVAILABLE"

    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"topic": "Orders", "body": f"m{i}"}) + "\n"
                             for i in range(3)))  # fmt: skip
    out = _cli("put", *at, "--file", str(lines), "--json")
    assert out.returncode == 0, out.stderr
    docs = [json.loads(x) for x in out.stdout.splitlines()]
    assert [d["status"] for d in docs] == ["SLAVE_NOT_AVAILABLE"] * 3

    out = _cli("put", *at, "--topic", "Load", "--count", "300")
    assert out.returncode == 0, out.stderr
    assert "; status SLAVE_NOT_AVAILABLE 300" in out.stdout
    out = _cli("put", *at, "--topic", "Load", "--count", "40", "--batch", "1")
    assert "; status SLAVE_NOT_AVAILABLE 40" in out.stdout
