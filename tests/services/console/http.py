"""A plain HTTP GET for the console tests (urllib: no redirects followed, no cookies kept)."""

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: Any
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Reply:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with _OPENER.open(req, timeout=60) as r:
            return Reply(r.status, r.headers, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.headers, e.read())
