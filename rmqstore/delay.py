"""RocketMQ 4.9 delay levels (``messageDelayLevel``), 1-based, and delivery times.

The level table is a setting of the store (the writer's ``--delay-levels``, RocketMQ's
``messageDelayLevel`` syntax: ``"1s 5s 10s"``, units s m h d). A process uses one table:
``use_levels`` replaces the default before any message is built or dispatched.

A delivery time T (``TIMER_DELIVER_MS``) is parked on ``level_for(T - now)``: the largest
level whose delay is not beyond T; on arrival it is parked again until T is reached.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from rmqstore.errors import InvalidArgumentError

DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # the property that keeps a delivery time


def parse_levels(spec: str = DEFAULT_LEVELS) -> list[int]:
    """Delay of each level in ms: level L is ``levels[L - 1]``; a clear error otherwise."""
    out = []
    for tok in spec.split(" "):
        if not tok:
            continue
        number, unit = tok[:-1], tok[-1:]
        if unit not in _UNIT_MS or not number.isdigit() or int(number) <= 0:
            raise InvalidArgumentError(
                f"delay level {tok!r} is not a positive number followed by s, m, h or d"
            )
        out.append(int(number) * _UNIT_MS[unit])
    if not out:
        raise InvalidArgumentError("the delay level table is empty")
    if len(out) > 256:
        raise InvalidArgumentError(f"{len(out)} delay levels, at most 256")
    if out != sorted(out) or len(set(out)) != len(out):
        raise InvalidArgumentError(f"delay levels {spec!r} must grow strictly")
    return out


LEVELS_MS = parse_levels()
MAX_LEVEL = len(LEVELS_MS)


def use_levels(spec: str) -> list[int]:
    """Make ``spec`` this process's level table; returns it in ms."""
    global LEVELS_MS, MAX_LEVEL
    LEVELS_MS = parse_levels(spec)
    MAX_LEVEL = len(LEVELS_MS)
    return LEVELS_MS


@contextmanager
def levels_in_use(spec: str) -> Iterator[list[int]]:
    """``spec`` as the level table while in the block (a Spark task in a reused worker)."""
    global LEVELS_MS, MAX_LEVEL
    saved = LEVELS_MS
    try:
        yield use_levels(spec)
    finally:
        LEVELS_MS, MAX_LEVEL = saved, len(saved)


def clamp_level(level: int) -> int:
    return min(level, MAX_LEVEL)


def delay_ms(level: int) -> int:
    return LEVELS_MS[clamp_level(level) - 1]


def level_for(remaining_ms: int) -> int:
    """The largest level whose delay is at most ``remaining_ms`` (0: none is that short)."""
    level = 0
    for i, ms in enumerate(LEVELS_MS):
        if ms > remaining_ms:
            break
        level = i + 1
    return level
