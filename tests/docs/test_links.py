"""The user's pages: every relative link in README.md and docs/*.md leads to a file of the
repository (and, with a #fragment, to a heading of it); no page points outside the
repository; the README stays a short guide."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.M | re.S)


def _links(page: Path) -> list[str]:
    return LINK.findall(CODE_BLOCK.sub("", page.read_text()))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = CODE_BLOCK.sub("", page.read_text())
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+)$", text, re.M)}


def test_there_are_pages_and_links():
    assert len(PAGES) >= 5
    assert sum(len(_links(p)) for p in PAGES) >= 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        outside = not resolved.exists() or ROOT not in [resolved, *resolved.parents]
        if outside or (fragment and resolved.suffix == ".md"
                       and fragment not in _anchors(resolved)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_repository(page: Path):
    text = page.read_text()
    assert "DESIGN.md" not in text
    assert not re.search(r"\bissues? \d+", text, re.I)
    assert "../shared" not in text
    assert not re.search(r"(?<![\w.])/work/", text)  # this machine's own directories


def test_readme_is_a_short_guide():
    assert len((ROOT / "README.md").read_text().splitlines()) < 300


def test_anchor_follows_github():
    assert _anchor("Compatibility with RocketMQ") == "compatibility-with-rocketmq"
    assert _anchor("`rmqstore serve`") == "rmqstore-serve"
    assert _anchor("Recovery and in-process lookups") == "recovery-and-in-process-lookups"
