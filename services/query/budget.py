"""Per-query budget: chain hops walked, record bytes fetched, wall time spent."""

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BudgetLimits:
    hops: int = 2_000_000
    bytes: int = 32 * 1024 * 1024
    millis: int = 5_000


@dataclass(slots=True)
class Budget:
    limits: BudgetLimits
    hops: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def exhausted(self) -> bool:
        return (
            self.hops >= self.limits.hops
            or self.bytes >= self.limits.bytes
            or (time.monotonic() - self.started) * 1000 >= self.limits.millis
        )

    @property
    def timed_out(self) -> bool:
        return (time.monotonic() - self.started) * 1000 >= self.limits.millis

    def hops_left(self) -> int:
        return max(self.limits.hops - self.hops, 0)
