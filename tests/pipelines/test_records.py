"""The UTC date export partitions by, at the ends of what a date can hold."""

import datetime as dt

import pytest

from pipelines.records import DAY_MS, utc_date

_YEAR_1 = -62_135_596_800_000  # 0001-01-01T00:00Z in ms
_YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00Z in ms


@pytest.mark.parametrize("ms, date", [
    (0, "1970-01-01"),
    (DAY_MS - 1, "1970-01-01"),
    (-1, "1969-12-31"),  # before the epoch: the day it falls in, not the day after
    (1_700_000_000_000, "2023-11-14"),
    (_YEAR_1, "0001-01-01"),
    ((dt.date(501, 5, 23) - dt.date(1970, 1, 1)).days * DAY_MS, "0501-05-23"),  # 4 digits
    (_YEAR_10000 - 1, "9999-12-31"),
    (_YEAR_1 - 1, None),
    (_YEAR_10000, None),
    (2**63 - 1, None),
    (-(2**63), None),
])  # fmt: skip
def test_a_date_is_iso_within_years_1_to_9999_and_none_outside(ms, date):
    assert utc_date(ms) == date
    if date is not None:
        assert date == dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date().isoformat()
