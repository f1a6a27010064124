"""Rules for the record fields that export and find show: KEYS' tokens, the UTC date."""

import datetime as dt


def utc_date(ms: int) -> str:
    """The UTC date of a time in ms, ``yyyy-MM-dd`` (the export's ``date`` partition)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def key_tokens(keys: str) -> list[str]:
    """Non-empty tokens of a KEYS value (space separated)."""
    return [k for k in keys.split(" ") if k]
