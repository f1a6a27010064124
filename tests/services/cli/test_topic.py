"""``rmqstore topic create | list | describe`` against a writer process."""

import json
import subprocess
import sys

from tests import procs


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=procs.ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_topics_created_and_put_are_listed(writer):
    w = ("--commitlog", writer.address)
    put = _cli("put", *w, "--topic", "Loaded", "--queues", "2", "--count", "10")
    assert put.returncode == 0, put.stderr
    made = _cli("topic", "create", "Orders", "--queues", "3", "--type", "fifo", *w)
    assert made.returncode == 0 and made.stdout.startswith("created: Orders  queues r3/w3")
    again = _cli("topic", "create", "Orders", "--queues", "5", *w)
    assert again.returncode == 0 and again.stdout.startswith("exists, unchanged: Orders")
    listed = [json.loads(line) for line in _cli("topic", "list", "--json", *w).stdout.splitlines()]
    assert [(t["topicName"], t["readQueueNums"], t["writeQueueNums"], t["perm"],
             t["messageType"]) for t in listed] == [
        ("Loaded", 2, 2, 6, "MIXED"), ("Orders", 3, 3, 6, "FIFO")]  # fmt: skip
    described = _cli("topic", "describe", "Loaded", *w)
    assert described.returncode == 0 and "queues r2/w2  perm 6 (rw)" in described.stdout


def test_errors_exit_with_their_codes(writer):
    w = ("--commitlog", writer.address)
    missing = _cli("topic", "describe", "Nope", *w)
    assert missing.returncode == 1 and "Nope does not exist" in missing.stderr
    bad = _cli("topic", "create", "../etc", *w)
    assert bad.returncode == 2 and "bad topic name" in bad.stderr
    too_many = _cli("topic", "create", "Wide", "--queues", "999", *w)
    assert too_many.returncode == 2 and "outside 1.." in too_many.stderr
    gone = _cli("topic", "list", "--commitlog", "127.0.0.1:1")
    assert gone.returncode == 3 and "127.0.0.1:1" in gone.stderr
    assert _cli("topic", "list", "--json", *w).stdout == ""
