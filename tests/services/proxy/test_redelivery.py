"""Redelivery against ``rmqstore serve``: a message past its last delivery whose dead letter
can never be written (``%DLQ%<group>`` is no valid topic) is settled without one rather than
holding the group back, and that shows in ``rmqstore group describe``, the metrics and the
log."""

import json
import re
import time
import urllib.request

import pytest

from tests.services.cli.test_consume_group import cli
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration
# valid for RocketMQ (at most 255 of [%|a-zA-Z0-9_-]), yet %DLQ%<it> is longer than a topic
LONG_GROUP = "G" * 200


def _until(what, limit_s: float = 90.0):
    """Poll ``what()`` until it is true; the last value (a bound, not a timing)."""
    end = time.monotonic() + limit_s
    while not (value := what()) and time.monotonic() < end:
        time.sleep(0.2)
    return value


def test_a_dead_letter_that_can_never_be_written_does_not_wedge_the_group(tmp_path):
    serve = Serve(tmp_path / "store", "--group-retry-max-times", "0")  # one delivery, then DLQ
    try:
        r = cli("put", "--commitlog", serve.address(0), "--topic", "DlqT", "--queues", "1",
                "--count", "2", "--body", "body-{i}")  # fmt: skip
        assert r.returncode == 0, r.stderr
        r = cli("consume", "--proxy", serve.proxy, "--group", LONG_GROUP, "--topic", "DlqT",
                "--json", "--wait", "1", "--count", "2", "--invisible", "1",
                "--no-ack")  # fmt: skip
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stderr

        def described() -> dict:
            d = cli("group", "describe", LONG_GROUP, "--proxy", serve.proxy, "--json")
            assert d.returncode == 0, d.stderr
            return json.loads(d.stdout)

        def settled() -> dict | None:
            d = described()
            (q,) = [q for q in d["queues"] if q["topic"] == "DlqT"]
            return d if q["committedOffset"] == 2 else None

        d = _until(settled)
        assert d, described()  # the committed offset moved on: the group is not wedged
        dead = d["deadLetters"]
        assert (dead["failed"], dead["dropped"]) == (2, 2)
        assert f"%DLQ%{LONG_GROUP} cannot be a topic" in dead["lastError"]
        text = cli("group", "describe", LONG_GROUP, "--proxy", serve.proxy).stdout
        assert "dead letters not written: 2 tries failed, 2 messages settled without one" in text
        url = f"http://127.0.0.1:{serve.base + 14}/metrics"
        metrics = urllib.request.urlopen(url, timeout=30).read().decode()
        labels = f'group="{LONG_GROUP}",topic="DlqT"'
        assert f"rmqstore_consumer_dead_letters_dropped_total{{{labels}}} 2.0" in metrics
        assert f"rmqstore_consumer_dead_letter_failures_total{{{labels}}} 2.0" in metrics
        assert any("settled WITHOUT a dead letter" in line for line in serve.lines)
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])
    offsets = (tmp_path / "store" / "config" / "consumerOffset.json").read_text()
    assert re.search(rf'"DlqT@{LONG_GROUP}":\{{0:2\s', offsets), offsets


def test_two_groups_sharing_a_retry_topic_each_get_their_own_messages_as_their_topic(tmp_path):
    """``a`` on ``b_c`` and ``a_b`` on ``c`` both retry through ``%RETRY%a_b_c``."""
    serve = Serve(tmp_path / "store")
    try:
        for topic, body in (("b_c", "for-a"), ("c", "for-a_b")):
            r = cli("put", "--commitlog", serve.address(0), "--topic", topic, "--queues", "1",
                    "--count", "1", "--body", body)  # fmt: skip
            assert r.returncode == 0, r.stderr

        def consume(group: str, topic: str, *extra: str) -> list[dict]:
            r = cli("consume", "--proxy", serve.proxy, "--group", group, "--topic", topic,
                    "--json", "--wait", "1", *extra)  # fmt: skip
            assert r.returncode in (0, 1), r.stderr
            return [json.loads(line) for line in r.stdout.splitlines()]

        def committed(group: str, topic: str) -> int:
            d = cli("group", "describe", group, "--proxy", serve.proxy, "--json")
            assert d.returncode == 0, d.stderr
            return sum(q["committedOffset"] for q in json.loads(d.stdout)["queues"]
                       if q["topic"] == topic)  # fmt: skip

        for group, topic in (("a", "b_c"), ("a_b", "c")):  # delivered, not acknowledged
            assert len(consume(group, topic, "--count", "1", "--invisible", "1", "--no-ack")) == 1
        for group, topic in (("a", "b_c"), ("a_b", "c")):  # both copied to %RETRY%a_b_c
            assert _until(lambda g=group, t=topic: committed(g, t) == 1)
        assert committed("a", "%RETRY%a_b_c") == 0
        for group, topic, body in (("a", "b_c", "for-a"), ("a_b", "c", "for-a_b")):
            got = consume(group, topic, "--count", "2")
            assert [(m["topic"], m["body"], m["deliveryAttempt"]) for m in got] == [
                (topic, body, 2)
            ], (group, got)
            assert _until(lambda g=group: committed(g, "%RETRY%a_b_c") == 2)
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])


def test_one_dead_letter_the_store_refuses_does_not_take_the_others_with_it(tmp_path):
    """Two messages past their last delivery, dead-lettered together: one carries properties
    so long that its dead letter (a few properties more) is over the limit, and the writer
    refuses the put. The other is still dead-lettered; only the bad one is settled without."""
    serve = Serve(tmp_path / "store", "--group-retry-max-times", "0")
    try:
        lines = tmp_path / "messages.jsonl"
        big = {"topic": "DlqB", "queueId": 0, "body": "big", "properties": {"big": "x" * 32_730}}
        small = {"topic": "DlqB", "queueId": 0, "body": "small"}
        lines.write_text(json.dumps(big) + "\n" + json.dumps(small) + "\n")
        r = cli("put", "--commitlog", serve.address(0), "--file", str(lines))
        assert r.returncode == 0, r.stderr
        r = cli("consume", "--proxy", serve.proxy, "--group", "BigG", "--topic", "DlqB",
                "--json", "--wait", "1", "--count", "2", "--invisible", "1",
                "--no-ack")  # fmt: skip
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stderr

        def settled() -> dict | None:
            d = cli("group", "describe", "BigG", "--proxy", serve.proxy, "--json")
            assert d.returncode == 0, d.stderr
            doc = json.loads(d.stdout)
            (q,) = [q for q in doc["queues"] if q["topic"] == "DlqB"]
            return doc if q["committedOffset"] == 2 else None

        d = _until(settled)
        assert d, "the committed offset did not move on"
        dead = d["deadLetters"]
        assert (dead["failed"], dead["dropped"]) == (1, 1), dead
        url = f"http://127.0.0.1:{serve.base + 14}/metrics"
        metrics = urllib.request.urlopen(url, timeout=30).read().decode()
        labels = 'group="BigG",topic="DlqB"'
        assert f"rmqstore_consumer_dead_letters_total{{{labels}}} 1.0" in metrics
        assert f"rmqstore_consumer_dead_letters_dropped_total{{{labels}}} 1.0" in metrics
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])


def test_a_message_whose_retry_copy_is_refused_is_delivered_again_in_place(tmp_path):
    """Its properties leave no room for the retry copy's: the writer refuses the copy, and
    the message comes back in place, attempt 2 (before, the copy was tried every 5 s for
    ever and the message never came back)."""
    serve = Serve(tmp_path / "store")
    try:
        lines = tmp_path / "messages.jsonl"
        big = {"topic": "RetryB", "queueId": 0, "body": "big", "uniqKey": "ID-BIG",
               "properties": {"big": "x" * 32_700}}  # fmt: skip
        lines.write_text(json.dumps(big) + "\n")
        r = cli("put", "--commitlog", serve.address(0), "--file", str(lines))
        assert r.returncode == 0, r.stderr

        def consume(*extra: str) -> list[dict]:
            r = cli("consume", "--proxy", serve.proxy, "--group", "BigR", "--topic", "RetryB",
                    "--json", "--wait", "1", "--count", "1", *extra)  # fmt: skip
            assert r.returncode in (0, 1), r.stderr
            return [json.loads(line) for line in r.stdout.splitlines()]

        (first,) = consume("--invisible", "1", "--no-ack")
        assert first["deliveryAttempt"] == 1
        again = _until(consume)  # acknowledged once it comes
        assert [(m["body"], m["deliveryAttempt"]) for m in again] == [("big", 2)]
        d = cli("group", "describe", "BigR", "--proxy", serve.proxy, "--json")
        (q,) = [q for q in json.loads(d.stdout)["queues"] if q["topic"] == "RetryB"]
        assert q["committedOffset"] == 1
        assert any("delivered again in place" in line for line in serve.lines)
    finally:
        assert serve.stop() == 0, "".join(serve.lines[-50:])
