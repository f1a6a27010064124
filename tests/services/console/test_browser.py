"""The console in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium; no browser is downloaded): search by key, open a message, switch UTC/local time,
page through a topic, keyboard use, and axe-core's accessibility check on every page.

Screenshots go to test-artifacts/console/ (not committed). One browser for the module.
"""

import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests import procs
from tests.services.console.conftest import PAGED, PAGED_KEY, TOPIC

pytestmark = pytest.mark.integration
ARTIFACTS = procs.ROOT / "test-artifacts" / "console"
AXE = Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"
BROWSER_TZ = "Asia/Kolkata"  # +05:30: local time differs from UTC by a non-whole hour
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,900")


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[webdriver.Chrome]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "make test installs Debian's chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    service = Service(executable_path=driver, env={**os.environ, "TZ": BROWSER_TZ})
    drv = webdriver.Chrome(service=service, options=options)
    drv.set_page_load_timeout(60)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield drv
    drv.quit()


def _shot(browser: webdriver.Chrome, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _axe(browser: webdriver.Chrome) -> list[dict]:
    """axe-core's serious and critical violations of the page shown."""
    browser.execute_script(AXE.read_text())
    result = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then(r => done(r.violations), e => done([{id: 'axe-error',"
        " impact: 'critical', help: String(e)}]));")
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"]} for v in result
            if v["impact"] in ("serious", "critical")]


def test_search_by_key_with_the_keyboard_and_open_a_message(browser, console):
    browser.get(console + "/messages")
    assert _axe(browser) == []
    topic = browser.find_element(By.ID, "topic")
    topic.send_keys(TOPIC)
    topic.send_keys(Keys.TAB)  # to the key field, as a keyboard user would
    active = browser.switch_to.active_element
    assert active.get_attribute("id") == "key"
    active.send_keys("xss", Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, "a.msgid"))
    _shot(browser, "search-by-key")
    row = browser.find_element(By.CSS_SELECTOR, "tbody tr").text
    assert row.endswith("xss T1 <script>alert(1)</script>"), row
    assert _axe(browser) == []
    link = browser.find_element(By.CSS_SELECTOR, "a.msgid")
    link.send_keys(Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, "pre.body"))
    _shot(browser, "message")
    assert browser.find_element(By.CSS_SELECTOR, "pre.body").text == "<script>alert(1)</script>"
    assert browser.execute_script("return window.alerted === undefined && !document.querySelector"
                                  "('main img')")
    assert _axe(browser) == []


def test_utc_local_switch_shows_the_same_instant(browser, console, served):
    browser.get(f"{console}/messages/{served.put['json'].msg_id}")
    stored = served.put["json"].store_timestamp

    def shown() -> list[tuple[str, int]]:
        return [(t.text, int(t.get_attribute("data-ms")))
                for t in browser.find_elements(By.CSS_SELECTOR, "time[data-ms]")]

    utc = shown()
    assert utc and all(text.endswith("Z") for text, _ in utc)
    assert stored in [ms for _, ms in utc]
    button = browser.find_element(By.ID, "tz-switch")
    assert button.get_attribute("aria-pressed") == "false"
    button.send_keys(Keys.ENTER)  # keyboard, not a click
    WebDriverWait(browser, 10).until(lambda b: button.get_attribute("aria-pressed") == "true")
    local = shown()
    _shot(browser, "message-local-time")
    for (text, ms), (utc_text, _) in zip(local, utc, strict=True):
        assert text.endswith("+05:30") and text != utc_text
        assert round(datetime.fromisoformat(text).timestamp() * 1000) == ms
        assert round(datetime.fromisoformat(utc_text).timestamp() * 1000) == ms
    browser.get(f"{console}/topics")  # the choice is kept across pages
    assert browser.find_elements(By.CSS_SELECTOR, "time[data-ms]")[0].text.endswith("+05:30")
    _shot(browser, "topics")
    assert _axe(browser) == []
    browser.find_element(By.ID, "tz-switch").click()
    assert browser.find_elements(By.CSS_SELECTOR, "time[data-ms]")[0].text.endswith("Z")


def test_page_through_a_topic(browser, console, served):
    browser.get(f"{console}/topics/{TOPIC}?max=5")
    assert _axe(browser) == []
    seen: list[str] = []
    for page in range(20):
        ids = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "a.msgid")]
        seen += ids
        if page == 1:
            _shot(browser, "topic-page-2")
        nxt = browser.find_elements(By.CSS_SELECTOR, "a[rel=next]")
        if not nxt:
            break
        nxt[0].send_keys(Keys.ENTER)
        WebDriverWait(browser, 30).until(lambda b, ids=ids: [
            a.text for a in b.find_elements(By.CSS_SELECTOR, "a.msgid")] != ids)
    assert sorted(seen) == sorted(r.msg_id for r in served.put.values())
    assert len(seen) == PAGED + 3


def test_skip_link_comes_first_and_store_page_passes_axe(browser, console):
    browser.get(f"{console}/store")
    _shot(browser, "store")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    first = browser.switch_to.active_element
    assert first.text == "Skip to content"
    assert _axe(browser) == []
    browser.get(f"{console}/messages?topic={TOPIC}&key={PAGED_KEY}&max=5")
    assert _axe(browser) == []
