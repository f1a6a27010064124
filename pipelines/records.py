"""Rules for the record fields that export and find show: KEYS' tokens, the UTC date."""

import datetime as dt

DAY_MS = 86_400_000
_EPOCH = dt.date(1970, 1, 1)


def utc_date(ms: int) -> str | None:
    """The UTC date of a time in ms, ``yyyy-MM-dd`` (the export's ``date`` partition); None
    outside the years 1 to 9999, which no date type holds (a corrupt store time)."""
    try:
        return (_EPOCH + dt.timedelta(days=ms // DAY_MS)).isoformat()
    except OverflowError:
        return None


def key_tokens(keys: str) -> list[str]:
    """Non-empty tokens of a KEYS value (space separated)."""
    return [k for k in keys.split(" ") if k]
