"""Request parameters, named as the CLI's flags (``topic``, ``key``, ``begin``, ``end``,
``max``, ``cursor``, ``queue``, ``offset``), checked before anything is asked of a service.

Times take every form of :mod:`rmqstore.times` (epoch ms, ISO-8601 with a zone, relative).
"""

from collections.abc import Mapping

from rmqstore.errors import StoreError
from rmqstore.layout import validate_topic
from rmqstore.times import TimeFormatError, parse_time

MAX_PAGE = 200  # messages one page may ask for
MAX_TRAIL = 64  # earlier cursors a page remembers for its Prev link
MAX_TEXT = 4096  # longest key, id or cursor accepted


class ParamError(ValueError):
    """A parameter that is missing or malformed: answered with 400 and this message."""


def text(q: Mapping[str, str], name: str, required: bool = False) -> str:
    value = q.get(name, "").strip()
    if required and not value:
        raise ParamError(f"{name} is required")
    if len(value) > MAX_TEXT:
        raise ParamError(f"{name} is longer than {MAX_TEXT} characters")
    return value


def raw(q: Mapping[str, str], name: str) -> str:
    """As given (a key may hold spaces); only its length is checked here."""
    value = q.get(name, "")
    if len(value) > MAX_TEXT:
        raise ParamError(f"{name} is longer than {MAX_TEXT} characters")
    return value


def cluster_scope(q: Mapping[str, str]) -> bool:
    """``scope=cluster``: every broker of the cluster; ``broker`` (the default): this one."""
    value = q.get("scope", "broker") or "broker"
    if value not in ("broker", "cluster"):
        raise ParamError(f"scope {value[:40]!r} is neither broker nor cluster")
    return value == "cluster"


def topic(q: Mapping[str, str], required: bool = True) -> str:
    value = text(q, "topic", required)
    return checked_topic(value) if value else value


def checked_topic(value: str) -> str:
    try:
        return validate_topic(value)
    except (StoreError, ValueError) as e:
        raise ParamError(str(e)) from None


def integer(q: Mapping[str, str], name: str, default: int, low: int = 0,
            high: int = 2**63 - 1) -> int:
    raw = q.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ParamError(f"{name} {raw[:40]!r} is not a whole number") from None
    if not low <= value <= high:
        raise ParamError(f"{name} must be between {low} and {high}, got {value}")
    return value


def time_ms(q: Mapping[str, str], name: str, default: int | None = None,
            now: int | None = None) -> int | None:
    raw = q.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse_time(raw, now)
    except TimeFormatError as e:
        raise ParamError(f"{name}: {e}") from None


def page_size(q: Mapping[str, str], default: int = 0) -> int:
    return integer(q, "max", default, 0, MAX_PAGE)


def trail(q: Mapping[str, str]) -> list[str]:
    """Cursors of the pages before this one (oldest first), for an exact Prev link."""
    raw = text(q, "trail")
    parts = [p for p in raw.split(".") if p] if raw else []
    for p in parts:
        if not all(c.isalnum() or c in "-_" for c in p):
            raise ParamError("trail holds something that is not a cursor")
    return parts[-MAX_TRAIL:]
