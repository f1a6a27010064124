"""Delay level tables (RocketMQ's messageDelayLevel syntax) and delivery-time parking."""

import pytest

from rmqstore import delay
from rmqstore.errors import InvalidArgumentError


@pytest.fixture
def levels():
    yield delay.use_levels
    delay.use_levels(delay.DEFAULT_LEVELS)


def test_default_table_is_rocketmqs():
    assert delay.parse_levels()[:4] == [1000, 5000, 10000, 30000]
    assert delay.parse_levels()[-1] == 7_200_000 and len(delay.parse_levels()) == 18


def test_a_short_table_replaces_the_default(levels):
    assert levels("1s 2s 3s") == [1000, 2000, 3000]
    assert delay.MAX_LEVEL == 3 and delay.clamp_level(9) == 3 and delay.delay_ms(2) == 2000


@pytest.mark.parametrize("spec", ["", "1x", "s", "0s", "2s 1s", "1s 1s", "-1s", "1.5s"])
def test_bad_tables_are_refused(spec):
    with pytest.raises(InvalidArgumentError):
        delay.parse_levels(spec)


@pytest.mark.parametrize(
    ("remaining", "level"),
    [(-5, 0), (999, 0), (1000, 1), (4999, 1), (5000, 2), (7000, 2), (7_200_000, 18),
     (10**9, 18)],
)
def test_largest_level_not_beyond(remaining, level):
    assert delay.level_for(remaining) == level
