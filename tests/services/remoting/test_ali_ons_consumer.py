"""ali-ons 3.12's push consumer (RocketMQ 4.x, pure JavaScript, not ours) against ``rmqstore
serve``: two consumers of a group share the queues and get every message; a restarted group
resumes from its committed offset; messages cross between the RocketMQ 5 proxy and the 4.x
broker both ways (official Python client on the proxy's side); a message its listener fails is
sent back, comes again from ``%RETRY%<group>`` and ends in ``%DLQ%<group>``, where ``rmqstore
query-key`` and ``query-id`` find it."""

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs
from tests.services.proxy.conftest import CLIENTS, PYTHON_CLIENT, client_env
from tests.services.remoting.conftest import ALI_ONS_DIR as CLIENT_DIR
from tests.services.remoting.conftest import Served, serve_module
from tests.services.remoting.test_ali_ons import _create_topic

pytestmark = pytest.mark.integration
CONSUMER = CLIENT_DIR / "ali_ons_consumer.js"
PRODUCER = CLIENT_DIR / "ali_ons_producer.js"
DEADLINE_S = 120.0
# The writer's delay levels (RocketMQ's messageDelayLevel): a send-back asks for level 3 + the
# reconsume times (10 s, 30 s, 1 min... by default); beyond the table it is the last level, 2 s.
SHORT_DELAYS = ("--delay-levels", "1s 2s")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve_module(tmp_path_factory, *SHORT_DELAYS)


class Proc(procs.JsonLines):
    """An ``ali-ons`` client process and its JSON lines."""

    def bodies(self) -> list[str]:
        return [e["body"] for e in self.of("received")]

    def close(self) -> int:
        """Close stdin (a consumer then closes cleanly, committing), wait for the end."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                return self.proc.wait(60)
            except (subprocess.TimeoutExpired, OSError):
                self.proc.kill()
        return self.proc.wait(10)



def _until(what: str, fn, deadline_s: float = DEADLINE_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + deadline_s
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"not in {deadline_s}s: {what}"
        time.sleep(0.2)  # polling the condition


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path)}  # ali-ons writes its logs under $HOME


def _consumer(served: Served, topic: str, group: str, tmp_path: Path, start: str = "FIRST",
              *fail: str) -> Proc:  # fmt: skip
    """``fail``: the body the listener throws for, and the consumer's maxReconsumeTimes."""
    c = Proc(["node", str(CONSUMER), served.namesrv, topic, group, start, *fail],
             _env(tmp_path), CLIENT_DIR)  # fmt: skip
    _until("the consumer is ready", lambda: c.of("ready") or c.proc.poll() is not None)
    assert c.proc.poll() is None, c.explain()
    return c


def _produce(served: Served, topic: str, count: int, tmp_path: Path) -> list[dict]:
    run = subprocess.run(["node", str(PRODUCER), served.namesrv, topic, str(count)],
                         cwd=CLIENT_DIR, capture_output=True, text=True, timeout=120,
                         env=_env(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def _at(e: dict) -> tuple[int, int]:
    """(queue id, queue offset) of a send or a receipt (ali-ons gives some as strings)."""
    return int(e["queueId"]), int(e["queueOffset"])


def _topic(served: Served, topic: str) -> None:
    asyncio.run(asyncio.wait_for(_create_topic(served, topic), 60))


def _shares(a: Proc, b: Proc) -> bool:
    qa, qb = a.of("queues"), b.of("queues")
    if not qa or not qb:
        return False
    x, y = set(qa[-1]["queues"]), set(qb[-1]["queues"])
    return bool(x) and bool(y) and not x & y and x | y == {0, 1, 2, 3}


def test_two_consumers_share_the_queues_and_get_every_message(
    served: Served, ali_ons: None, tmp_path: Path
) -> None:
    _topic(served, "AliShareT")
    a = _consumer(served, "AliShareT", "CG_ALI_SHARE", tmp_path)
    b = _consumer(served, "AliShareT", "CG_ALI_SHARE", tmp_path)
    try:
        _until("the group's two members split the 4 queues", lambda: _shares(a, b))
        sent = _produce(served, "AliShareT", 20, tmp_path)
        want = {f"ali-ons message {i}" for i in range(20)}
        assert len(sent) == 20
        _until("every message received", lambda: want <= set(a.bodies()) | set(b.bodies()))
        qa, qb = set(a.of("queues")[-1]["queues"]), set(b.of("queues")[-1]["queues"])
        assert {e["queueId"] for e in a.of("received")} <= qa, a.explain()
        assert {e["queueId"] for e in b.of("received")} <= qb, b.explain()
        assert a.bodies() and b.bodies()  # both got a share (queues chosen round-robin)
    finally:
        assert a.close() == 0, a.explain()
        assert b.close() == 0, b.explain()


def test_a_restarted_group_resumes_from_its_committed_offset(
    served: Served, ali_ons: None, tmp_path: Path
) -> None:
    _topic(served, "AliResumeT")
    first = _consumer(served, "AliResumeT", "CG_ALI_RESUME", tmp_path)
    try:
        _until("the consumer holds the queues", lambda: first.of("queues")
               and len(first.of("queues")[-1]["queues"]) == 4)  # fmt: skip
        _produce(served, "AliResumeT", 6, tmp_path)
        _until("the first batch received", lambda: len(set(first.bodies())) == 6)
    finally:
        assert first.close() == 0, first.explain()  # commits at close
    assert first.of("closed")
    _produce(served, "AliResumeT", 4, tmp_path)  # bodies "ali-ons message 0..3" again: tell
    second = _consumer(served, "AliResumeT", "CG_ALI_RESUME", tmp_path)  # them by offset
    try:
        _until("the new messages received", lambda: len(second.of("received")) >= 4)
        # without the committed offsets it would start at 0: the old offsets would come first
        got = {(e["queueId"], int(e["queueOffset"])) for e in second.of("received")}
        old = {(e["queueId"], int(e["queueOffset"])) for e in first.of("received")}
        assert not got & old, f"redelivered after a clean close: {got & old}"
        assert len(got) == 4
    finally:
        assert second.close() == 0, second.explain()


def test_messages_cross_between_the_proxy_and_the_remoting_broker(
    served: Served, ali_ons: None, tmp_path: Path
) -> None:
    if not PYTHON_CLIENT.exists():
        pytest.fail(f"the official Python client is not installed at {PYTHON_CLIENT}")
    env = client_env(tmp_path)
    script = str(CLIENTS / "python_consumer.py")
    # RocketMQ 5 producer (proxy) -> ali-ons push consumer (remoting broker)
    _topic(served, "CrossFiveT")
    c = _consumer(served, "CrossFiveT", "CG_ALI_CROSS", tmp_path)
    try:
        sent = subprocess.run([str(PYTHON_CLIENT), script, "send", served.serve.proxy,
                               "CrossFiveT", "5", "five"], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert sent.returncode == 0, sent.stdout + sent.stderr
        want = {f"five-{i}" for i in range(5)}
        _until("the 4.x consumer gets the RocketMQ 5 messages", lambda: want <= set(c.bodies()))
    finally:
        assert c.close() == 0, c.explain()
    # ali-ons producer (remoting broker) -> RocketMQ 5 SimpleConsumer (proxy)
    _topic(served, "CrossFourT")
    _produce(served, "CrossFourT", 5, tmp_path)
    got = subprocess.run([str(PYTHON_CLIENT), script, "simple", served.serve.proxy,
                          "CG_FIVE_CROSS", "CrossFourT", "5"], env=env, capture_output=True,
                         text=True, timeout=DEADLINE_S)  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    events = [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]
    acked = [e for e in events if e["event"] == "acked"]
    assert {e["body"] for e in acked} == {f"ali-ons message {i}" for i in range(5)}
    assert all(e["id"] for e in acked)  # ali-ons sets no UNIQ_KEY: the offset id stands in


def test_a_new_group_consuming_from_the_last_offset_skips_the_backlog(
    served: Served, ali_ons: None, tmp_path: Path
) -> None:
    _topic(served, "AliLastT")
    old = {_at(s) for s in _produce(served, "AliLastT", 4, tmp_path)}
    c = _consumer(served, "AliLastT", "CG_ALI_LAST", tmp_path, "LAST")
    try:  # QUERY_NOT_FOUND for the new group: the client starts at GET_MAX_OFFSET
        _until("the consumer holds the queues", lambda: c.of("queues")
               and len(c.of("queues")[-1]["queues"]) == 4)  # fmt: skip
        new = {_at(s) for s in _produce(served, "AliLastT", 4, tmp_path)}
        _until("the new messages received", lambda: len(c.of("received")) >= 4)
        got = {_at(e) for e in c.of("received")}
        assert got == new and not got & old
    finally:
        assert c.close() == 0, c.explain()


def _query(served: Served, *args: str) -> dict:
    """``rmqstore query-key | query-id ... --json`` (a process); count 0 when nothing found."""
    out = subprocess.run([sys.executable, "-m", "services.cli.main", *args, "--query",
                          served.query, "--json"], cwd=procs.ROOT, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode in (0, 1), out.stderr  # 1: nothing found (yet)
    return json.loads(out.stdout) if out.returncode == 0 else {"count": 0, "messages": []}


def test_a_failing_listener_retries_through_the_retry_topic_into_the_dead_letters(
    served: Served, ali_ons: None, tmp_path: Path
) -> None:
    _topic(served, "AliRetryT")
    group, fails, max_times = "CG_ALI_RETRY", "ali-ons message 1", 2
    c = _consumer(served, "AliRetryT", group, tmp_path, "FIRST", fails, str(max_times))
    try:
        _until("the consumer holds the queues", lambda: c.of("queues")
               and len(c.of("queues")[-1]["queues"]) == 4)  # fmt: skip
        sent = {s["key"]: s for s in _produce(served, "AliRetryT", 3, tmp_path)}
        dlq = f"%DLQ%{group}"
        found = _until("the failing message in the dead-letter topic", lambda: _query(
            served, "query-key", "--topic", dlq, "--key", "ak-1")["messages"])  # fmt: skip
        tries = [e for e in c.of("received") if e["body"] == fails]
        others = sorted(e["body"] for e in c.of("received") if e["body"] != fails)
    finally:
        assert c.close() == 0, c.explain()
    assert others == ["ali-ons message 0", "ali-ons message 2"], c.explain()  # once each
    # the first delivery, then max_times copies from the retry topic; none after the last
    assert [int(e["reconsumeTimes"]) for e in tries] == list(range(max_times + 1)), c.explain()
    first = sent["ak-1"]["msgId"]
    assert tries[0]["msgId"] == first and not tries[0]["retryTopic"]
    for e in tries[1:]:
        assert (e["retryTopic"], e["originMessageId"]) == ("AliRetryT", first)
        copy = _query(served, "query-id", e["msgId"])["messages"]
        assert [m["topic"] for m in copy] == [f"%RETRY%{group}"]
        assert copy[0]["properties"]["RETRY_TOPIC"] == "AliRetryT"
    # the dead letter: queue 0 of %DLQ%<group>, naming the original; query-id finds it by id
    assert len(found) == 1
    dead = found[0]
    assert (dead["topic"], dead["queueId"], dead["body"]) == (dlq, 0, fails)
    assert dead["properties"]["ORIGIN_MESSAGE_ID"] == first
    assert dead["properties"]["RETRY_TOPIC"] == "AliRetryT"
    by_id = _query(served, "query-id", dead["msgId"])
    assert [(m["topic"], m["keys"]) for m in by_id["messages"]] == [(dlq, "ak-1")]
