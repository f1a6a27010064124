"""RocketMQ 4.9 delay levels (``messageDelayLevel``), 1-based."""

DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_levels(spec: str = DEFAULT_LEVELS) -> list[int]:
    """Delay of each level in ms: level L is ``levels[L - 1]``."""
    return [int(tok[:-1]) * _UNIT_MS[tok[-1]] for tok in spec.split(" ") if tok]


LEVELS_MS = parse_levels()
MAX_LEVEL = len(LEVELS_MS)


def clamp_level(level: int) -> int:
    return min(level, MAX_LEVEL)


def delay_ms(level: int) -> int:
    return LEVELS_MS[clamp_level(level) - 1]
