"""``rmqstore consume`` and ``rmqstore group list|describe|reset`` against ``rmqstore serve``:
messages put through the writer are consumed through the proxy; the group's progress is
shown, reset to an offset and to a time, and bad input exits with its documented code."""

import json
import subprocess
import sys

import pytest

from tests import procs
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=procs.ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("cg") / "store")
    try:
        r = cli("put", "--commitlog", s.address(0), "--topic", "CliT", "--queues", "2",
                "--count", "6", "--body", "body-{i}", "--keys", "k{i}")  # fmt: skip
        assert r.returncode == 0, r.stderr
        yield s
    finally:
        assert s.stop() == 0, "".join(s.lines[-50:])


def consume(serve, *extra: str) -> list[dict]:
    r = cli("consume", "--proxy", serve.proxy, "--group", "CliG", "--topic", "CliT", "--json",
            "--wait", "1", *extra)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def describe(serve) -> dict:
    r = cli("group", "describe", "CliG", "--proxy", serve.proxy, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_consume_then_describe_reset_and_consume_again(serve):
    first = consume(serve, "--count", "4")
    assert len(first) == 4 and all(m["deliveryAttempt"] == 1 for m in first)
    rest = consume(serve)  # until a receive waits for nothing
    assert sorted(m["body"] for m in first + rest) == [f"body-{i}" for i in range(6)]
    d = describe(serve)
    assert d["groupName"] == "CliG" and d["retryMaxTimes"] == 16 and not d["fifo"]
    assert sum(q["committedOffset"] for q in d["queues"]) == 6
    assert sum(q["lag"] for q in d["queues"]) == 0 and sum(q["maxOffset"] for q in d["queues"]) == 6
    assert {q["topic"] for q in d["queues"]} == {"CliT", "%RETRY%CliG_CliT"}  # its retry queue
    listed = cli("group", "list", "--proxy", serve.proxy)
    assert listed.returncode == 0 and "CliG  normal  max attempts 17" in listed.stdout

    r = cli("group", "reset", "CliG", "--topic", "CliT", "--to-offset", "0", "--proxy", serve.proxy)
    assert r.returncode == 0, r.stderr
    assert "total lag 6" in r.stdout
    assert len(consume(serve, "--no-ack")) == 6  # everything again; not acknowledged
    r = cli("group", "reset", "CliG", "--topic", "CliT", "--to-time", "+1h", "--proxy",
            serve.proxy, "--json")  # fmt: skip
    assert r.returncode == 0 and all(json.loads(x)["lag"] == 0 for x in r.stdout.splitlines())
    assert consume(serve, "--count", "1") == []  # nothing after the reset (exit 1)


@pytest.mark.parametrize(
    ("args", "code"),
    [(("group", "describe", "NoSuchGroup"), 1),
     (("group", "reset", "CliG", "--topic", "CliT"), 2),
     (("group", "reset", "CliG", "--topic", "CliT", "--to-offset", "1", "--to-time", "now"), 2),
     (("group", "reset", "CliG", "--topic", "CliT", "--to-time", "yesterday"), 2),
     (("group", "reset", "CliG", "--topic", "bad/topic", "--to-offset", "0"), 2),
     (("consume", "--group", "bad group", "--topic", "CliT"), 2),
     (("consume", "--group", "com.example.billing", "--topic", "CliT"), 2),
     (("group", "reset", "com.example.billing", "--topic", "CliT", "--to-offset", "0"), 2),
     (("consume", "--group", "G", "--topic", "CliT", "--batch", "99"), 2)],
)  # fmt: skip
def test_bad_input_exits_with_its_code_and_one_line(serve, args, code):
    r = cli(*args, "--proxy", serve.proxy)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1


def test_unreachable_proxy_exits_3():
    r = cli("group", "list", "--proxy", "127.0.0.1:1")
    assert r.returncode == 3 and r.stderr.startswith("error: ")
