"""Times typed by users: epoch ms, ISO-8601 with a zone, relative to now; shown with an offset."""

from datetime import timedelta, timezone

import pytest

from rmqstore.times import TimeFormatError, format_time, parse_time

NOW = 1_764_151_200_000  # 2025-11-26T10:00:00Z


@pytest.mark.parametrize(
    "text, want",
    [
        ("1764151200000", NOW),
        ("0", 0),
        ("2025-11-26T10:00:00Z", NOW),
        ("2025-11-26T10:00:00.250Z", NOW + 250),
        ("2025-11-26T11:00:00+01:00", NOW),
        ("2025-11-26", NOW - 10 * 3_600_000),
        ("now", NOW),
        ("-15m", NOW - 900_000),
        ("+30s", NOW + 30_000),
        ("-2h", NOW - 7_200_000),
        ("-1d", NOW - 86_400_000),
        ("-500ms", NOW - 500),
        (" -1w ", NOW - 604_800_000),
    ],
)
def test_accepted_forms(text, want):
    assert parse_time(text, now=NOW) == want


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "empty"),
        ("yesterday", "not epoch milliseconds"),
        ("2025-11-26T10:00:00", "no time zone"),
        ("-15x", "not epoch milliseconds"),
        ("99999999999999999999", "outside"),
        ("-5", "outside"),
        ("-30000d", "outside"),
    ],
)
def test_refused_forms_say_why(text, says):
    with pytest.raises(TimeFormatError, match=says):
        parse_time(text, now=NOW)


def test_format_shows_the_offset_and_round_trips():
    assert format_time(NOW + 250) == "2025-11-26T10:00:00.250Z"
    plus_one = timezone(timedelta(hours=1))
    assert format_time(NOW, plus_one) == "2025-11-26T11:00:00.000+01:00"
    for tz in (None, plus_one):
        assert parse_time(format_time(NOW + 7, tz)) == NOW + 7
