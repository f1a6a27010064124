"""How big a benchmark run is.

``FULL`` is ``make bench``, whose figures the README reports; ``QUICK`` is a tenth or so of
it, to try a change; ``SMOKE`` is the smallest run that still goes through every scenario,
for the test suite, which checks that each scenario runs and answers sensibly (its figures
mean nothing).
"""

import enum
from typing import TypeVar

T = TypeVar("T")


class Scale(enum.Enum):
    FULL = "full"
    QUICK = "quick"
    SMOKE = "smoke"

    def pick(self, full: T, quick: T, smoke: T) -> T:
        """The value for this scale."""
        if self is Scale.FULL:
            return full
        return quick if self is Scale.QUICK else smoke
