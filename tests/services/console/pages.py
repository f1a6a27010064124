"""What the console tests read out of a page's HTML: links by rel, message ids shown."""

import html
import re
from urllib.parse import urljoin

_REL = r'<a href="([^"]+)" rel="{}">'
_MSGID = re.compile(r'<a class="msgid" href="/messages/([0-9A-Fa-f]+)">')


def rel_link(base: str, page: str, rel: str) -> str | None:
    m = re.search(_REL.format(rel), page)
    return urljoin(base, html.unescape(m.group(1))) if m else None


def message_ids(page: str) -> list[str]:
    return _MSGID.findall(page)
