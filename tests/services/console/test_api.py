"""The console's JSON API and pages against the golden store and the tests' own messages:
the same answers as the query service, exact paging both ways, hostile text shown as text."""

import json
import subprocess
import sys
from urllib.parse import quote, urlencode

import pytest

from rmqstore.message_json import key_fields, with_messages
from rmqstore.v1 import query_pb2
from services.console.security import CSP
from tests import procs
from tests.services.console.conftest import (
    BINARY_BODY,
    PAGED,
    PAGED_KEY,
    TOPIC,
    XSS_BODY,
    XSS_PROPERTY,
)
from tests.services.console.http import get
from tests.services.console.pages import message_ids, rel_link
from tests.services.query.golden_model import expected_page

pytestmark = [pytest.mark.integration, pytest.mark.golden]


def _api(console: str, path: str, **query: object) -> dict:
    r = get(f"{console}/api/v1{path}?{urlencode(query)}")
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json()


def test_all_golden_key_queries_answer_as_the_query_service(console, query_stub, golden_expected):
    for q in golden_expected["queries"]:
        doc = _api(console, "/messages", topic=q["topic"], key=q["key"], begin=q["begin"],
                   end=q["end"], max=q["maxNum"])
        resp = query_stub.QueryByKey(query_pb2.QueryByKeyRequest(
            topic=q["topic"], key=q["key"], begin_timestamp=q["begin"],
            end_timestamp=q["end"], max_results=q["maxNum"]), timeout=30)
        assert doc == with_messages(key_fields(resp), resp.messages), q["id"]
        want, truncated = expected_page(golden_expected["messages"], q)
        assert [m["phyOffset"] for m in doc["messages"]] == want, q["note"]
        assert doc["truncated"] == truncated


def test_documents_are_the_cli_json_documents(console, served):
    def cli(*args: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "services.cli.main", *args, "--query",
                              served.query.address, "--json"], cwd=procs.ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert _api(console, "/messages", topic="TopicB", key="hot", max=5) == \
        cli("query-key", "--topic", "TopicB", "--key", "hot", "--max", "5")
    msg_id = served.put["xss"].msg_id
    assert _api(console, f"/messages/{msg_id}") == cli("query-id", msg_id)


def test_api_times_take_every_form_and_answer_in_epoch_ms(console, served, query_stub):
    t = served.put["xss"].store_timestamp
    from rmqstore.times import format_time

    for begin in (str(t), format_time(t), format_time(t).replace("Z", "+00:00")):
        doc = _api(console, "/messages", topic=TOPIC, key="xss", begin=begin, end=t)
        assert [m["storeTimestamp"] for m in doc["messages"]] == [t]
    r = get(f"{console}/api/v1/messages?topic={TOPIC}&key=xss&begin=2026-01-01T10:00:00")
    assert r.status == 400 and "time zone" in r.json()["error"]


def _walk(console: str, start: str, rel: str, pages: list[list[str]]) -> list[list[str]]:
    url: str | None = start
    seen = []
    while url is not None:
        r = get(url)
        assert r.status == 200, r.text
        seen.append(message_ids(r.text))
        url = rel_link(console, r.text, rel)
        assert len(seen) <= len(pages) + 50, "paging does not end"
    return seen


@pytest.mark.parametrize("path", [
    f"/messages?topic={TOPIC}&key={PAGED_KEY}&max=5",
    f"/topics/{TOPIC}?max=4",
    f"/topics/{TOPIC}?max=3&order=oldest",
    f"/topics/{TOPIC}?max=2&queue=1&order=oldest",
])
def test_paging_forward_then_back_returns_the_same_pages(console, path):
    forward = _walk(console, console + path, "next", [])
    assert len(forward) > 2
    ids = [i for page in forward for i in page]
    assert len(ids) == len(set(ids)), "a message was repeated"
    if path.startswith("/messages"):
        assert len(ids) == PAGED
    # from the last page back to the first, by Prev
    last = console + path
    for _ in range(len(forward) - 1):
        last = rel_link(console, get(last).text, "next") or last
    backward = _walk(console, last, "prev", forward)
    assert backward == list(reversed(forward))


def test_topic_pages_cover_the_topic_exactly(console, served):
    doc = _api(console, f"/topics/{TOPIC}", order="oldest", max=200)
    ids = {m["msgId"] for m in doc["messages"]}
    assert ids == {r.msg_id for r in served.put.values()}
    times = [(m["storeTimestamp"], m["queueId"], m["queueOffset"]) for m in doc["messages"]]
    assert times == sorted(times)
    newest = _api(console, f"/topics/{TOPIC}", max=200)["messages"]
    assert newest == list(reversed(doc["messages"]))
    queues = {q["queueId"]: q for q in doc["queues"]}
    assert sum(q["messages"] for q in queues.values()) == len(served.put)


def test_topic_time_window_is_capped(served, console):
    r = get(f"{console}/api/v1/topics/{TOPIC}?begin=0&end=86400000000")
    assert r.status == 400 and "at most" in r.json()["error"]
    t = served.put["json"].store_timestamp
    doc = _api(console, f"/topics/{TOPIC}", begin=t, end=t, order="oldest")
    assert served.put["json"].msg_id in [m["msgId"] for m in doc["messages"]]
    assert all(m["storeTimestamp"] == t for m in doc["messages"])


def test_hostile_body_and_property_render_as_text(console, served):
    page = get(f"{console}/messages/{served.put['xss'].msg_id}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    listing = get(f"{console}/messages?topic={TOPIC}&key=xss").text
    assert "<script>alert" not in listing and "&lt;script&gt;alert(1)" in listing
    assert XSS_BODY not in get(f"{console}/topics/{TOPIC}").text
    doc = _api(console, f"/messages/{served.put['xss'].msg_id}")
    assert doc["messages"][0]["body"] == XSS_BODY
    assert doc["messages"][0]["properties"]["note"] == XSS_PROPERTY


def test_binary_body_is_a_hex_dump_with_its_size(console, served):
    msg_id = served.put["binary"].msg_id
    page = get(f"{console}/messages/{msg_id}").text
    assert f"{len(BINARY_BODY):,} bytes, binary, shown as hex dump" in page
    assert "00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  |................|" in page
    raw = get(f"{console}/messages/{msg_id}/raw")
    assert raw.status == 200 and raw.body == BINARY_BODY
    assert raw.headers["Content-Disposition"].startswith("attachment")


def test_json_body_is_pretty_printed(console, served):
    page = get(f"{console}/messages/{served.put['json'].msg_id}").text
    assert "shown as pretty-printed JSON" in page
    assert "&#34;items&#34;: [\n    &#34;a&#34;," in page


def test_message_page_decodes_the_id(console, served):
    put = served.put["json"]
    page = get(f"{console}/messages/{put.msg_id}").text
    assert f"store host 127.0.0.1:10911, commitlog offset {put.phy_offset}" in page
    by_uniq = _api(console, f"/messages/{put.unique_key}")
    assert [m["msgId"] for m in by_uniq["messages"]] == [put.msg_id]


@pytest.mark.parametrize("path", ["/messages", "/messages?topic=TopicA&key=order-27",
                                  "/api/v1/messages?topic=TopicA&key=order-27", "/topics",
                                  "/store", "/static/console.js", "/messages/00",
                                  "/api/v1/messages?topic=bad/topic&key=k"])
def test_security_headers_on_every_answer(console, path):
    r = get(console + path)
    assert r.headers["Content-Security-Policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    if r.headers["Content-Type"].startswith("text/html"):
        assert "<script>" not in r.text and " on" + "click=" not in r.text


def test_bad_input_gets_a_clear_error(console):
    r = get(f"{console}/api/v1/messages?topic={quote('a/b')}&key=k")
    assert r.status == 400 and r.json()["code"] == "INVALID_ARGUMENT"
    r = get(f"{console}/api/v1/messages?topic=TopicA&key=k&max=abc")
    assert r.status == 400 and "whole number" in r.json()["error"]
    r = get(f"{console}/api/v1/messages/7F00000100002A9F00000000FFFFFFFF")
    assert r.status in (400, 404)
    r = get(f"{console}/messages?topic=TopicA&key=k&cursor=garbage")
    assert r.status == 400 and 'role="alert"' in r.text
    assert get(f"{console}/messages", method="POST").status == 405
    r = get(f"{console}/api/v1/messages")
    assert r.status == 400 and r.json()["error"] == "topic is required"
    assert get(f"{console}/topics/NoSuchTopic").status == 404


def test_store_page_shows_the_commitlog_builders_and_index(console, served):
    doc = _api(console, "/store")
    assert doc["commitlog"]["maxOffset"] >= served.put["paged-22"].phy_offset
    assert [s["startOffset"] for s in doc["segments"]] == [0, 65536, 131072]
    assert {b["builder"]: b["lagBytes"] for b in doc["builders"]} == {"consume-queue": 0,
                                                                      "index": 0}
    assert doc["indexFiles"][0]["entries"] == 399 and doc["indexFiles"][0]["fill"] == 1.0
    assert doc["delivery"] is None and doc["delayedPending"] is None  # --no-delivery
    assert doc["replication"]["role"] == "async_master" and doc["replication"]["slaves"] == []
    page = get(f"{console}/store").text
    assert "Index files" in page and "100.0 %" in page and "--no-delivery" in page
    assert "Role <code>async_master</code>" in page
