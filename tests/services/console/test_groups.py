"""The consumer group pages against ``rmqstore serve`` (its console is given the proxy):
messages put, a group made by consuming some through the proxy, then ``/api/v1/groups`` and
``/api/v1/groups/<group>`` equal ``rmqstore group list|describe --json`` and the pages show
the lag; a console without ``--proxy`` answers 503 and says why."""

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from rmqstore.times import now_ms
from tests import procs
from tests.services.console.http import get
from tests.services.console.test_browser import _axe, _shot, browser  # noqa: F401 (a fixture)
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration
TOPIC, GROUP = "GroupsT", "GroupsG"
ADDED = "oldestUnconsumedStoreTimestamp"  # the one field the console adds to describe's


def cli(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "services.cli.main", *args], cwd=procs.ROOT,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, int]]:
    s = Serve(tmp_path_factory.mktemp("groups") / "store")
    try:
        put_at = now_ms()
        cli("put", "--commitlog", s.address(0), "--topic", TOPIC, "--queues", "2",
            "--count", "6", "--body", "body-{i}")  # fmt: skip
        common = ("consume", "--proxy", s.proxy, "--group", GROUP, "--topic", TOPIC, "--json")
        assert len(cli(*common, "--count", "3").stdout.splitlines()) == 3
        # one more left in flight (invisible far longer than the test), so the pages show it
        assert len(cli(*common, "--count", "1", "--no-ack", "--invisible", "600")
                   .stdout.splitlines()) == 1  # fmt: skip
        yield s, put_at
    finally:
        assert s.stop() == 0, "".join(s.lines[-50:])


def test_group_documents_equal_the_cli_and_pages_show_the_lag(serve) -> None:
    s, put_at = serve
    base = f"http://{s.address(5)}"
    described = json.loads(cli("group", "describe", GROUP, "--proxy", s.proxy, "--json").stdout)
    lag = sum(q["lag"] for q in described["queues"])
    assert lag >= 3 and sum(q["inFlight"] for q in described["queues"]) == 1

    r = get(f"{base}/api/v1/groups/{GROUP}")
    assert r.status == 200, r.text
    doc = r.json()
    oldest = {(q["topic"], q["queueId"]): q.pop(ADDED) for q in doc["queues"]}
    assert doc == described
    for q in described["queues"]:
        ms = oldest[(q["topic"], q["queueId"])]
        assert (ms is None) == (q["lag"] == 0), q
        assert ms is None or put_at - 1000 <= ms <= now_ms()

    listed = [json.loads(line) for line in
              cli("group", "list", "--proxy", s.proxy, "--json").stdout.splitlines()]
    r = get(f"{base}/api/v1/groups")
    assert r.status == 200, r.text
    rows = r.json()["groups"]
    assert [{k: v for k, v in g.items() if k not in ("lag", "inFlight", "queues")}
            for g in rows] == listed  # fmt: skip
    (row,) = [g for g in rows if g["groupName"] == GROUP]
    assert (row["lag"], row["inFlight"], row["queues"]) == (lag, 1, len(described["queues"]))

    page = get(f"{base}/groups").text
    assert f'href="/groups/{GROUP}"' in page and f"<td>{lag}</td>" in page
    page = get(f"{base}/groups/{GROUP}").text
    assert f"<dt>Total lag</dt><dd>{lag}</dd>" in page and "<time datetime=" in page
    for q in described["queues"]:
        assert (f"<td>{q['committedOffset']}</td><td>{q['maxOffset']}</td>"
                f"<td>{q['lag']}</td>") in page  # fmt: skip

    r = get(f"{base}/api/v1/groups/NoSuchGroup")  # after the pages, before the browser
    assert r.status == 404 and r.json()["code"] == "NOT_FOUND", r.text
    assert get(f"{base}/groups/NoSuchGroup").status == 404


def test_console_without_proxy_answers_503(serve) -> None:
    s, _ = serve
    console = procs.start("services.console", "--store", str(s.store), "--query",
                          s.address(1), "--listen", "127.0.0.1:0")  # fmt: skip
    try:
        for path in ("/api/v1/groups", f"/api/v1/groups/{GROUP}"):
            r = get(f"http://{console.address}{path}")
            assert r.status == 503 and "proxy is not configured" in r.json()["error"], r.text
        r = get(f"http://{console.address}/groups")
        assert r.status == 503 and "--proxy HOST:PORT" in r.text
        assert r.headers["Content-Security-Policy"]
    finally:
        console.stop()


def test_group_pages_pass_axe(serve, browser) -> None:  # noqa: F811 (the imported fixture)
    s, _ = serve
    for path in ("/groups", f"/groups/{GROUP}"):
        browser.get(f"http://{s.address(5)}{path}")
        assert GROUP in browser.title or browser.find_element("link text", GROUP)
        assert _axe(browser) == [], path
        _shot(browser, "group" if GROUP in path else "groups")


def test_store_page_shows_delayed_messages_pending(serve) -> None:
    s, _ = serve
    cli("put", "--commitlog", s.address(0), "--topic", "LaterT", "--body", "later",
        "--deliver-at", "+3h")  # fmt: skip
    doc = get(f"http://{s.address(5)}/api/v1/store").json()
    assert doc["delayedPending"] == doc["delivery"]["pending"] == 1
    (level,) = doc["delivery"]["levels"]
    assert level["delayMs"] == 7_200_000 and level["pending"] == 1  # parked on the 2 h level
    assert level["nextDeliveryMs"] > now_ms()
    page = get(f"http://{s.address(5)}/store").text
    assert "1 delayed messages pending" in page and "<td>7200 s</td>" in page
