"""Times as users type them and as rmqstore shows them.

Every command, API and page that takes a time accepts three forms:

- epoch milliseconds: ``1764151200000``;
- ISO-8601 with a date, and a time zone (``Z`` or ``+01:00``) when it has a time of day:
  ``2026-11-26T10:00:00Z``, ``2026-11-26T10:00:00.250+01:00``, ``2026-11-26`` (midnight UTC);
- relative to now: ``now``, ``-15m``, ``-2h``, ``-1d``, ``+30s``, ``-500ms``.

Store timestamps are epoch milliseconds (RocketMQ's ``storeTimestamp``), so every form parses
to an int of milliseconds.
"""

import re
import time
from datetime import UTC, datetime, timedelta, timezone

_RELATIVE = re.compile(r"([+-])(\d+)(ms|s|m|h|d|w)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: past it no date can be shown


class TimeFormatError(ValueError):
    """A time that is none of the accepted forms; the message says which forms are."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_time(text: str, now: int | None = None) -> int:
    """Epoch milliseconds for ``text`` (any of the module's forms); ``now`` for relative ones."""
    s = text.strip()
    if not s:
        raise TimeFormatError("a time is empty; give epoch ms, ISO-8601 or a relative time")
    if s.lstrip("-").isdigit():
        value = int(s)
    elif s == "now" or _RELATIVE.fullmatch(s):
        base = now_ms() if now is None else now
        m = _RELATIVE.fullmatch(s)
        sign = 1 if m is None or m[1] == "+" else -1
        value = base if m is None else base + sign * int(m[2]) * _UNIT_MS[m[3]]
    else:
        value = _parse_iso(s)
    if not 0 <= value <= _MAX_MS:
        raise TimeFormatError(f"time {text!r} is outside 1970-01-01 .. 9999-12-31")
    return value


def _parse_iso(s: str) -> int:
    try:
        dt = datetime.fromisoformat(s.replace("z", "Z"))
    except ValueError:
        raise TimeFormatError(
            f"time {s!r} is not epoch milliseconds, ISO-8601 (2026-11-26T10:00:00Z) or "
            "relative (now, -15m, -2h, -1d)"
        ) from None
    if dt.tzinfo is None:
        if "T" in s or " " in s:
            raise TimeFormatError(
                f"time {s!r} has no time zone; add Z or an offset such as +01:00"
            )
        dt = dt.replace(tzinfo=UTC)  # a bare date is midnight UTC
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def format_time(ms: int, tz: timezone | None = UTC) -> str:
    """``2026-11-26T10:00:00.250Z`` (UTC) or with the offset of ``tz`` (None: local time)."""
    dt = datetime.fromtimestamp(ms / 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
    dt = dt.astimezone(tz) if tz is not None else dt.astimezone()
    text = dt.isoformat(timespec="milliseconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text
